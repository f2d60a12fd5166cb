"""An independent numpy model of the NPU's int8 datapath, fp16 depthwise convolution and vector
unit (docs/npu.md section 2), for the tests. Written from the document, not from the C++."""

import numpy as np


def quant_multiplier(*ms):
    """ADD's M_i = round(m_i * 2^n) with the largest n <= 62 keeping every M_i below 2^31 (ties of
    the float64 product round up; the document does not say, and the NPU only sees the integers)."""
    for n in range(62, 0, -1):
        Ms = [int(np.floor(m * 2.0 ** n + 0.5)) for m in ms]
        if all(M < 2 ** 31 for M in Ms):
            return Ms, n
    raise ValueError(ms)


def wrap32(acc):
    return ((acc.astype(np.int64) + 2 ** 31) % 2 ** 32) - 2 ** 31


def round_shift(p, n):
    """rshift_rne(p, n): p / 2^n to nearest, ties to even, in int64. q = p >> n (arithmetic),
    r = p - (q << n), q += 1 if r > 2^(n-1) or (r == 2^(n-1) and q is odd)."""
    p = np.asarray(p, np.int64)
    n = np.asarray(n, np.int64)
    q = p >> n
    r = p - (q << n)
    half = np.left_shift(np.int64(1), n - 1)
    return q + ((r > half) | ((r == half) & (q % 2 == 1)))


def conv_scale(s_x, s_w, s_y):
    """CONV2D's S = fp32(fp32(s_x * s_w[oc]) / s_y), fp32 operations in that order."""
    f = np.float32
    return (f(s_x) * np.asarray(s_w, f)) / f(s_y)


def avg_pool_scale(s_x, kh, kw, s_y):
    """Average pooling's S = fp32(fp32(s_x / (KH * KW)) / s_y)."""
    f = np.float32
    return f(f(s_x) / f(kh * kw)) / f(s_y)


def max_pool_scale(s_x, s_y):
    """Max pooling's S = fp32(s_x / s_y)."""
    return np.float32(s_x) / np.float32(s_y)


def requant(acc, S, zy, lo, hi):
    """y = clamp(z_y + round_half_even(fp32(fp32(acc) * S)), lo, hi): the accumulator to its
    nearest float32, ONE float32 multiply (numpy keeps float32 * float32 in float32), np.rint
    (ties to even), then z_y and the clamp in float64 so huge or infinite products saturate."""
    with np.errstate(over="ignore"):
        prod = np.asarray(acc, np.int64).astype(np.float32) * np.asarray(S, np.float32)
    assert prod.dtype == np.float32
    y = zy + np.rint(prod).astype(np.float64)
    return np.clip(y, lo, hi).astype(np.int8)


def out_size(h, k, stride, dil, pad_lo, pad_hi):
    return (h + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def padded(x, pad_value, top, left, rows, cols):
    """x [N, H, W, C] inside a [N, rows, cols, C] canvas of pad_value, at (top, left); rows or
    columns of x past the canvas are dropped (they are never read)."""
    n, h, w, c = x.shape
    out = np.full((n, rows, cols, c), pad_value, x.dtype)
    hh, ww = min(h, rows - top), min(w, cols - left)
    out[:, top:top + hh, left:left + ww] = x[:, :hh, :ww]
    return out


def taps(xp, oh, ow, i, j, stride, dil):
    r0, c0 = i * dil[0], j * dil[1]
    return xp[:, r0:r0 + (oh - 1) * stride[0] + 1:stride[0], c0:c0 + (ow - 1) * stride[1] + 1:stride[1]]


def conv_int8_model(x, w, bias, S, out_hw, stride, dil, pad, groups, zx, zy, lo, hi):
    """x NHWC int8, w [OC, KH, KW, C/groups] int8. Padding taps are skipped, which equals padding
    x - z_x with 0."""
    oh, ow = out_hw
    oc, kh, kw, _ = w.shape
    rows = (oh - 1) * stride[0] + (kh - 1) * dil[0] + 1
    cols = (ow - 1) * stride[1] + (kw - 1) * dil[1] + 1
    xp = padded(x.astype(np.int64) - zx, 0, pad[0], pad[1], max(rows, pad[0]), max(cols, pad[1]))
    acc = np.zeros((x.shape[0], oh, ow, oc), np.int64) + bias.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = taps(xp, oh, ow, i, j, stride, dil)
            if groups == 1:
                acc += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :].astype(np.int64))
            else:
                acc += patch * w[:, i, j, 0].astype(np.int64)
    return requant(wrap32(acc), S, zy, lo, hi)


