"""Tests of the reference NPU's int8 CONV2D (dense and depthwise), fp16 depthwise CONV2D, ADD and
POOL kernels, each alone through its global function, for exact equality with the independent
numpy model of docs/npu.md section 2 (tests/npu_ref), on random data including the int8
extremes -128 / 127, large accumulators and clamps. Streams: test_reference_npu_int8_streams.py."""

import numpy as np
import pytest

from conftest import extreme_int8
from npu_ref import fp16, int8, out_size
from npu_stream_pack import T, raises_code

F32 = np.float32


def requant_f64(acc, S, zy, lo, hi):
    """A wrong requantization for the mutation checks: the product in float64."""
    y = zy + np.rint(np.asarray(acc, np.float64) * np.asarray(S, np.float64))
    return np.clip(y, lo, hi).astype(np.int8)


def requant_half_up(acc, S, zy, lo, hi):
    """Another wrong one: the fp32 product rounded half up (floor(p + 0.5))."""
    p = (np.asarray(acc, np.int64).astype(F32) * np.asarray(S, F32)).astype(np.float64)
    return np.clip(zy + np.floor(p + 0.5), lo, hi).astype(np.int8)


def near_tie_pairs(target, count, seed):
    """(acc, S) pairs whose exact product is NOT target (an m + 0.5) but whose fp32 product
    rounds to exactly target: ties to even then picks m or m + 1 while the float64 product
    (exact here: acc < 2^24 has 24 bits, S 24) lies strictly on one side. acc = target / S < 2^24,
    so fp32(acc) is exact and only the multiply's rounding matters."""
    rng = np.random.default_rng(seed)
    S = (rng.uniform(1.0, 2.0, 20000) * 2.0**-17).astype(F32)
    acc = np.rint(target / S.astype(np.float64)).astype(np.int64)
    exact = acc * S.astype(np.float64)
    ok = (acc < 2**24) & (acc.astype(F32) * S == F32(target)) & (exact != target)
    assert ok.sum() >= count, ok.sum()
    return acc[ok][:count], S[ok][:count]


def test_model_requant_rounds_fp32_product_ties_to_even():
    # Exact ties (S = 0.5, odd acc): to the even neighbour, on both sides of 0.
    acc = np.array([-3, 3, -5, 5, -1, 1, -7, 7, -4, 9], np.int64)
    np.testing.assert_array_equal(int8.requantize(acc, F32(0.5), 0, -128, 127), [-2, 2, -2, 2, 0, 0, -4, 4, -2, 4])
    # Near ties: the fp32 product is an exact .5 the float64 product is not.
    for target in [100.5, 101.5, -100.5, -101.5, 20.5, -21.5]:
        a, S = near_tie_pairs(target, 4, int(abs(target) * 10))
        even = np.floor(target) if np.floor(target) % 2 == 0 else np.ceil(target)
        np.testing.assert_array_equal(int8.requantize(a, S, 0, -128, 127), np.full(4, even))
        # float64 goes the way of the exact product, so it differs from even wherever
        # the exact product lies on the other side of the tie.
        side = np.where(a * S.astype(np.float64) > target, np.ceil(target), np.floor(target))
        np.testing.assert_array_equal(requant_f64(a, S, 0, -128, 127), side)
    # fp32(acc) rounds above 2^24: 2^24 + 1 is a tie -> 2^24 (even), times S = 5 * 2^-25 is
    # exactly 2.5 -> 2; the exact product 2.5 + 5 * 2^-25 (and float64's) rounds to 3.
    acc24, S24 = np.array([2**24 + 1]), F32(5 * 2.0**-25)
    assert int8.requantize(acc24, S24, 0, -128, 127)[0] == 2 and requant_f64(acc24, S24, 0, -128, 127)[0] == 3
    assert int8.requantize(np.array([2**31 - 1]), F32(2.0**-31), -128, -128, 127)[0] == -127
    # Huge and tiny S saturate or vanish; the clamp runs on the rounded value.
    big = np.float32(np.finfo(F32).max)
    np.testing.assert_array_equal(
        int8.requantize(np.array([-2, -1, 0, 1, 2**31 - 1]), big, 3, -128, 127), [-128, -128, 3, 127, 127]
    )
    np.testing.assert_array_equal(int8.requantize(np.array([2**31 - 1, -(2**31)]), F32(1e-45), 0, -5, 5), [0, 0])
    # ADD keeps rshift_rne: M = 2^30, n = 31 halves; ties go to the even neighbour.
    np.testing.assert_array_equal(int8.rshift_rne(acc * 2**30, 31), [-2, 2, -2, 2, 0, 0, -4, 4, -2, 4])
    assert int8.multipliers(1.0) == ([2**30], 30)
    assert int8.multipliers(0.5, 0.25) == ([2**30, 2**29], 31)
    # The documented scale formulas, in fp32 operations in that order.
    assert int8.conv_scale(0.1, np.array([0.02]), 0.3).dtype == F32
    assert int8.avg_pool_scale(0.1, 2, 2, 0.1) == F32(0.25) and int8.max_pool_scale(0.1, 0.1) == 1


