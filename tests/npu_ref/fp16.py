"""The float datapath (docs/npu.md section 2, "Float datapath (fp16)" and the fp16 vector unit).

Each function takes the command's operands as numpy arrays -- activations NHWC, CONV2D weights
[OC][KH][KW][IC / groups] -- and returns what the NPU writes: an fp16 array. Operands are rounded to fp16
first (round-to-nearest-even), which is the runtime's fp32 -> fp16 conversion of a host tensor within the
fp16 range (`stage` is that conversion for any float32 input) and changes nothing in an fp16 array; the
host reads a result back as fp32 exactly, so an fp16 result compares equal to the host's output. The
`*_nchw` functions and `dense` are the same commands seen from a Relax model: NCHW tensors and OIHW
weights as the model holds them.

`act` is the command's activation, 0 / "none", 1 / "relu" or 2 / "clip" with `clip` = (lo, hi).
"""

import numpy as np

from .window import out_size, taps

ACTIVATIONS = {"none": 0, "relu": 1, "clip": 2}
POOL_KINDS = {"avg": 0, "max": 1}
F32 = np.float32


def widen(x):
    """x rounded to fp16 (round-to-nearest-even, beyond the range to +-inf), as exact fp32 values."""
    with np.errstate(over="ignore"):
        return np.asarray(x, F32).astype(np.float16).astype(F32)


def stage(x):
    """The runtime's fp32 -> fp16 staging of a float32 model input (section 2): a finite value beyond the
    fp16 range (abs above 65504) saturates to +-65504, then round-to-nearest-even; inf and NaN stay."""
    x = np.asarray(x, F32)
    return widen(np.where(np.isfinite(x), np.clip(x, F32(-65504), F32(65504)), x))


def activation(y, act=0, clip=(0.0, 6.0)):
    """The fused activation in fp32 (section 2, "Activations"), as comparisons: a NaN passes through."""
    act = ACTIVATIONS.get(act, act)
    if act == 1:
        return np.where(y < 0, F32(0), y)
    if act == 2:
        lo, hi = F32(clip[0]), F32(clip[1])
        return np.where(y < lo, lo, np.where(y > hi, hi, y))
    return y


def _round(y):
    """fp32 -> fp16, round-to-nearest-even: the one rounding of every fp16 result."""
    with np.errstate(over="ignore"):
        return np.asarray(y, F32).astype(np.float16)


def _conv_sum(x, w, out_hw, stride, dil, pad, groups):
    """The fp32 accumulators of an fp16 CONV2D: from +0.0, the exact products x * w (fp32 values) added one at a
    time in the order kernel row, kernel column, input channel; taps in the padding skipped."""
    oc, kh, kw, ic = w.shape
    depthwise = groups != 1
    assert not depthwise or groups == x.shape[3] == oc and ic == 1, "groups is 1 or in_c (= oc)"
    acc = np.zeros((x.shape[0], *out_hw, oc), F32)
    # Copies that keep what one step reads contiguous: input channel c [N, H, W, 1], weights [KH, KW, IC, OC].
    x_c, w_t = np.moveaxis(x, 3, 0).copy()[..., None], np.moveaxis(w, 0, 3).copy()
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE: inf * 0 and inf - inf are NaN, no warning
        for i, j, at, src in taps(x.shape[1:3], kh, kw, out_hw, stride, dil, pad):
            if depthwise:
                acc[at] += x[src] * w_t[i, j, 0]
                continue
            for c in range(ic):
                acc[at] += x_c[c][src] * w_t[i, j, c]
    return acc


def conv2d(x, w, bias, out_hw, stride=(1, 1), dil=(1, 1), pad=(0, 0), act=0, clip=(0.0, 6.0), groups=1):
    """CONV2D on fp16 (section 2): x [N, H, W, C], w [OC, KH, KW, C] (groups 1) or [C, KH, KW, 1]
    (depthwise, groups = C = OC), bias [OC] fp32 or None, `pad` = (top, left) and `out_hw` = (OH, OW)
    (bottom / right padding implicit, section 4). Each output's fp32 accumulator starts at +0.0 and adds
    the exact fp16 x fp16 products one at a time in the order kernel row, kernel column, input channel;
    taps in the padding are skipped; then + bias, the activation in fp32, and one rounding to fp16."""
    acc = _conv_sum(widen(x), widen(w), out_hw, stride, dil, pad, groups)
    if bias is not None:
        acc += np.asarray(bias, F32)
    return _round(activation(acc, act, clip))


