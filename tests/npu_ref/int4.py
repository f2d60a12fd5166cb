"""Group-wise int4 weights (docs/npu.md section 2, "Group-wise int4 weights", and the layouts of section 6),
written from the contract's text: CONV2D with `w_dtype` int4 / uint4 over a dense layer, W4A16 (fp16
activations) and W4A8 (int8 activations).

The command functions take the rows of a dense layer -- `x` [M, K] (the input pixels), `codes` [N, K] (int4
-8..7 or uint4 0..15, unpacked), `scales` [K / g, N] (fp16 values), `zero_points` [K / g, N] (uint4) or None
(int4: 0) -- and return what the NPU writes, [M, N]. The `pack_*` functions give the bytes the command reads.
"""

import numpy as np

from .fp16 import _round, activation, widen

F32 = np.float32
GROUP_SIZES = (32, 64, 128)
INT4, UINT4 = 7, 8  # the dtype codes of section 2


def w_dtype(signed, group):
    """The CONV2D operand: the dtype code in bits 0-7, the group size in bits 8-15."""
    return (INT4 if signed else UINT4) | group << 8


def pack_weights(codes):
    """[N, K] codes -> [N, K / 2] bytes, two along K, the even k in the low nibble (MatMulNBits' order)."""
    nib = np.asarray(codes, np.int64) & 15
    return (nib[:, 0::2] | nib[:, 1::2] << 4).astype(np.uint8)


def pack_zero_points(zero_points):
    """[G, N] uint4 -> [G, ceil(N / 2)] bytes, two along N, the even output in the low nibble."""
    z = np.asarray(zero_points, np.int64)
    if z.shape[1] % 2:
        z = np.concatenate([z, np.zeros((z.shape[0], 1), np.int64)], axis=1)
    return (z[:, 0::2] | z[:, 1::2] << 4).astype(np.uint8)


def block(bias, scales, zero_points, alignment, requant=None):
    """The int4 dequantization block's bytes (section 6): the bias row, the S row under int8 (`requant`), both
    `align(N * 4, alignment)` apart; the fp16 scales [G][N] packed; then, for uint4, the zero points from the
    next alignment boundary."""
    n = len(bias)
    row = -(-n * 4 // alignment) * alignment
    rows = [np.asarray(bias, F32)] + ([] if requant is None else [np.asarray(requant, F32)])
    out = b"".join(r.tobytes().ljust(row, b"\0") for r in rows)
    sc = np.asarray(scales, np.float16).tobytes()
    out += sc
    if zero_points is not None:
        out = out.ljust(len(out) - len(sc) + -(-len(sc) // alignment) * alignment, b"\0")
        out += pack_zero_points(zero_points).tobytes()
    return out


def _offsets(codes, zero_points, groups):
    """(q - z) per weight, [N, K] int64: z is the weight's group's zero point (0 without)."""
    q = np.asarray(codes, np.int64)
    if zero_points is None:
        return q
    return q - np.repeat(np.asarray(zero_points, np.int64), q.shape[1] // groups, axis=0).T


def w4a16(x, codes, scales, zero_points, bias, act=0, clip=(0.0, 6.0)):
    """W4A16: per output and group j, a = +0.0 plus the exact products x[k] * (q[k] - z[j]) one at a time in k
    order (fp32 adds), then y = fp32(y + fp32(a * s[j])) from +0.0 in group order, then y + bias[o], the
    activation in fp32 and one rounding to fp16."""
    x = widen(x)
    s = np.asarray(scales, np.float16).astype(F32)
    groups, g = s.shape[0], x.shape[1] // s.shape[0]
    d = _offsets(codes, zero_points, groups).astype(F32)  # |q - z| <= 15: exact
    y = np.zeros((x.shape[0], d.shape[0]), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(groups):
            a = np.zeros_like(y)
            for k in range(j * g, (j + 1) * g):
                a = a + x[:, k : k + 1] * d[None, :, k]
            y = y + a * s[j]
        y = y + np.asarray(bias, F32)
    assert y.dtype == F32
    return _round(activation(y, act, clip))


def w4a8(x, z_x, codes, scales, zero_points, bias, S, z_y, lo=-128, hi=127):
    """W4A8: per output and group j the exact integer dot product a = sum (x - z_x) * (q - z[j]), then
    y = fp32(y + fp32(fp32(a) * s[j])) from +0.0 in group order, y = fp32(y + bias[o]) (fp32 bias), then the
    int8 requantization of the fp32 y: clamp(z_y + round_half_even(fp32(y * S[o])), lo, hi)."""
    xi = np.asarray(x, np.int64) - z_x
    s = np.asarray(scales, np.float16).astype(F32)
    groups, g = s.shape[0], xi.shape[1] // s.shape[0]
    d = _offsets(codes, zero_points, groups)
    y = np.zeros((xi.shape[0], d.shape[0]), F32)
    for j in range(groups):
        a = xi[:, j * g : (j + 1) * g] @ d[:, j * g : (j + 1) * g].T  # int64: exact
        assert np.abs(a).max(initial=0) < 2**24  # so fp32(a) is exact too
        y = y + a.astype(F32) * s[j]
    with np.errstate(over="ignore"):
        y = y + np.asarray(bias, F32)
        prod = y * np.asarray(S, F32)
    assert prod.dtype == F32
    return np.clip(z_y + np.rint(prod).astype(np.float64), lo, hi).astype(np.int8)


def weight_dma_bytes(n, k, burst_bytes):
    """Bus bytes of loading the packed weights as one DMA row of N * K / 2 bytes (section 5, DMA)."""
    return -(-(n * k // 2) // burst_bytes) * burst_bytes


__all__ = ["GROUP_SIZES", "block", "pack_weights", "pack_zero_points", "w4a8", "w4a16", "w_dtype", "weight_dma_bytes"]
