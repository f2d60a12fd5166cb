"""NORM (docs/npu.md section 2): layernorm and rmsnorm of each row, written from the contract's text with
numpy float32 operations -- each one IEEE-rounded, in the stated order, so the result is bit-exact.

The in-order sums use np.add.accumulate, which adds element after element (np.sum would add pairwise, a
different order and other bits); every other step is one elementwise float32 operation."""

import numpy as np

from . import int8

F32 = np.float32


def _in_order_sum(v):
    """The sum of each row's elements added left to right into an fp32 accumulator from +0.0."""
    start = np.zeros(v.shape[:-1] + (1,), F32)  # +0.0 first: -0.0 + -0.0 would keep the sign
    return np.add.accumulate(np.concatenate([start, v], axis=-1), axis=-1, dtype=F32)[..., -1:]


def norm(kind, x, gamma=None, beta=None, eps=1e-5):
    """What NORM writes for the fp16 rows `x` (any shape; rows are the last axis): fp16.

    kind "layernorm": mean = s / E, var = (in-order sum of (x - mean)^2) / E, y = (x - mean) / sqrt(var +
    eps) * gamma + beta; "rmsnorm": y = x / sqrt((in-order sum of x^2) / E + eps) * gamma. `gamma`,
    `beta`: fp32 rows, or None (the command's 0xFFFFFFFF)."""
    return _norm_f32(kind, np.asarray(x, F32).astype(np.float16).astype(F32), gamma, beta, eps).astype(np.float16)


def norm_int8(kind, q, s_x, z_x, s_y, z_y, gamma=None, beta=None, eps=1e-5):
    """What an int8 NORM writes for the codes `q` (format 1.4): each code dequantized as staging out does,
    fp32(fp32(q - z_x) * s_x), the fp32 steps of `norm`, each fp32 result quantized as staging in does."""
    return int8.quantize(_norm_f32(kind, int8.dequantize(q, s_x, z_x), gamma, beta, eps), s_y, z_y)


def _norm_f32(kind, x, gamma, beta, eps):
    """The fp32 y of every row of the fp32 `x` (the steps of `norm` before its rounding)."""
    with np.errstate(all="ignore"):  # NaN / inf rows follow IEEE, as the contract says
        n = F32(x.shape[-1])
        eps = F32(eps)
        if kind == "layernorm":
            mean = _in_order_sum(x) / n
            d = x - mean
        else:
            d = x
        q = _in_order_sum(d * d)  # the products rounded first, then added
        r = np.sqrt(q / n + eps)
        y = d / r
        if gamma is not None:
            y = y * np.asarray(gamma, F32)
        if beta is not None:
            y = y + np.asarray(beta, F32)
        return y