def act_fp32(y, act, clip):
    if act == 1:
        return np.where(y < 0, np.float32(0), y)
    if act == 2:
        lo, hi = np.float32(clip[0]), np.float32(clip[1])
        return np.where(y < lo, lo, np.where(y > hi, hi, y))
    return y


def depthwise_fp16_model(x16, w16, bias, out_hw, stride, dil, pad, act, clip):
    """One fp32 accumulator per output from +0.0, products added in the order (kh, kw)."""
    oh, ow = out_hw
    c, kh, kw, _ = w16.shape
    rows = (oh - 1) * stride[0] + (kh - 1) * dil[0] + 1
    cols = (ow - 1) * stride[1] + (kw - 1) * dil[1] + 1
    x = x16.astype(np.float32)
    inside = padded(np.ones_like(x), 0, pad[0], pad[1], max(rows, pad[0]), max(cols, pad[1]))
    xp = padded(x, 0, pad[0], pad[1], max(rows, pad[0]), max(cols, pad[1]))
    acc = np.zeros((x.shape[0], oh, ow, c), np.float32)
    for i in range(kh):
        for j in range(kw):
            prod = taps(xp, oh, ow, i, j, stride, dil) * w16[:, i, j, 0].astype(np.float32)
            acc = np.where(taps(inside, oh, ow, i, j, stride, dil) > 0, acc + prod, acc)
    if bias is not None:
        acc = acc + bias.astype(np.float32)
    return act_fp32(acc, act, clip).astype(np.float16)


def add_int8_model(a, b, za, zb, zy, Ma, Mb, n, lo, hi):
    t = (a.astype(np.int64) - za) * Ma + (b.astype(np.int64) - zb) * Mb
    return np.clip(zy + round_shift(t, n), lo, hi).astype(np.int8)


def add_fp16_model(a, b, act, clip):
    with np.errstate(over="ignore"):
        return act_fp32(a.astype(np.float32) + b.astype(np.float32), act, clip).astype(np.float16)


def pool_windows(x, kh, kw, out_hw, stride, pad):
    """(tap value, tap inside the input) per tap in order (kh, kw), each [N, OH, OW, C]."""
    oh, ow = out_hw
    rows, cols = (oh - 1) * stride[0] + kh, (ow - 1) * stride[1] + kw
    shape = dict(top=pad[0], left=pad[1], rows=max(rows, pad[0]), cols=max(cols, pad[1]))
    xp = padded(x, 0, **shape)
    inside = padded(np.ones(x.shape, bool), False, **shape)
    for i in range(kh):
        for j in range(kw):
            yield taps(xp, oh, ow, i, j, stride, (1, 1)), taps(inside, oh, ow, i, j, stride, (1, 1))


def pool_int8_model(x, kind, kh, kw, out_hw, stride, pad, zx, zy, S, lo, hi):
    acc = None
    for v, ok in pool_windows(x.astype(np.int64) - zx, kh, kw, out_hw, stride, pad):
        if kind == 0:
            acc = (0 if acc is None else acc) + np.where(ok, v, 0)
        else:
            v = np.where(ok, v, np.iinfo(np.int64).min)
            acc = v if acc is None else np.maximum(acc, v)
    return requant(wrap32(acc), S, zy, lo, hi)


def pool_fp16_model(x16, kind, kh, kw, out_hw, stride, pad, act, clip):
    acc = None
    for v, ok in pool_windows(x16.astype(np.float32), kh, kw, out_hw, stride, pad):
        if kind == 0:  # padding taps add +0.0
            acc = (np.float32(0) if acc is None else acc) + np.where(ok, v, np.float32(0))
        else:
            v = np.where(ok, v, np.float32(-np.inf))
            acc = v if acc is None else np.maximum(acc, v)
    if kind == 0:
        acc = acc / np.float32(kh * kw)
    with np.errstate(over="ignore"):
        return act_fp32(acc, act, clip).astype(np.float16)


def extreme_int8(rng, shape):
    x = rng.integers(-128, 128, shape).astype(np.int8)
    mask = rng.random(shape)
    x[mask < 0.15] = -128
    x[mask > 0.85] = 127
    return x
