"""An independent numpy model of the NPU's fp16 datapath (docs/npu.md section 2), for the tests.

Written from the document, not from the implementation: fp16 operands, fp32 products accumulated in
the order (kh, kw, ic), fp32 bias, activation in fp32, round-to-nearest-even to fp16.
"""

import numpy as np


def conv2d_fp16(x, w, bias=None, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), act="none", clip=(0, 6),
                groups=1):
    """x: [N, C, H, W] float; w: [OC, IC/groups, KH, KW]. Returns the NPU's result as float32 NCHW.
    groups is 1 or, for depthwise, C (one input channel per output channel)."""
    x = x.astype(np.float16).astype(np.float32)
    w = w.astype(np.float16).astype(np.float32)
    n, c, h, wd = x.shape
    oc, ic, kh, kw = w.shape
    top, left, bottom, right = pad
    xp = np.zeros((n, c, h + top + bottom, wd + left + right), np.float32)
    xp[:, :, top:top + h, left:left + wd] = x
    oh = (h + top + bottom - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (wd + left + right - (kw - 1) * dil[1] - 1) // stride[1] + 1
    acc = np.zeros((n, oc, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dil[0], j * dil[1]
            patch = xp[:, :, r0:r0 + (oh - 1) * stride[0] + 1:stride[0], c0:c0 + (ow - 1) * stride[1] + 1:stride[1]]
            if groups > 1:  # depthwise: output channel c reads input channel c only
                acc = acc + patch * w[:, 0, i, j][None, :, None, None]
                continue
            for k in range(ic):
                # One fp32 add per tap and channel, in the documented order (products are exact).
                acc = acc + patch[:, k][:, None] * w[:, k, i, j][None, :, None, None]
    if bias is not None:
        acc = acc + bias.reshape(1, oc, 1, 1).astype(np.float32)
    return _finish(acc, act, clip)


def _finish(acc, act, clip):
    if act == "relu":
        acc = np.maximum(acc, np.float32(0))
    elif act == "clip":
        acc = np.minimum(np.maximum(acc, np.float32(clip[0])), np.float32(clip[1]))
    return acc.astype(np.float16).astype(np.float32)


def add_fp16(a, b, act="none", clip=(0, 6)):
    f16 = lambda v: v.astype(np.float16).astype(np.float32)  # noqa: E731
    return _finish(f16(a) + f16(b), act, clip)


def pool_fp16(x, kind, k, stride):
    """NCHW pooling without padding: fp32 sum in (kh, kw) order / (KH*KW), or max; rounded to fp16."""
    x = x.astype(np.float16).astype(np.float32)
    oh, ow = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
    taps = [x[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
            for i in range(k) for j in range(k)]
    if kind == "max":
        return np.max(taps, axis=0).astype(np.float16).astype(np.float32)
    acc = np.zeros_like(taps[0])
    for t in taps:
        acc = acc + t
    return (acc / np.float32(k * k)).astype(np.float16).astype(np.float32)


def dense_fp16(x, w, bias=None, act="none"):
    """x: [M, K]; w: [N, K] (y = x w^T + b) as the NPU computes it (a 1x1 convolution)."""
    y = conv2d_fp16(x.T[None, :, :, None], w[:, :, None, None], bias, act=act)
    return y[0, :, :, 0].T


def _f16(v):
    return np.asarray(v, np.float32).astype(np.float16).astype(np.float32)


def eltwise_fp16(kind, a, b, act="none", clip=(0, 6)):
    """ELTWISE on fp16 (docs section 2): the op in fp32 on fp16 operands (numpy broadcasts b), maximum /
    minimum as the comparisons a > b ? a : b and a < b ? a : b, activation in fp32, one rounding."""
    a, b = _f16(a), _f16(b)
    out = {"add": lambda: a + b, "subtract": lambda: a - b, "multiply": lambda: a * b,
           "maximum": lambda: np.where(a > b, a, b), "minimum": lambda: np.where(a < b, a, b)}[kind]()
    return _finish(out.astype(np.float32), act, clip)


def unary_fp16_exact_ops(func, x, alpha=0.01):
    """The bit-exact UNARY functions (docs section 2), fp32 operations in the documented order."""
    x = _f16(x)
    f = np.float32
    with np.errstate(invalid="ignore"):
        if func == "hardswish":
            t = x + f(3)
            t = np.where(t < f(0), f(0), np.where(t > f(6), f(6), t))
            t = t / f(6)
            y = x * t
        elif func == "leaky_relu":
            y = np.where(x < f(0), x * f(alpha), x)
        else:
            raise ValueError(func)
    return y.astype(np.float32).astype(np.float16).astype(np.float32)


def unary_exact(func, x):
    """f computed in float64 (exact to far below an fp16 ulp) on the fp16 input, then rounded to fp16:
    the value docs section 2 promises sigmoid, tanh and gelu within 1 fp16 ulp of."""
    import math
    x = _f16(x).astype(np.float64)
    fn = {"sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0,
          "tanh": math.tanh,
          "gelu": lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2.0))}[func]
    y = np.array([fn(v) if np.isfinite(v) else {"sigmoid": float(v > 0), "tanh": math.copysign(1.0, v),
                                                 "gelu": max(v, 0.0)}[func] if not np.isnan(v) else v
                  for v in x.reshape(-1)], np.float64).reshape(x.shape)
    return y.astype(np.float16).astype(np.float32)


def fp16_ulps(a, b):
    """Distance in fp16 steps between fp16-representable a and b (0 for equal bits or two NaNs)."""
    def ordered(v):
        bits = np.asarray(v, np.float32).astype(np.float16).view(np.int16).astype(np.int32)
        return np.where(bits < 0, -32768 - bits, bits)
    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


def softmax_exact(x):
    """Softmax of each last-axis row of the fp16 input in float64, rounded to fp16: what docs section 2
    promises SOFTMAX within 1 fp16 ulp of."""
    x = _f16(x).astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float16).astype(np.float32)
