"""The Relax form of a group-wise quantized weight, shared by the importer (frontend/blockwise.py), the
weight quantizer (quantization/weight_int4.py) and, later, the NPU lowering that keeps the codes.

``(float(codes) - float(zero_points)) * scales``, with one scale and zero point per `block` elements along
`axis`: each taken with ``take(t, k // block, axis)``. The subtraction is exact (small integers) and the
multiply rounds once, the value ONNX's blocked DequantizeLinear and onnxruntime's MatMulNBits define.
"""

from __future__ import annotations

import numpy as np
from tvm import relax


def group_dequantize(
    codes, scales, zero_points, block: int, axis: int, dim: int, out_dtype: str = "float32", emit=None
):
    """The dequantized weight; `dim` is the length of `codes` along `axis`, `scales` and `zero_points`
    (None: zero) hold ceil(dim / block) entries there. Each step goes through `emit` (expr -> var, e.g. a
    BlockBuilder's emit with names of the caller's choosing); without it, one nested expression."""
    emit = emit or (lambda expr: expr)
    groups = relax.const(np.arange(dim, dtype=np.int64) // block)
    value = emit(relax.op.astype(codes, "float32"))
    if zero_points is not None:
        zp = emit(relax.op.take(emit(relax.op.astype(zero_points, "float32")), groups, axis=axis))
        value = emit(relax.op.subtract(value, zp))
    scale = emit(relax.op.take(emit(relax.op.astype(scales, "float32")), groups, axis=axis))
    value = emit(relax.op.multiply(value, scale))
    return value if out_dtype == "float32" else emit(relax.op.astype(value, out_dtype))
