"""The reference NPU's CONV2D with group-wise int4 weights (w_dtype int4 / uint4 | g << 8, format 1.4), from
hand-packed streams (docs/npu.md sections 2, 5 and 6, packed by tests/npu_stream_pack.py and tests/npu_ref/int4.py,
not by the compiler): W4A16 and W4A8 dense layers bit-exact against the numpy model of section 2
(tests/npu_ref/int4) over random shapes, group sizes, symmetric and asymmetric weights; cycles at the activation
dtype's rate; the DMA bytes of the packed weights and the block; the code of every bad operand and block."""

import json

import numpy as np
import pytest

from int4_streams import V14, Dense, w4_stream
from int8_streams import conv_cmd
from npu_ref import int4
from npu_stream_pack import END, FP16, INPUT, INT8, NHWC, NO_BIAS, T, align, command, pack_stream, raises_code, tensor

SRAM = 2097152  # npu-ref


def run(rt, d, **kw):
    mod = rt["create"]("w4", w4_stream(d, **kw))
    out = np.zeros((1, 1, d.M, d.N), np.int8 if d.int8 else np.float32)
    x = d.x if d.int8 else d.x.astype(np.float32)
    mod["w4"](T(np.ascontiguousarray(x.reshape(1, 1, d.M, d.K))), T(out))
    return out.reshape(d.M, d.N), json.loads(mod["get_profile"]())["last"]


def _random_dense(seed, int8):
    rng = np.random.default_rng(seed)
    group = int4.GROUP_SIZES[seed % 3]
    K = group * int(rng.integers(1, 5))
    M, N = int(rng.integers(1, 6)), int(rng.integers(1, 70))
    return rng, Dense(rng, M, K, N, group, signed=seed % 2 == 0, int8=int8)