def requant_cases():
    """(acc, S) pairs for the kernel: exact ties, near ties, the int32 extremes with huge and tiny
    S, and random accumulators over the whole int32 range (fp32(acc) rounds above 2^24) with
    scales that map them into the int8 range."""
    rng = np.random.default_rng(11)
    accs, scales = [], []
    # Exact ties at S = 0.5 and 0.25 (the 2x2 average at equal scales).
    t = np.arange(-255, 256, dtype=np.int64)
    accs += [t, t]
    scales += [np.full(t.size, 0.5, F32), np.full(t.size, 0.25, F32)]
    for i, target in enumerate([100.5, 101.5, -100.5, -101.5, 0.5, -0.5, 63.5, -64.5]):
        a, S = near_tie_pairs(target, 8, i)
        accs.append(a)
        scales.append(S)
    ext = np.array([2**31 - 1, -(2**31), 2**24 + 1, -(2**24) - 3, 1, -1, 0], np.int64)
    for S in [np.finfo(F32).max, F32(1e-45), np.finfo(F32).tiny, F32(1.0), F32(2.0**-24), F32(5 * 2.0**-25)]:
        accs.append(ext)
        scales.append(np.full(ext.size, S, F32))
    # fp32(acc) rounding at ties: odd acc above 2^24 lands on an exact .5 only after rounding.
    odd = 2**24 + 2 * np.arange(-50, 50, dtype=np.int64) * 4 + 1
    accs.append(np.concatenate([odd, -odd]))
    scales.append(np.full(2 * odd.size, 5 * 2.0**-25, F32))
    a = rng.integers(-(2**31), 2**31, 200000)
    accs.append(a)
    scales.append((rng.uniform(-130, 130, a.size) / np.maximum(np.abs(a), 1)).astype(F32))
    acc = np.concatenate(accs)
    S = np.abs(np.concatenate(scales)).astype(F32)
    S[S == 0] = F32(1e-45)
    return acc, S


def test_ref_requantization_is_fp32_multiply_ties_to_even(rt):
    """The kernel's requantization, alone: a 1x1 CONV2D over zeros with zero weights has
    acc = bias, so each output channel requantizes one (acc, S) pair."""
    acc, S = requant_cases()
    oc = acc.size
    x = np.zeros((1, 1, 1, 1), np.int8)
    wt = np.zeros((oc, 1, 1, 1), np.int8)
    for zy, lo, hi in [(0, -128, 127), (-7, -20, 90)]:
        out = np.zeros((1, 1, 1, oc), np.int8)
        rt["conv8"](T(x), T(wt), T(acc.astype(np.int32)), T(S), T(out), 1, 1, 1, 1, 0, 0, 1, 0, zy, lo, hi)
        ref = int8.requantize(acc, S, zy, lo, hi)
        np.testing.assert_array_equal(out.ravel(), ref)
        # The cases tell the documented arithmetic from the tempting wrong ones.
        with np.errstate(over="ignore"):
            assert (requant_f64(acc, S, zy, lo, hi) != ref).sum() >= 10
            assert (requant_half_up(acc, S, zy, lo, hi) != ref).sum() >= 50


# ---------------------------------------------------------------------------------------------
# Kernels alone: random data including the extremes -128 / 127, large accumulators, clamps.
# ---------------------------------------------------------------------------------------------

