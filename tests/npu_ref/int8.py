"""The integer datapath (docs/npu.md section 2, "Integer datapath (int8)", "16-bit tensors", "Quantized
staging"), and the parameters the compiler computes for it (scales, multipliers, clamps, tables).

The command functions take the command's operands -- activations NHWC int8, CONV2D weights
[OC][KH][KW][IC / groups] int8, zero points, clamp [lo, hi], fp32 scales S or integer multipliers and a
shift -- and return what the NPU writes (int8, or int16 for an int16 ELTWISE result). Integer sums are
done in int64, which is exact; the accumulator is then wrapped to int32 as the NPU's is.
"""

import numpy as np

from . import exact
from .window import taps

F32 = np.float32


def wrap32(acc):
    """The int32 accumulator: two's-complement wrap-around."""
    return ((np.asarray(acc, np.int64) + 2**31) % 2**32) - 2**31


def requantize(acc, S, z_y, lo=-128, hi=127):
    """y = clamp(z_y + round_half_even(fp32(fp32(acc) * S)), lo, hi) (section 2, "Requantization"): the
    int32 accumulator to its nearest fp32, ONE fp32 multiply, rounding to the nearest integer with ties to
    even, then z_y and the clamp (in float64, so an infinite product saturates)."""
    with np.errstate(over="ignore"):
        prod = np.asarray(acc, np.int64).astype(F32) * np.asarray(S, F32)
    assert prod.dtype == F32
    return np.clip(z_y + np.rint(prod).astype(np.float64), lo, hi).astype(np.int8)


def rshift_rne(t, n):
    """t / 2^n to the nearest integer, ties to even, in int64 (section 2, "Elementwise add"):
    q = t >> n (arithmetic), r = t - (q << n), q += 1 if r > 2^(n-1) or (r == 2^(n-1) and q is odd)."""
    t, n = np.asarray(t, np.int64), np.asarray(n, np.int64)
    q = t >> n
    r = t - (q << n)
    half = np.left_shift(np.int64(1), n - 1)
    return q + ((r > half) | ((r == half) & (q % 2 == 1)))


# --- The compiler's parameters (section 2) ----------------------------------------------------------------


def conv_scale(s_x, s_w, s_y):
    """CONV2D's S = fp32(fp32(s_x * s_w[oc]) / s_y), fp32 operations in that order; s_w per channel."""
    return (F32(s_x) * np.asarray(s_w, F32)) / F32(s_y)


def avg_pool_scale(s_x, kh, kw, s_y):
    """Average pooling's S = fp32(fp32(s_x / (KH * KW)) / s_y)."""
    return F32(F32(s_x) / F32(kh * kw)) / F32(s_y)


def max_pool_scale(s_x, s_y):
    """Max pooling's S = fp32(s_x / s_y)."""
    return F32(s_x) / F32(s_y)


def multipliers(*ratios, bound=2**31):
    """([M_i], n): M_i = round(ratio_i * 2^n) in float64 (ties to even), with the largest n <= 62 that keeps
    every M_i below `bound` (2^31; less for a multiply of int16 operands)."""
    for n in range(62, 0, -1):
        ms = [round(r * 2.0**n) for r in ratios]
        if max(ms) < bound:
            return ms, n
    raise ValueError(f"no shift keeps round({ratios} * 2^n) below {bound}")


def eltwise_multipliers(kind, s_a, s_b, s_y, a_dtype=np.int8, b_dtype=np.int8):
    """(M_a, M_b, n) of an ELTWISE (or ADD): s_a / s_y and s_b / s_y, or for a multiply s_a * s_b / s_y and
    M_b = 0 with M_a also below 2^(62 - k_a - k_b) (k = 8 for int8, 16 for int16 operands)."""
    if kind == "multiply":
        k = 8 * (np.dtype(a_dtype).itemsize + np.dtype(b_dtype).itemsize)
        (m,), n = multipliers(s_a * s_b / s_y, bound=min(2**31, 2 ** (62 - k)))
        return m, 0, n
    (m_a, m_b), n = multipliers(s_a / s_y, s_b / s_y)
    return m_a, m_b, n