def conv2d_w8(x, codes, scale, bias, out_hw, stride=(1, 1), dil=(1, 1), pad=(0, 0), act=0, clip=(0.0, 6.0), groups=1):
    """CONV2D on fp16 with int8 weights (section 2, format 1.4): `codes` int8 in CONV2D's weight shape, `scale`
    [OC] fp32 (the weight stands for scale[o] * code), `bias` [OC] fp32 (the block's bias row: zeros for none).
    The exact products x * code summed as fp16 CONV2D sums, then one fp32 multiply by scale[o], then one fp32
    add of bias[o], the activation in fp32, one rounding to fp16."""
    acc = _conv_sum(widen(x), np.asarray(codes, np.int8).astype(F32), out_hw, stride, dil, pad, groups)
    with np.errstate(invalid="ignore", over="ignore"):
        acc = acc * np.asarray(scale, F32)
        acc = acc + np.asarray(bias, F32)
    return _round(activation(acc, act, clip))


def eltwise(kind, a, b, act=0, clip=(0.0, 6.0)):
    """ELTWISE on fp16 (section 2): "add", "subtract", "multiply", "maximum" or "minimum" in fp32 on the
    fp16 operands (`b` broadcast as numpy broadcasts it, which covers the command's b modes), maximum and
    minimum as the comparisons a > b ? a : b and a < b ? a : b, then the activation and one rounding."""
    a, b = widen(a), widen(b)
    with np.errstate(invalid="ignore"):
        y = {
            "add": lambda: a + b,
            "subtract": lambda: a - b,
            "multiply": lambda: a * b,
            "maximum": lambda: np.where(a > b, a, b),
            "minimum": lambda: np.where(a < b, a, b),
        }[kind]()
    return _round(activation(y, act, clip))


def add(a, b, act=0, clip=(0.0, 6.0)):
    """ADD on fp16 (section 2): a + b in fp32, the activation, one rounding."""
    return eltwise("add", a, b, act, clip)


def pool(x, kind, kh, kw, out_hw, stride=(1, 1), pad=(0, 0), act=0, clip=(0.0, 6.0)):
    """POOL on fp16 (section 2), x [N, H, W, C], `kind` 0 / "avg" or 1 / "max". Average: each kernel row's
    taps summed in fp32 from +0.0 in the order kernel column, then the row sums in fp32 from +0.0 in the
    order kernel row (a padding tap adds +0.0, the same as skipping it), divided by KH * KW (IEEE fp32
    division). Max: the maximum over the taps inside the input (a NaN among them gives NaN). Then the
    activation and one rounding."""
    x = widen(x)
    avg = POOL_KINDS.get(kind, kind) == 0
    out_shape = (x.shape[0], *out_hw, x.shape[3])
    acc = np.full(out_shape, 0.0 if avg else -np.inf, F32)
    rows = {}  # kernel row -> its running fp32 sum (average)
    for i, _, at, src in taps(x.shape[1:3], kh, kw, out_hw, stride, (1, 1), pad):
        if avg:
            row = rows.setdefault(i, np.zeros(out_shape, F32))
            row[at] = row[at] + x[src]
        else:
            acc[at] = np.maximum(acc[at], x[src])
    if avg:
        for i in sorted(rows):
            acc = acc + rows[i]
        acc = acc / F32(kh * kw)
    return _round(activation(acc, act, clip))


def unary(func, x, alpha=0.01):
    """UNARY on fp16 for the bit-exact functions of section 2's table, fp32 operations in the order given
    there: hardswish (t = x + 3; t = min(max(t, 0), 6); t = t / 6; y = x * t) and leaky relu
    (x < 0 ? x * alpha : x). sigmoid, tanh and gelu are within 1 fp16 ulp of exact.unary."""
    x, f = widen(x), F32
    with np.errstate(invalid="ignore"):
        if func == "hardswish":
            t = x + f(3)
            t = np.where(t < f(0), f(0), np.where(t > f(6), f(6), t))
            t = t / f(6)
            y = x * t
        elif func == "leaky_relu":
            y = np.where(x < f(0), x * f(alpha), x)
        else:
            raise ValueError(f"{func} is not bit-exact on the NPU: compare with exact.unary within 1 ulp")
    return _round(y)


