"""A dense layer's group-wise quantized weight (ir/group_quant.py: MatMulNBits, blocked DequantizeLinear,
`quantize(weight_bits=4)`) kept as int4 codes for CONV2D's w_dtype int4 / uint4 (format 1.4, docs/npu.md
section 2), where that command computes exactly what the Relax weight says; anything else returns None
and the weight is folded at compile time and rounded to fp16 like any float weight.

Exact means: integer codes with every code - zero point in what 4 bits hold (int4 -8..7 without zero
points; otherwise codes and zero points both in 0..15 once shifted by one common offset: int4 codes with
int4 zero points shift by 8, (q + 8) - (z + 8) = q - z), scales in fp16's normal range [2^-14, 65504],
and the scales and zero points constant over each group of g = 128, 64 or 32
consecutive K (the largest that holds; the model's own block may be smaller when neighbouring blocks
share scales), K a multiple of g.

The NPU reads fp16 scales: a float32 scale (onnxruntime's quantizer writes them for a float32 model) is
rounded to fp16 here, which moves each weight `s * (q - z)` by at most 2^-11 of itself -- the bound every
float weight of the fp16 datapath has (docs/npu.md section 2). A scale below fp16's normal range would
lose more, so that weight folds to fp16 instead.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...ir.values import constant_value
from .composite import Composite

GROUPS = (128, 64, 32)
FP16_MIN_NORMAL, FP16_MAX = 2.0**-14, 65504.0


def _call(comp: Composite, expr, name: str):
    expr = comp.resolve(expr)
    return expr if isinstance(expr, relax.Call) and expr.op.name == name else None


def _per_group(comp: Composite, expr) -> np.ndarray | None:
    """take(astype(constant), constant index, axis) as the numpy value it computes, or None."""
    take = _call(comp, expr, "relax.take")
    cast = None if take is None else _call(comp, take.args[0], "relax.astype")
    if cast is None or str(cast.attrs.dtype) != "float32" or take.attrs.axis is None:
        return None
    table, index = constant_value(comp.resolve(cast.args[0])), constant_value(comp.resolve(take.args[1]))
    if table is None or index is None:
        return None
    return np.take(table, index, axis=int(take.attrs.axis))


def group_codes(comp: Composite, wexpr, perms: list) -> dict | None:
    """{"codes" [N, 1, 1, K] int8, "scales" [G, N] fp16, "zeros" [G, N] uint8 or None, "group" g}, or None
    (module docstring). `wexpr` is the weight under its permutes `perms` (outermost first)."""
    mul = _call(comp, wexpr, "relax.multiply")
    if mul is None:
        return None
    sub = _call(comp, mul.args[0], "relax.subtract")
    cast = _call(comp, sub.args[0] if sub is not None else mul.args[0], "relax.astype")
    scale = _per_group(comp, mul.args[1])
    zero = _per_group(comp, sub.args[1]) if sub is not None else None
    codes = constant_value(comp.resolve(cast.args[0])) if cast is not None else None
    if codes is None or scale is None or (sub is not None and zero is None) or codes.ndim != 2:
        return None
    if codes.dtype.kind not in "iu" or str(cast.attrs.dtype) != "float32":
        return None
    codes = codes.astype(np.int64)
    zero = np.zeros_like(codes) if zero is None else np.broadcast_to(zero, codes.shape).astype(np.float64)
    scale = np.broadcast_to(scale, codes.shape).astype(np.float32)
    if not np.all(zero == np.round(zero)):
        return None  # a float zero point (MatMulNBits of A's type): not a 4-bit code
    zero = zero.astype(np.int64)
    for axes in reversed(perms):
        order = None if axes is None else [int(a) for a in axes]
        codes, zero, scale = codes.transpose(order), zero.transpose(order), scale.transpose(order)
    codes, zero, scale = codes.T, zero.T, scale.T  # x [M, K] @ w [K, N]: the NPU wants rows [N][K]
    k = codes.shape[1]
    group = next(
        (g for g in GROUPS if k % g == 0 and _constant_in_groups(scale, g) and _constant_in_groups(zero, g)), 0
    )
    if not group:
        return None
    scales = scale[:, ::group]
    if not np.all((scales >= FP16_MIN_NORMAL) & (scales <= FP16_MAX)):
        return None  # fp16 would flush it toward 0 (losing more than 2^-11) or overflow
    scales = scales.astype(np.float16)  # the NPU's scales (float32 ones round here, as float weights do)
    symmetric = not zero.any() and codes.min() >= -8 and codes.max() <= 7
    if not symmetric:  # uint4: codes and zero points shifted into 0..15 by one offset
        offset = 8 if min(codes.min(), zero.min()) < 0 else 0
        codes, zero = codes + offset, zero + offset
        if min(codes.min(), zero.min()) < 0 or max(codes.max(), zero.max()) > 15:
            return None
    return {
        "codes": np.ascontiguousarray(codes[:, None, None, :].astype(np.int8)),
        "scales": np.ascontiguousarray(scales.T.astype(np.float16)),
        "zeros": None if symmetric else np.ascontiguousarray(zero[:, ::group].T.astype(np.uint8)),
        "group": group,
    }


def _constant_in_groups(values: np.ndarray, g: int) -> bool:
    n, k = values.shape
    return k % g == 0 and bool(np.all(values.reshape(n, k // g, g) == values.reshape(n, k // g, g)[:, :, :1]))
