"""The Relax form of a group-wise quantized weight, shared by the importer (frontend/blockwise.py), the
weight quantizer (quantization/weight_int4.py), the W4A8 check (partition/) and the NPU lowering that keeps
the codes (backend/lower/group_weights.py).

``(float(codes) - float(zero_points)) * scales``, with one scale and zero point per `block` elements along
`axis`: each taken with ``take(t, k // block, axis)``. The subtraction is exact (small integers) and the
multiply rounds once, the value ONNX's blocked DequantizeLinear and onnxruntime's MatMulNBits define.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .values import constant_value


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


# What CONV2D's w_dtype int4 / uint4 takes (docs/npu.md section 2), largest first: a model's own block may be
# smaller when neighbouring blocks share scales.
# The binding-name prefix of an imported group-wise weight (frontend/blockwise.py names it after its ONNX
# node; the quantizer's weight_formats reads it back). Here, below both, so neither imports the other.
WEIGHT_PREFIX = "w4_"
NPU_GROUPS = (128, 64, 32)
FP16_MIN_NORMAL, FP16_MAX = 2.0**-14, 65504.0


def _call(expr, resolve, name: str):
    expr = resolve(expr)
    return expr if isinstance(expr, relax.Call) and expr.op.name == name else None


def _per_group(expr, resolve) -> np.ndarray | None:
    """take(astype(constant, float32), constant index, axis) as the numpy value it computes, or None. The
    astype may be gone when the table is float32 already (rewrite/identity_casts.py drops it)."""
    take = _call(expr, resolve, "relax.take")
    if take is None or take.attrs.axis is None:
        return None
    cast = _call(take.args[0], resolve, "relax.astype")
    if cast is not None and str(cast.attrs.dtype) != "float32":
        return None
    table = constant_value(resolve(cast.args[0] if cast is not None else take.args[0]))
    index = constant_value(resolve(take.args[1]))
    if table is None or index is None or (cast is None and table.dtype != np.float32):
        return None
    return np.take(table, index, axis=int(take.attrs.axis))


def group_parts(expr, resolve) -> tuple | None:
    """(codes, zero points, scales), each the shape of the codes, of a `group_dequantize` expression with
    constant leaves (`resolve`: a var -> the expression bound to it), or None for any other expression."""
    mul = _call(expr, resolve, "relax.multiply")
    if mul is None:
        return None
    sub = _call(mul.args[0], resolve, "relax.subtract")
    cast = _call(sub.args[0] if sub is not None else mul.args[0], resolve, "relax.astype")
    scale = _per_group(mul.args[1], resolve)
    zero = _per_group(sub.args[1], resolve) if sub is not None else None
    codes = constant_value(resolve(cast.args[0])) if cast is not None else None
    if codes is None or scale is None or (sub is not None and zero is None) or codes.ndim != 2:
        return None
    if codes.dtype.kind not in "iu" or str(cast.attrs.dtype) != "float32":
        return None
    codes = codes.astype(np.int64)
    zero = np.zeros_like(codes) if zero is None else np.broadcast_to(zero, codes.shape).astype(np.float64)
    return codes, zero, np.broadcast_to(scale, codes.shape).astype(np.float32)


def _constant_in_groups(values: np.ndarray, g: int) -> bool:
    n, k = values.shape
    return k % g == 0 and bool(np.all(values.reshape(n, k // g, g) == values.reshape(n, k // g, g)[:, :, :1]))


def _positive_scales(codes, zero, scales, group: int) -> tuple:
    """uint4 `codes` [N, K], `zero` [N, K] and group `scales` [N, K / g] with every scale > 0, the weights
    the same: a group of negative scale `s` as `(q' - z') * -s` with `q' = 15 - q`, `z' = 15 - z` (so
    `q' - z' = z - q`, still 0..15: onnxruntime's symmetric quantizer maps each group's largest magnitude to
    -8, so its scale has that weight's sign and the codes cannot simply be negated), a group of scale 0 as
    codes equal to its zero point (every weight 0) under scale 1."""
    neg = np.repeat(scales < 0, group, axis=1)
    nil = np.repeat(scales == 0, group, axis=1)
    codes = np.where(neg, 15 - codes, np.where(nil, zero, codes))
    zero = np.where(neg, 15 - zero, zero)
    return codes, zero, np.where(scales < 0, -scales, np.where(scales == 0, 1.0, scales)).astype(scales.dtype)


def npu_group_layout(codes, zero, scale, perms: list) -> dict | str:
    """The weight `(codes - zero) * scale` (group_parts' arrays) of ``x [M, K] @ w [K, N]``, under its
    permutes `perms` (axes, outermost first), in CONV2D's int4 form: {"codes" [N, 1, 1, K] int8, "scales"
    [G, N] fp16, "zeros" [G, N] uint8 or None, "group" g}; or the reason it is not exactly that form.

    Exact means: integer zero points, every code - zero point in what 4 bits hold (int4 -8..7 without zero
    points; otherwise codes and zero points both in 0..15 once shifted by one common offset: int4 codes
    with int4 zero points shift by 8, (q + 8) - (z + 8) = q - z), scales in fp16's normal range [2^-14,
    65504] (float32 ones round to fp16, moving each weight by at most 2^-11 of itself), and the scales and
    zero points constant over each group of g = 128, 64 or 32 consecutive K (the largest that holds), K a
    multiple of g. A negative (or zero) scale, which CONV2D does not take, is folded into the group's codes
    and zero point (`_positive_scales`): that group is uint4 then."""
    if not np.all(zero == np.round(zero)):
        return "a float zero point (not a 4-bit code)"
    zero = zero.astype(np.int64)
    for axes in reversed(perms):
        order = None if axes is None else [int(a) for a in axes]
        codes, zero, scale = codes.transpose(order), zero.transpose(order), scale.transpose(order)
    codes, zero, scale = codes.T, zero.T, scale.T  # the NPU wants rows [N][K]
    k = codes.shape[1]
    group = next(
        (g for g in NPU_GROUPS if k % g == 0 and _constant_in_groups(scale, g) and _constant_in_groups(zero, g)), 0
    )
    if not group:
        return f"K {k} is not split into groups of 32, 64 or 128 with one scale and zero point each"
    scales = scale[:, ::group]
    signed = bool((scales <= 0).any())
    if not np.all((np.abs(scales) >= FP16_MIN_NORMAL) & (np.abs(scales) <= FP16_MAX) | (scales == 0)):
        return "a scale outside fp16's normal range [2^-14, 65504]"
    symmetric = not signed and not zero.any() and codes.min() >= -8 and codes.max() <= 7
    if not symmetric:  # uint4: codes and zero points shifted into 0..15 by one offset
        offset = 8 if min(codes.min(), zero.min()) < 0 else 0
        codes, zero = codes + offset, zero + offset
        if min(codes.min(), zero.min()) < 0 or max(codes.max(), zero.max()) > 15:
            return "codes or zero points outside what 4 bits hold"
    if signed:
        codes, zero, scales = _positive_scales(codes, zero, scales, group)
    return {
        "codes": np.ascontiguousarray(codes[:, None, None, :].astype(np.int8)),
        "scales": np.ascontiguousarray(scales.T.astype(np.float16)),
        "zeros": None if symmetric else np.ascontiguousarray(zero[:, ::group].T.astype(np.uint8)),
        "group": group,
    }