def clamp(act, s_y, z_y, clip=(0.0, 6.0)):
    """(lo, hi): the int8 range narrowed by a fused activation "none", "relu" (lo = z_y) or "clip"
    (lo = max(-128, z_y + round(a / s_y)), hi = min(127, z_y + round(b / s_y)))."""
    lo, hi = -128, 127
    if act == "relu":
        return max(lo, z_y), hi
    if act == "clip":
        return max(lo, z_y + int(np.rint(clip[0] / s_y))), min(hi, z_y + int(np.rint(clip[1] / s_y)))
    return lo, hi


def unary_table(func, alpha, s_x, z_x, s_y, z_y):
    """The int8 UNARY table: entry q + 128 = clamp(z_y + round_half_even(f(s_x (q - z_x)) / s_y)), f the
    exact function in float64."""
    q = np.arange(-128, 128, dtype=np.float64)
    y = exact.function(func, s_x * (q - z_x), alpha) / s_y
    return np.clip(np.rint(y) + z_y, -128, 127).astype(np.int8)


# --- Commands --------------------------------------------------------------------------------------------


def conv2d(x, w, bias, S, out_hw, stride=(1, 1), dil=(1, 1), pad=(0, 0), groups=1, z_x=0, z_y=0, lo=-128, hi=127):
    """CONV2D on int8: acc[oc] = bias[oc] + the sum over taps inside the input of (x - z_x) * w (taps in
    the padding skipped, the same as padding with z_x), wrapped to int32 and requantized with S[oc].
    x [N, H, W, C]; w [OC, KH, KW, C] (groups 1) or [C, KH, KW, 1] (depthwise, groups = C = OC)."""
    return requantize(conv2d_acc(x, w, bias, out_hw, stride, dil, pad, groups, z_x), S, z_y, lo, hi)


def conv2d_acc(x, w, bias, out_hw, stride=(1, 1), dil=(1, 1), pad=(0, 0), groups=1, z_x=0):
    """CONV2D's int32 accumulator (wrapped) before the requantization of `conv2d`."""
    x, w = np.asarray(x, np.int64) - z_x, np.asarray(w, np.int64)
    oc, kh, kw, ic = w.shape
    depthwise = groups != 1
    assert not depthwise or groups == x.shape[3] == oc and ic == 1, "groups is 1 or in_c (= oc)"
    acc = np.zeros((x.shape[0], *out_hw, oc), np.int64) + np.asarray(bias, np.int64)
    for i, j, at, src in taps(x.shape[1:3], kh, kw, out_hw, stride, dil, pad):
        acc[at] += x[src] * w[:, i, j, 0] if depthwise else x[src] @ w[:, i, j, :].T
    return wrap32(acc)


def saturated(acc, S, z_y, lo=-128, hi=127) -> int:
    """How many results of `requantize` saturate (docs/npu.md section 5, "Saturation and overflow
    counters"): z_y + round_half_even(fp32(acc) * S) beyond [-128, 127] on a side whose clamp bound is
    the dtype's own and not z_y (a relu's lo = z_y, or a range ending at 0, clips by design)."""
    with np.errstate(over="ignore"):
        prod = np.asarray(acc, np.int64).astype(F32) * np.asarray(S, F32)
    y = z_y + np.rint(prod).astype(np.float64)
    return int((((y > 127) & (hi == 127) & (z_y != 127)) | ((y < -128) & (lo == -128) & (z_y != -128))).sum())


def eltwise(kind, a, b, z_a, z_b, z_y, m_a, m_b, n, lo=None, hi=None, out_dtype=np.int8):
    """ELTWISE on integers (section 2): with ta = (a - z_a) * M_a and tb = (b - z_b) * M_b in int64, t is
    ta + tb, ta - tb, max(ta, tb), min(ta, tb), or (a - z_a) * (b - z_b) * M_a for "multiply";
    y = clamp(z_y + rshift_rne(t, n), lo, hi) stored as `out_dtype` (int8 or int16; [lo, hi] defaults to
    its range). a and b are int8 or int16 codes, b broadcast as numpy broadcasts it."""
    da, db = np.asarray(a, np.int64) - z_a, np.asarray(b, np.int64) - z_b
    if kind == "multiply":
        t = da * db * m_a
    else:
        ta, tb = da * m_a, db * m_b
        t = {
            "add": lambda: ta + tb,
            "subtract": lambda: ta - tb,
            "maximum": lambda: np.maximum(ta, tb),
            "minimum": lambda: np.minimum(ta, tb),
        }[kind]()
    info = np.iinfo(out_dtype)
    lo, hi = info.min if lo is None else lo, info.max if hi is None else hi
    return np.clip(z_y + rshift_rne(t, n), lo, hi).astype(out_dtype)


