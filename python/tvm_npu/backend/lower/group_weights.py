"""A dense layer's group-wise quantized weight (ir/group_quant.py: MatMulNBits, blocked DequantizeLinear,
`quantize(weight_bits=4)`) kept as int4 codes for CONV2D's w_dtype int4 / uint4 (format 1.4, docs/npu.md
section 2), where that command computes exactly what the Relax weight says (ir.group_quant.npu_group_layout
states what exact means). Under fp16 activations (W4A16) anything else returns None and the weight is folded
at compile time and rounded to fp16 like any float weight; under int8 ones (W4A8) the partition check has
refused it already (NPU_E_QUANT_WEIGHT), so the lowering never meets it.

The NPU reads fp16 scales: a float32 scale (onnxruntime's quantizer writes them for a float32 model) is
rounded to fp16 here, which moves each weight `s * (q - z)` by at most 2^-11 of itself -- the bound every
float weight of the fp16 datapath has (docs/npu.md section 2). A scale below fp16's normal range would
lose more, so that weight folds to fp16 instead.
"""

from __future__ import annotations

import logging
import warnings

from ...ir.group_quant import group_parts, npu_group_layout
from ...quantization.weight_int4 import expanded_bytes
from .composite import Composite

_LOG = logging.getLogger(__name__)


def group_codes(comp: Composite, wexpr, perms: list) -> dict | None:
    """{"codes" [N, 1, 1, K] int8, "scales" [G, N] fp16, "zeros" [G, N] uint8 or None, "group" g}, or None
    (module docstring). `wexpr` is the weight under its permutes `perms` (outermost first). A group-wise
    weight it cannot keep is a warning (and a log line) naming the layer, the reason and the bytes the
    fp16 weight costs beyond its int4 codes: never a format lost without a word (issue 31)."""
    parts = group_parts(wexpr, comp.resolve)
    layout = None if parts is None else npu_group_layout(*parts, perms)
    if isinstance(layout, str):
        arrays = [a.T if perms else a for a in parts]  # [K, N] as x @ w reads it (MatMulNBits' one transpose)
        block, lost = expanded_bytes(*arrays)
        k, n = arrays[0].shape
        msg = (
            f"{comp.name}: a group-wise int4 weight (K {k}, N {n}, block {block}) is expanded to fp16 on the "
            f"NPU ({layout}): +{lost} bytes read per run; lm.meta['weight_formats'] and the build report list "
            "each dense layer's format"
        )
        _LOG.warning(msg)
        warnings.warn(msg, stacklevel=2)
    return layout if isinstance(layout, dict) else None