# --- The same commands seen from a Relax model: NCHW tensors, OIHW weights, (top, left, bottom, right) pads


def conv2d_nchw(x, w, bias=None, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), act="none", clip=(0.0, 6.0), groups=1):
    """conv2d of x [N, C, H, W] and w [OC, C / groups, KH, KW] as the NPU runs it; result NCHW."""
    _, _, h, wd = np.shape(x)
    kh, kw = np.shape(w)[2:]
    out_hw = (out_size(h, kh, stride[0], dil[0], pad[0], pad[2]), out_size(wd, kw, stride[1], dil[1], pad[1], pad[3]))
    x, w = np.transpose(x, (0, 2, 3, 1)), np.transpose(w, (0, 2, 3, 1))
    return conv2d(x, w, bias, out_hw, stride, dil, pad[:2], act, clip, groups).transpose(0, 3, 1, 2)


def dense(x, w, bias=None, act="none"):
    """x [M, K] times w [N, K] transposed (+ bias): a 1x1 CONV2D over the view [1, M, 1, K] (section 4)."""
    m, n = np.shape(x)[0], np.shape(w)[0]
    return conv2d(np.reshape(x, (1, m, 1, -1)), np.reshape(w, (n, 1, 1, -1)), bias, (m, 1), act=act)[0, :, 0]


def pool_nchw(x, kind, k, stride):
    """A k x k pooling without padding over x [N, C, H, W]; result NCHW."""
    _, _, h, w = np.shape(x)
    out_hw = (out_size(h, k, stride, 1, 0, 0), out_size(w, k, stride, 1, 0, 0))
    return pool(np.transpose(x, (0, 2, 3, 1)), kind, k, k, out_hw, (stride, stride)).transpose(0, 3, 1, 2)


def matmul(a, b, b_group=1, b_transposed=False):
    """MATMUL on fp16 (section 2, format 1.4): a [batch, M, K], b [batch / b_group, K, N] ([.., N, K] when
    `b_transposed`); out[o] = a[o] x b[o // b_group]. Each output's fp32 accumulator starts at +0.0 and adds
    the exact fp16 x fp16 products one at a time in k order, then one rounding to fp16."""
    a, b = widen(a), widen(b)
    if b_transposed:
        b = np.swapaxes(b, 1, 2)
    b = b[np.arange(a.shape[0]) // b_group]  # the B batch of every output batch
    acc = np.zeros((a.shape[0], a.shape[1], b.shape[2]), F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for p in range(a.shape[2]):  # one fp32 add per product, in k order (vectorized over outputs only)
            acc = acc + a[:, :, p, None] * b[:, None, p, :]
    return _round(acc)


def matmul_b8(a, codes, scales, b_group=1, b_transposed=False):
    """MATMUL with an int8 B (section 2, "MATMUL with an int8 B", format 1.4): a [batch, M, K] fp16, `codes`
    int8 [batch / b_group, K, N] ([.., N, K] when `b_transposed`), `scales` fp32 [batch / b_group] (B batch q
    stands for scales[q] * codes[q]). The exact products a * code summed from +0.0 in k order as `matmul`,
    then one fp32 multiply by the B batch's scale, then one rounding to fp16."""
    a, b = widen(a), np.asarray(codes, np.int8).astype(F32)
    if b_transposed:
        b = np.swapaxes(b, 1, 2)
    group = np.arange(a.shape[0]) // b_group
    b = b[group]
    acc = np.zeros((a.shape[0], a.shape[1], b.shape[2]), F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for p in range(a.shape[2]):
            acc = acc + a[:, :, p, None] * b[:, None, p, :]
        acc = acc * np.asarray(scales, F32)[group][:, None, None]
    return _round(acc)