CONV8_CASES = [
    # n, h, w, c, oc, k, stride, dil, pad (t, l, b, r), groups, zx, zy, (lo, hi)
    (1, 5, 5, 3, 4, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, 0, 0, (-128, 127)),
    (2, 7, 6, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, -128, 5, (-128, 127)),
    (1, 9, 8, 4, 3, (3, 2), (2, 2), (1, 1), (1, 0, 1, 1), 1, 127, -3, (-3, 127)),  # relu clamp
    (1, 9, 9, 2, 5, (3, 3), (1, 2), (2, 2), (2, 2, 2, 2), 1, 17, 0, (-20, 30)),  # clip clamp
    (1, 1, 6, 70, 33, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, -128, -128, (-128, 127)),
    (1, 6, 6, 64, 40, (3, 3), (2, 1), (1, 1), (3, 1, 0, 2), 1, 127, 127, (-128, 127)),
    (1, 7, 7, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8, -128, 3, (-128, 127)),  # depthwise
    (2, 9, 8, 5, 5, (5, 3), (2, 2), (2, 1), (2, 1, 2, 1), 5, 127, -7, (-7, 100)),
    (1, 5, 5, 40, 40, (3, 3), (1, 2), (1, 1), (1, 1, 1, 1), 40, 0, 0, (-128, 127)),
]


