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