def _check_profile(prof, d):
    """Section 5: the activation dtype's rate over a dense layer's passes, its MACs, and the DMA bytes of the
    packed weights (N rows of K / 2 bytes, one row here) and of the block, in whole 128-byte bursts; the
    compiler's cost model (backend/plan/cost_model.py) times the stream as the runtime does."""
    from tvm_npu.backend.plan.cost_model import estimate
    from tvm_npu.contract import stream

    s = stream.decode(w4_stream(d))
    est = estimate(s.config, s.commands)
    assert (est.total_cycles, est.macs) == (prof["total_cycles"], d.M * d.N * d.K)
    assert (est.ddr_read_bytes, est.ddr_write_bytes) == (prof["ddr_read_bytes"], prof["ddr_write_bytes"])
    passes = d.M * -(-d.K // 32) * -(-d.N // 32)
    recs = prof["records"]
    conv = recs[3]
    assert conv["opcode"] == "CONV2D"
    assert conv["end"] - conv["start"] == 32 + (1 if d.int8 else 4) * passes
    assert conv["macs"] == d.M * d.N * d.K
    assert recs[1]["bus_bytes"] == int4.weight_dma_bytes(d.N, d.K, 128) == align(d.N * d.K // 2)
    G = d.K // d.group
    rows = 2 if d.int8 else 1
    block = rows * align(d.N * 4) + G * d.N * 2
    if not d.signed:
        block = rows * align(d.N * 4) + align(G * d.N * 2) + G * -(-d.N // 2)
    assert len(d.block()) == block
    assert recs[2]["bus_bytes"] == align(block)


@pytest.fixture(params=["ref", "best"])
def level(request):
    """The kernel level the module runs at: the reference kernel, and the fast one of this CPU."""
    from npu_stream_pack import runtime_functions

    names = ("kernel_level", "set_kernel_level", "best_kernel_level")
    get, put, best = runtime_functions({n: f"tvm_npu.runtime.{n}" for n in names}).values()
    old = get()
    put(best() if request.param == "best" else "ref")
    yield request.param
    put(old)


@pytest.mark.parametrize("seed", range(12))
def test_w4a16_is_bit_exact_to_the_numpy_model(rt, seed, level):
    """Group 32 / 64 / 128, 1-4 groups, int4 and uint4 with random zero points, fp16 inputs over wide exponents
    (the in-order sums round and cancel), scales 2^-17..2^1, relu / clip / none."""
    _, d = _random_dense(seed, int8=False)
    act = seed % 3
    clip = (-3.0, 5.0) if act == 2 else (0.0, 0.0)
    out, prof = run(rt, d, act=act, clip=clip)
    want = d.expect(act, clip)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    _check_profile(prof, d)


@pytest.mark.parametrize("seed", range(12))
def test_w4a8_is_bit_exact_to_the_numpy_model(rt, seed, level):
    """int8 activations with a zero point, int4 / uint4 weights: exact group sums, fp32 across groups, the
    fp32 bias and the requantization; a clamp narrower than int8 on some seeds."""
    _, d = _random_dense(seed, int8=True)
    lo, hi = (-100, 90) if seed % 3 == 0 else (-128, 127)
    out, prof = run(rt, d, clip=(lo, hi))
    want = d.expect(lo=lo, hi=hi)
    np.testing.assert_array_equal(out, want)
    if d.M * d.N >= 64:
        assert len(np.unique(want)) > 16, "the outputs should spread over the int8 range"
    _check_profile(prof, d)


def test_the_numpy_model_is_the_dense_layer_and_its_order_matters():
    """The numpy model computes the dense layer it stands for (within the fp16 rounding of a float64 product
    of the dequantized weights), and the order is not free: dequantizing each weight first (s * (q - z) in
    fp32, one sum over K) differs in some outputs, so the bit-exact tests above discriminate."""
    rng = np.random.default_rng(3)
    d = Dense(rng, 8, 256, 64, 64, signed=False)
    ours = d.expect().astype(np.float64)
    deq = (d.codes - np.repeat(d.zp, 64, axis=0).T) * np.repeat(d.scales.astype(np.float64), 64, axis=0).T
    exact = d.x.astype(np.float64) @ deq.T + d.bias
    np.testing.assert_allclose(ours, exact, rtol=2e-3, atol=1e-3 * np.abs(exact).max())
    deq32 = deq.astype(np.float32)
    acc = np.zeros((8, 64), np.float32)
    for k in range(256):
        acc = acc + d.x[:, k : k + 1].astype(np.float32) * deq32[:, k]
    naive = (acc + d.bias).astype(np.float16).astype(np.float64)
    assert np.count_nonzero(naive != ours) > 0
    # W4A8: summing all groups as one integer with one averaged scale is not what the model states.
    d8 = Dense(rng, 4, 128, 32, 32, signed=True, int8=True)
    a = (d8.x.astype(np.int64) - d8.z_x) @ d8.codes.T
    single = np.clip(d8.z_y + np.rint(a * d8.scales.mean(0) * d8.S + d8.bias * d8.S), -128, 127)
    assert np.count_nonzero(single != d8.expect()) > 0


def test_w4a16_edge_values(rt, level):
    """IEEE in fp32: an infinite input times a code equal to its zero point is NaN, times another code inf;
    NaN spreads; code -8 (int4) is -8; 65504 x 7 over a group overflows fp16 after the scale; a sum of -0.0
    products is +0.0 (every group starts at +0.0)."""
    rng = np.random.default_rng(0)
    d = Dense(rng, 4, 32, 6, 32, signed=True)
    d.codes[:] = 0
    d.codes[0, 0] = 1  # x[0, 0] = inf times 1: inf
    d.codes[1, 1] = -8  # x[1, 1] = NaN: NaN; x[0, 0] = inf times code 0: NaN
    d.codes[2, :] = 7  # 65504 x 7 x 31 with scale 1: fp16 inf
    d.codes[3, 2] = -8  # x[2, 2] = 2^-24 times -8: -2^-21, exact; row 3's -0.0 products sum to +0.0
    d.scales[:] = np.float16(1.0)
    d.bias[:] = 0.0
    d.x[:] = 0
    d.x[0, 0], d.x[1, 1] = np.inf, np.nan
    d.x[2, :] = 65504.0
    d.x[2, 2] = 2.0**-24
    d.x[3, :] = -0.0
    out, _ = run(rt, d)
    want = d.expect()
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert np.isinf(out[0, 0]) and np.isnan(out[0, 1]) and np.isinf(out[0, 2])  # inf x 0 (code 0, no zp): NaN
    assert np.isnan(out[1, 1]) and np.isinf(out[2, 2]) and out[2, 3] == -(2.0**-21)
    assert out[3, 3] == 0.0 and not np.signbit(out[3, 3])


def _small(int8=False, signed=False, group=32):
    return Dense(np.random.default_rng(1), 2, 64, 8, group, signed, int8)


def _validate_bad(rt, code, d=None, **ops):
    return raises_code(code, rt["validate"], w4_stream(d or _small(), **ops))


@pytest.mark.parametrize("int8", [False, True])
def test_the_stream_validates(rt, int8):
    rt["validate"](w4_stream(_small(int8)))


@pytest.mark.parametrize(
    "ops, words",
    [
        (dict(w_dtype=int4.UINT4 | 16 << 8), ["group size 16"]),
        (dict(w_dtype=int4.UINT4 | 256 << 8), ["bits 16-31"]),
        (dict(w_dtype=int4.INT4), ["group size 0"]),
        (dict(w_dtype=int4.INT4 | 96 << 8), ["group size 96"]),
        (dict(w_dtype=int4.UINT4 | 64 << 8 | 1 << 24), ["bits 16-31"]),
        (dict(in_c=48, w_stride=24, in_stride=128), ["multiple of the group"]),
        (dict(kh=3, kw=3), ["dense only"]),
        (dict(groups=8, oc=8, in_c=8), ["dense only"]),
        (dict(bias_addr=NO_BIAS), ["dequantization block"]),
        (dict(w_dtype=9 | 32 << 8), ["w_dtype"]),
    ],
)
def test_bad_int4_operands_are_bad_stream(rt, ops, words):
    msg = _validate_bad(rt, "ERR_BAD_STREAM", **ops)
    assert all(w in msg for w in words), msg


def test_the_weight_rows_are_half_a_byte_per_code(rt):
    """w_stride 32 holds a 64-code row; 31 does not (ERR_BAD_STREAM, as for any short stride)."""
    rt["validate"](w4_stream(_small(), w_stride=32))
    _validate_bad(rt, "ERR_BAD_STREAM", w_stride=31)


@pytest.mark.parametrize("int8", [False, True])
def test_block_addresses_are_checked(rt, int8):
    """The block's footprint (bias row, S row under int8, scales, zero points) is SRAM the output may not
    overlap; it must be aligned and inside SRAM (ERR_INVALID_ADDR)."""
    d = _small(int8)
    stream_block = len(d.block())
    _validate_bad(rt, "ERR_INVALID_ADDR", d, bias_addr=SRAM - align(stream_block) + 128)
    _validate_bad(rt, "ERR_INVALID_ADDR", d, bias_addr=1024 + 64)
    # The output placed on the last bytes of the block (the zero points): overlap.
    in_stride = align(d.M * d.K * (1 if int8 else 2))
    s_q = align(in_stride + d.N * d.K // 2)
    _validate_bad(rt, "ERR_INVALID_ADDR", d, out_addr=s_q + align(stream_block) - 128)


@pytest.mark.parametrize("bad", [0.0, -0.0, -1.0, np.inf, np.nan])
def test_bad_scale_is_bad_stream_at_run_time(rt, bad):
    d = _small()
    d.scales[1, 5] = bad
    blob = w4_stream(d)
    rt["validate"](blob)  # the scales are data: only the run can see them
    msg = raises_code("ERR_BAD_STREAM", run, rt, d)
    assert "group 1 of output channel 5" in msg


@pytest.mark.parametrize("field, bad", [("S", 0.0), ("S", np.inf), ("S", -2.0), ("bias", np.inf), ("bias", np.nan)])
def test_bad_requant_row_or_bias_is_bad_stream_under_int8(rt, field, bad):
    d = _small(int8=True)
    getattr(d, field)[3] = bad
    msg = raises_code("ERR_BAD_STREAM", run, rt, d)
    assert "output channel 3" in msg


def test_int4_is_no_tensor_dtype(rt):
    """The int4 codes have no size of their own (two a byte): a tensor of dtype int4 is refused at load."""
    tensors = [tensor(INPUT, 0, [1, 1, 1, 64], 0, 128, int4.INT4, int4.INT4, NHWC, [1, 1, 1, 64])]
    blob = pack_stream(tensors, [command(END, [])], b"\0" * 256, 4096, 1, 0, version=V14)
    assert "dtype" in raises_code("ERR_BAD_STREAM", rt["validate"], blob)


@pytest.mark.parametrize("seed", range(8))
def test_fast_levels_give_the_reference_bits(rt, seed):
    """Every fast level's int4 kernel (conv2d_int4_fast.cc) gives the reference level's bits, through
    tvm_npu.kernels.run_conv2d, over random shapes of both datapaths, with a first output pixel in the padding
    (its group sums are 0: bias, activation / requantization); the other pixels equal the numpy model. The
    entry checks the packed rows and the whole block against the command (ERR_INVALID_ADDR)."""
    import tvm_npu
    from npu_stream_pack import runtime_functions

    fn = runtime_functions({"conv": "tvm_npu.kernels.run_conv2d"})["conv"]
    int8 = seed % 2 == 1
    _, d = _random_dense(seed + 100, int8)
    elem = 1 if int8 else 2
    act = 0 if int8 else seed % 3
    clip = (-120, 100) if int8 else ((-2.0, 3.0) if act == 2 else (0.0, 0.0))
    conv = conv_cmd(
        INT8 if int8 else FP16, 0, 1, d.M, d.K, d.M * d.K * elem, 0, d.K // 2, 1, 1, d.N, 0, 0, 1, d.M + 1,
        (d.M + 1) * d.N * elem, pad=(0, 1), act=act, clip=clip, in_zp=d.z_x, out_zp=d.z_y,
        w_dtype=int4.w_dtype(d.signed, d.group),
    )[4:]  # fmt: skip
    x, packed, block = d.x.tobytes(), int4.pack_weights(d.codes).tobytes(), d.block()
    out = bytes((d.M + 1) * d.N * elem)
    want = bytes(fn("ref", conv, x, packed, block, out, 128, -1))
    dt = np.int8 if int8 else np.float16
    got = np.frombuffer(want, dt).reshape(d.M + 1, d.N)
    model = d.expect(lo=clip[0], hi=clip[1]) if int8 else d.expect(act, clip)
    np.testing.assert_array_equal(got[1:].astype(model.dtype), model)
    order = ["portable", "avx2", "avx512vnni"]
    for lv in order[: order.index(tvm_npu.runtime.best_kernel_level()) + 1]:
        assert bytes(fn(lv, conv, x, packed, block, out, 128, -1)) == want, lv
        assert bytes(fn(lv, conv, x, packed, block, out, 128, seed)) == want, lv  # through the weight cache
    raises_code("ERR_INVALID_ADDR", fn, "portable", conv, x, packed[:-1], block, out, 128, -1)
    raises_code("ERR_INVALID_ADDR", fn, "portable", conv, x, packed, block[:-1], out, 128, -1)