@pytest.mark.parametrize("case", CONV8_CASES)
def test_ref_conv2d_int8_matches_model(rt, case):
    n, h, w, c, oc, k, stride, dil, pad, groups, zx, zy, (lo, hi) = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = extreme_int8(rng, (n, h, w, c))
    wt = extreme_int8(rng, (oc, *k, c // groups))
    bias = rng.integers(-(2**12), 2**12, oc).astype(np.int32)
    # Scales (the documented fp32 formula) that map the accumulator's typical spread (about
    # sqrt(taps) * 100 * 90) onto some tens of output steps, so outputs spread and some clamp.
    spread = np.sqrt(k[0] * k[1] * c // groups) * 100 * 90
    s_x, s_y = 0.05, 0.07
    S = int8.conv_scale(s_x, rng.uniform(20, 80, oc) / spread * s_y / s_x, s_y)
    oh = out_size(h, k[0], stride[0], dil[0], pad[0], pad[2])
    ow = out_size(w, k[1], stride[1], dil[1], pad[1], pad[3])
    out = np.full((n, oh, ow, oc), 99, np.int8)
    rt["conv8"](T(x), T(wt), T(bias), T(S), T(out), *stride, *dil, pad[0], pad[1], groups, zx, zy, lo, hi)
    ref = int8.conv2d(x, wt, bias, S, (oh, ow), stride, dil, pad, groups, zx, zy, lo, hi)
    np.testing.assert_array_equal(out, ref)
    assert len(np.unique(out)) > 3  # the scales keep outputs spread, not all clamped


def test_ref_conv2d_int8_accumulator_extremes(rt):
    """Large accumulators and int32 wrap-around (fp32(acc) rounds above 2^24), with scales from
    the largest fp32 to the smallest subnormal."""
    rng = np.random.default_rng(5)
    x = np.full((1, 3, 3, 64), -128, np.int8)
    x[0, 1, 1, ::2] = 127
    wt = extreme_int8(rng, (6, 3, 3, 64))
    wt[0] = -128  # (x - 127) * -128 summed: about 255 * 128 * 576 = 1.9e7 per output
    bias = np.array([2**31 - 1, -(2**31), 2**31 - 10**6, 0, 12345, -1], np.int32)  # wraps
    S = np.array([2.0**-31, 2.0**-24, np.finfo(F32).max, 1.0, 1e-45, 3e-9], F32)
    out = np.zeros((1, 3, 3, 6), np.int8)
    rt["conv8"](T(x), T(wt), T(bias), T(S), T(out), 1, 1, 1, 1, 1, 1, 1, 127, -1, -128, 127)
    ref = int8.conv2d(x, wt, bias, S, (3, 3), (1, 1), (1, 1), (1, 1), 1, 127, -1, -128, 127)
    np.testing.assert_array_equal(out, ref)


def test_ref_conv2d_int8_rejects_bad_arguments(rt):
    x = np.zeros((1, 4, 4, 4), np.int8)
    wt = np.zeros((4, 3, 3, 4), np.int8)
    b = np.zeros(4, np.int32)
    out = np.zeros((1, 2, 2, 4), np.int8)
    ok = np.full(4, 0.5, F32)

    def call(w=wt, S=ok, groups=1, zx=0, zy=0, lo=-128, hi=127, stride=1):
        rt["conv8"](T(x), T(w), T(b), T(S), T(out), stride, stride, 1, 1, 0, 0, groups, zx, zy, lo, hi)

    call()
    call(S=np.array([1e-45, np.finfo(F32).max, 1, 2], F32))  # any finite S > 0
    # A scale that is not finite and > 0 in any channel: refused before anything is written.
    for bad_s in [0.0, -0.0, -0.5, np.inf, -np.inf, np.nan]:
        out[:] = 42
        msg = raises_code("ERR_BAD_STREAM", call, S=np.array([0.5, 0.5, 0.5, bad_s], F32))
        assert "channel 3" in msg
        assert (out == 42).all()
    raises_code("ERR_SHAPE_MISMATCH", call, S=np.full(4, 0.5, np.float64))
    raises_code("ERR_SHAPE_MISMATCH", call, S=np.full(3, 0.5, F32))
    raises_code("ERR_BAD_STREAM", call, zx=128)
    raises_code("ERR_BAD_STREAM", call, zy=-129)
    raises_code("ERR_BAD_STREAM", call, lo=10, hi=9)
    raises_code("ERR_BAD_STREAM", call, hi=128)
    raises_code("ERR_OP_NOT_SUPPORTED", call, w=np.zeros((4, 3, 3, 2), np.int8), groups=2)
    raises_code("ERR_OP_NOT_SUPPORTED", call, stride=3)
    raises_code("ERR_SHAPE_MISMATCH", call, w=np.zeros((4, 3, 3, 3), np.int8))


DW16_CASES = [
    # n, h, w, c, k, stride, dil, pad (t, l), bias, act, clip
    (1, 6, 6, 8, (3, 3), (1, 1), (1, 1), (1, 1), True, 0, (0, 0)),
    (2, 9, 7, 5, (3, 3), (2, 2), (1, 1), (1, 1), False, 1, (0, 0)),
    (1, 9, 9, 33, (5, 3), (1, 2), (2, 1), (4, 1), True, 2, (-0.5, 0.75)),
    (1, 4, 4, 3, (3, 3), (1, 1), (1, 1), (2, 2), True, 2, (0.0, 6.0)),
]


@pytest.mark.parametrize("case", DW16_CASES)
def test_ref_depthwise_fp16_matches_model(rt, case):
    n, h, w, c, k, stride, dil, pad, with_bias, act, clip = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = rng.standard_normal((n, h, w, c)).astype(np.float16)
    x.flat[::7] = np.float16(65504) * np.sign(rng.standard_normal(x.size)[::7]).astype(np.float16)
    wt = (rng.standard_normal((c, *k, 1)) / 3).astype(np.float16)
    bias = rng.standard_normal(c).astype(np.float32) if with_bias else None
    oh = out_size(h, k[0], stride[0], dil[0], pad[0], pad[0])
    ow = out_size(w, k[1], stride[1], dil[1], pad[1], pad[1])
    out = np.empty((n, oh, ow, c), np.float16)
    rt["conv16"](T(x), T(wt), None if bias is None else T(bias), T(out), *stride, *dil, *pad, act, *clip, c)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = fp16.conv2d(x, wt, bias, (oh, ow), stride, dil, pad, act, clip, groups=c)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


ADD_CASES = [(4, 100, 0), (3, 257, -128), (1, 1, 127), (16, 64, 5)]


@pytest.mark.parametrize("rows,elems,zy", ADD_CASES)
def test_ref_add_int8_matches_model(rt, rows, elems, zy):
    rng = np.random.default_rng(rows * 1000 + elems)
    a, b = extreme_int8(rng, (rows, elems)), extreme_int8(rng, (rows, elems))
    za, zb = int(rng.integers(-128, 128)), -128
    (Ma, Mb), n = int8.multipliers(0.07 / 0.05, 0.02 / 0.05)
    for lo, hi in [(-128, 127), (zy, 127), (-10, 10)]:
        out = np.zeros((rows, elems), np.int8)
        rt["add"](T(a), T(b), T(out), 0, lo, hi, za, zb, zy, Ma, Mb, n)
        np.testing.assert_array_equal(out, int8.add(a, b, za, zb, zy, Ma, Mb, n, lo, hi))
    # Extreme multipliers and shifts: M just below 2^31 with n = 62, and n = 1.
    for Ma, Mb, n in [(2**31 - 1, 2**31 - 1, 62), (2**31 - 1, 0, 1), (1, 2**30, 31)]:
        out = np.zeros((rows, elems), np.int8)
        rt["add"](T(a), T(b), T(out), 0, -128, 127, za, zb, zy, Ma, Mb, n)
        np.testing.assert_array_equal(out, int8.add(a, b, za, zb, zy, Ma, Mb, n, -128, 127))


@pytest.mark.parametrize("act,clip", [(0, (0, 0)), (1, (0, 0)), (2, (-1.5, 2.25))])
def test_ref_add_fp16_matches_model(rt, act, clip):
    rng = np.random.default_rng(act)
    a = (rng.standard_normal((5, 300)) * 4).astype(np.float16)
    b = (rng.standard_normal((5, 300)) * 4).astype(np.float16)
    a[0, :4] = [65504, -65504, 6e-8, np.inf]
    b[0, :4] = [65504, -65504, 6e-8, -np.inf]  # overflow to +-inf, subnormals, inf - inf = NaN
    a[1, :3] = [np.float16(2**-24), np.float16(2048), np.nan]
    b[1, :3] = [np.float16(60000), np.float16(1), 1]
    out = np.zeros_like(a)
    rt["add"](T(a), T(b), T(out), act, *clip, 0, 0, 0, 0, 0, 0)
    with np.errstate(invalid="ignore"):
        ref = fp16.add(a, b, act, clip)
    # NaN stays NaN (the document does not fix its payload); every other result bit-exact.
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(out.view(np.uint16)[ok], ref.view(np.uint16)[ok])


POOL_CASES = [
    # n, h, w, c, kind, k, stride, pad (t, l, b, r)
    (1, 6, 6, 8, 0, (2, 2), (2, 2), (0, 0, 0, 0)),
    (2, 7, 7, 5, 1, (3, 3), (2, 2), (1, 1, 1, 1)),
    (1, 8, 9, 3, 0, (3, 3), (1, 1), (1, 1, 1, 1)),  # count_include_pad
    (1, 5, 7, 70, 1, (3, 2), (1, 2), (0, 1, 2, 0)),
    (1, 7, 7, 16, 0, (7, 7), (1, 1), (0, 0, 0, 0)),  # global average pooling
    (2, 5, 6, 4, 1, (5, 6), (1, 1), (0, 0, 0, 0)),  # global max pooling
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_ref_pool_int8_matches_model(rt, case):
    n, h, w, c, kind, k, stride, pad = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = extreme_int8(rng, (n, h, w, c))
    oh = out_size(h, k[0], stride[0], 1, pad[0], pad[2])
    ow = out_size(w, k[1], stride[1], 1, pad[1], pad[3])
    for zx, zy, s_x, s_y, lo, hi in [
        (0, 0, 0.1, 0.1, -128, 127),
        (-128, 3, 0.05, 0.07, 3, 127),
        (127, -128, 0.2, 0.1, -100, 50),
    ]:
        S = int8.avg_pool_scale(s_x, *k, s_y) if kind == 0 else int8.max_pool_scale(s_x, s_y)
        out = np.zeros((n, oh, ow, c), np.int8)
        rt["pool"](T(x), T(out), kind, *k, *stride, pad[0], pad[1], 0, lo, hi, zx, zy, float(S))
        ref = int8.pool(x, kind, *k, (oh, ow), stride, pad[:2], zx, zy, S, lo, hi)
        np.testing.assert_array_equal(out, ref)


def test_ref_pool_int8_average_ties_round_to_even(rt):
    """A 2x2 average at equal scales (S = 0.25) lands on .5 a quarter of the time: every such
    tie goes to the even neighbour (half up, or a float64 product, would differ)."""
    x = extreme_int8(np.random.default_rng(4), (1, 32, 32, 2))
    S = int8.avg_pool_scale(0.1, 2, 2, 0.1)
    assert F32(0.25) == S
    out = np.zeros((1, 16, 16, 2), np.int8)
    rt["pool"](T(x), T(out), 0, 2, 2, 2, 2, 0, 0, 0, -128, 127, 0, 0, float(S))
    ref = int8.pool(x, 0, 2, 2, (16, 16), (2, 2), (0, 0), 0, 0, S, -128, 127)
    np.testing.assert_array_equal(out, ref)
    acc = x.astype(np.int64).reshape(1, 16, 2, 16, 2, 2).sum(axis=(2, 4))
    ties = acc % 4 == 2  # acc / 4 = m + 0.5
    assert ties.sum() >= 100
    np.testing.assert_array_equal(out[ties] % 2, 0)  # every tie rounded to an even value
    assert (requant_half_up(acc, S, 0, -128, 127) != ref).sum() >= 25


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("act,clip", [(0, (0, 0)), (2, (-0.25, 1.0))])
def test_ref_pool_fp16_matches_model(rt, case, act, clip):
    n, h, w, c, kind, k, stride, pad = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    x = (rng.standard_normal((n, h, w, c)) * 3).astype(np.float16)
    x.flat[::11] = np.float16(65504)
    x.flat[5::13] = np.float16(-65504)
    oh = out_size(h, k[0], stride[0], 1, pad[0], pad[2])
    ow = out_size(w, k[1], stride[1], 1, pad[1], pad[3])
    out = np.zeros((n, oh, ow, c), np.float16)
    rt["pool"](T(x), T(out), kind, *k, *stride, pad[0], pad[1], act, *clip, 0, 0, 0.0)
    ref = fp16.pool(x, kind, *k, (oh, ow), stride, pad[:2], act, clip)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


def test_ref_pool_max_fp16_propagates_nan(rt):
    x = np.arange(16, dtype=np.float16).reshape(1, 4, 4, 1)
    x[0, 1, 1, 0] = np.nan
    out = np.zeros((1, 2, 2, 1), np.float16)
    rt["pool"](T(x), T(out), 1, 2, 2, 2, 2, 0, 0, 0, 0.0, 0.0, 0, 0, 0.0)
    assert np.isnan(out[0, 0, 0, 0]) and list(out.ravel()[1:]) == [7, 13, 15]


def test_ref_vector_ops_reject_bad_arguments(rt):
    x = np.zeros((1, 4, 4, 2), np.int8)
    out = np.zeros((1, 2, 2, 2), np.int8)

    def pool(kind=1, k=2, s=2, pad=0, S=1.0, lo=-128, hi=127, zx=0):
        return rt["pool"](T(x), T(out), kind, k, k, s, s, pad, pad, 0, lo, hi, zx, 0, S)

    pool()
    pool(S=1e-45)
    pool(S=float(np.finfo(F32).max))
    raises_code("ERR_BAD_STREAM", pool, kind=2)
    raises_code("ERR_OP_NOT_SUPPORTED", pool, s=3)
    raises_code("ERR_BAD_STREAM", pool, k=0)
    for bad_s in [0.0, -0.0, -1.0, float("inf"), float("nan"), 1e39]:  # 1e39: beyond fp32
        raises_code("ERR_BAD_STREAM", pool, S=bad_s)
    x16, out16 = np.zeros((1, 4, 4, 2), np.float16), np.zeros((1, 2, 2, 2), np.float16)
    rt["pool"](T(x16), T(out16), 1, 2, 2, 2, 2, 0, 0, 0, 0.0, 0.0, 0, 0, 0.0)
    raises_code(
        "ERR_BAD_STREAM", rt["pool"], T(x16), T(out16), 1, 2, 2, 2, 2, 0, 0, 0, 0.0, 0.0, 0, 0, 1.0
    )  # fp16: scale must be 0
    raises_code("ERR_BAD_STREAM", pool, lo=5, hi=4)
    raises_code("ERR_BAD_STREAM", pool, zx=-129)
    raises_code("ERR_BAD_STREAM", pool, k=2, pad=2)  # a max window entirely in the padding
    a = np.zeros((2, 8), np.int8)

    def add(Ma=2**30, Mb=5, n=30, act=0):
        return rt["add"](T(a), T(a), T(np.zeros_like(a)), act, -128, 127, 0, 0, 0, Ma, Mb, n)

    add()
    raises_code("ERR_BAD_STREAM", add, n=0)
    raises_code("ERR_BAD_STREAM", add, Ma=2**31)
    raises_code("ERR_BAD_STREAM", add, act=1)  # int8: the activation lives in lo / hi
    a16 = np.zeros((2, 8), np.float16)
    raises_code("ERR_BAD_STREAM", rt["add"], T(a16), T(a16), T(a16), 0, 0.0, 0.0, 1, 0, 0, 0, 0, 0)
    raises_code("ERR_SHAPE_MISMATCH", rt["add"], T(a), T(a16), T(a), 0, 0, 0, 0, 0, 0, 0, 0, 1)