def add(a, b, z_a, z_b, z_y, m_a, m_b, n, lo=-128, hi=127):
    """ADD on int8: t = (a - z_a) * M_a + (b - z_b) * M_b, y = clamp(z_y + rshift_rne(t, n), lo, hi)."""
    return eltwise("add", a, b, z_a, z_b, z_y, m_a, m_b, n, lo, hi)


def eltwise_quantized(kind, a, b, s_y, z_y, lo=None, hi=None, out_dtype=np.int8):
    """ELTWISE (or ADD) of quantized tensors a, b = (codes, scale, zero point), the multipliers and shift
    computed as the compiler does (eltwise_multipliers, from the codes' dtypes)."""
    (a, s_a, z_a), (b, s_b, z_b) = a, b
    m_a, m_b, n = eltwise_multipliers(kind, s_a, s_b, s_y, a.dtype, b.dtype)
    return eltwise(kind, a, b, z_a, z_b, z_y, m_a, m_b, n, lo, hi, out_dtype)


def pool(x, kind, kh, kw, out_hw, stride=(1, 1), pad=(0, 0), z_x=0, z_y=0, S=1.0, lo=-128, hi=127):
    """POOL on int8, x [N, H, W, C], `kind` 0 (average) or 1 (max): acc = the sum, or the maximum, over the
    taps inside the input of (x - z_x), requantized with S (avg_pool_scale / max_pool_scale)."""
    x = np.asarray(x, np.int64) - z_x
    avg = kind == 0
    acc = np.full((x.shape[0], *out_hw, x.shape[3]), 0 if avg else np.iinfo(np.int64).min, np.int64)
    for _, _, at, src in taps(x.shape[1:3], kh, kw, out_hw, stride, (1, 1), pad):
        acc[at] = acc[at] + x[src] if avg else np.maximum(acc[at], x[src])
    return requantize(wrap32(acc), S, z_y, lo, hi)


# --- Quantized staging (format 1.3): the runtime's conversions of an fp32 host tensor ----------------------


def quantize(x, scale, zp, dtype=np.int8):
    """q = clamp(round_half_even(fp32(x / s)) + z, lo, hi) with one IEEE fp32 division; NaN -> hi."""
    info = np.iinfo(dtype)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = np.round(np.asarray(x, F32) / F32(scale))
        q = np.clip(r.astype(np.float64) + zp, info.min, info.max)
    return np.where(np.isnan(r), info.max, q).astype(dtype)


def dequantize(q, scale, zp):
    """x = fp32(fp32(q - z) * s)."""
    return (np.asarray(q, np.int32) - zp).astype(F32) * F32(scale)


def matmul(a, b, a_zp, b_zp, S, out_zp, b_group=1, b_transposed=False):
    """MATMUL on int8 (section 2, "Matmul of two activations", format 1.4): a [batch, M, K], b
    [batch / b_group, K, N] ([.., N, K] when `b_transposed`), int8 codes with per-tensor zero points;
    acc = sum over p of (a - a_zp) * (b - b_zp) (int64, exact; wrapped to int32), requantized with the one
    scale S like CONV2D."""
    a = np.asarray(a, np.int64) - a_zp
    b = np.asarray(b, np.int64) - b_zp
    if b_transposed:
        b = np.swapaxes(b, 1, 2)
    b = b[np.arange(a.shape[0]) // b_group]  # the B batch of every output batch
    return requantize(wrap32(np.matmul(a, b)), S, out_zp)
