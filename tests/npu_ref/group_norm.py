"""GN_STATS and GN_APPLY (format 1.7, docs/npu.md section 2 "GroupNorm"), written from the contract's text
with numpy float32 operations, each one IEEE-rounded, in the stated order, so the result is bit-exact.

A map is [H, W, C] (NHWC without N), fp16 values; group g is channels [g * C / G, (g + 1) * C / G). A tile
is a run of whole rows (H); its statistics are merged into the per-group records in tile order (Chan et
al.'s formula, in the contract's operation order), the first tile overwriting them. The in-order sums use
np.add.accumulate (element after element; np.sum would add pairwise). exp (the fused SiLU) is evaluated in
float64 and rounded to fp32, as tests/npu_ref/softmax.py does (section 2: bit-exact where the libm's fp32
exp is correctly rounded)."""

import numpy as np

F32 = np.float32


def _in_order_sum(v):
    """Each row of v (2-D) summed left to right into an fp32 accumulator from +0.0."""
    start = np.zeros((v.shape[0], 1), F32)
    return np.add.accumulate(np.concatenate([start, v], axis=1), axis=1, dtype=F32)[:, -1]


def _by_group(tile, groups):
    """[G, n]: group g's elements of the [rows, W, C] tile in the contract's order (rows, pixels, the
    group's channels)."""
    rows, w, c = tile.shape
    return tile.reshape(rows, w, groups, c // groups).transpose(2, 0, 1, 3).reshape(groups, -1)


def tile_stats(tile, groups):
    """(count uint32, mean fp32, m2 fp32), each [G]: one GN_STATS tile's own statistics."""
    v = _by_group(np.asarray(tile, np.float16).astype(F32), groups)
    count = np.full(groups, v.shape[1], np.uint32)
    with np.errstate(all="ignore"):
        mean = _in_order_sum(v) / count.astype(F32)
        d = v - mean[:, None]
        m2 = _in_order_sum(d * d)  # the products rounded first, then added
    return count, mean, m2


def merge(a, b):
    """Chan's update of the records `a` with the tile's `b`, in the contract's order; a record whose count
    is 0 takes the tile's as they are."""
    (na, ma, qa), (nb, mb, qb) = a, b
    with np.errstate(all="ignore"):
        n = (na.astype(np.uint64) + nb).astype(np.uint32)  # u32, modulo 2^32
        fa, fb, fn = na.astype(F32), nb.astype(F32), n.astype(F32)
        delta = mb - ma
        t = fb / fn
        mean = ma + delta * t
        m2 = (qa + qb) + (delta * delta) * (fa * t)
    fresh = na == 0
    return n, np.where(fresh, mb, mean).astype(F32), np.where(fresh, qb, m2).astype(F32)


def stats(x, groups, tiles):
    """The records after one GN_STATS per tile of the [H, W, C] map `x`; `tiles` are the tiles' row counts
    (summing to H), the first with first = 1."""
    assert sum(tiles) == x.shape[0]
    rec, h0 = None, 0
    for n in tiles:
        t = tile_stats(x[h0 : h0 + n], groups)
        rec = t if rec is None else merge(rec, t)
        h0 += n
    return rec


def apply(x, rec, gamma=None, beta=None, eps=1e-5, silu=False):
    """What GN_APPLY writes for the [rows, W, C] tile `x` with the records `rec`: fp16. var = m2 /
    fp32(count), d = sqrt(var + eps), y = (x - mean) / d, * gamma[c], + beta[c], SiLU y / (1 + exp(-y))."""
    count, mean, m2 = rec
    x = np.asarray(x, np.float16).astype(F32)
    c = x.shape[-1]
    k = c // count.shape[0]
    with np.errstate(all="ignore"):
        var = m2 / count.astype(F32)
        d = np.sqrt(var + F32(eps))
        y = (x - np.repeat(mean, k)) / np.repeat(d, k)
        if gamma is not None:
            y = y * np.asarray(gamma, F32)
        if beta is not None:
            y = y + np.asarray(beta, F32)
        if silu:
            e = np.exp((-y).astype(np.float64)).astype(F32)
            y = y / (F32(1) + e)
    return y.astype(np.float16)


def group_norm(x, groups, tiles, gamma=None, beta=None, eps=1e-5, silu=False):
    """The [H, W, C] fp16 result of GN_STATS over `tiles`, then GN_APPLY (any tiling: the records are
    final)."""
    return apply(x, stats(x, groups, tiles), gamma, beta, eps, silu)
