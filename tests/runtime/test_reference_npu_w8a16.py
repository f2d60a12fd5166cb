"""The reference NPU's CONV2D with fp16 activations and int8 weights (w_dtype, format 1.4), from hand-packed
streams (docs/npu.md sections 2, 5 and 6, packed by tests/npu_stream_pack.py, not by the compiler):
bit-exact against the numpy model of section 2 (tests/npu_ref/fp16.conv2d_w8) over random dense, convolution
and depthwise shapes and over edge values, its cycles (fp16's rate), and the code of every bad operand."""

import json

import numpy as np
import pytest

from int8_streams import conv_cmd
from npu_ref import fp16, out_size
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    INPUT,
    INT8,
    MAC,
    NHWC,
    NO_BIAS,
    OUTPUT,
    T,
    align,
    command,
    dma,
    pack_stream,
    raises_code,
    tensor,
)

V14 = (1, 4)
W8 = INT8  # the w_dtype operand: int8 codes under fp16 activations


def _layout(H, W, C, OC, k, groups, out_hw):
    """SRAM addresses: input, packed int8 weight rows, the dequantization block, output."""
    wc = 1 if groups != 1 else C
    w_row = k * k * wc
    in_stride, out_stride, q_stride = align(W * C * 2), align(out_hw[1] * OC * 2), align(OC * 4)
    s_w = H * in_stride
    s_q = align(s_w + OC * w_row)
    s_out = s_q + 2 * q_stride
    return dict(
        w_row=w_row, in_stride=in_stride, out_stride=out_stride, q_stride=q_stride, s_w=s_w, s_q=s_q, s_out=s_out
    )


def w8_stream(codes, scale, bias, H, W, stride=1, pad=0, act=0, clip=(0.0, 0.0), groups=1, version=V14, w_dtype=W8):
    """fp32 NHWC input -> DMA (input, weights, block) -> CONV2D fp16 x int8 -> DMA -> fp32 NHWC output. The weight
    rows are packed (w_stride = the row's bytes, often odd), one DMA row for the whole block."""
    OC, k, _, wc = codes.shape
    C = OC if groups != 1 else wc
    OH, OW = out_size(H, k, stride, 1, pad, pad), out_size(W, k, stride, 1, pad, pad)
    L = _layout(H, W, C, OC, k, groups, (OH, OW))
    w_bytes = codes.astype(np.int8).tobytes()
    block = np.zeros((2, L["q_stride"] // 4), np.float32)
    block[0, :OC], block[1, :OC] = bias, scale
    weights = w_bytes.ljust(align(len(w_bytes)), b"\0")
    q_ddr = len(weights)
    weights += block.tobytes()
    in_ddr = len(weights)
    out_ddr = in_ddr + H * L["in_stride"]
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], in_ddr, L["in_stride"], FP16, 4, NHWC, [1, H, W, C]),
        tensor(OUTPUT, 0, [1, OH, OW, OC], out_ddr, L["out_stride"], FP16, 4, NHWC, [1, OH, OW, OC]),
    ]
    cmds = [
        dma(DMA_LOAD, 0, in_ddr, 0, H, W * C * 2, L["in_stride"], L["in_stride"]),
        dma(DMA_LOAD, 1, 0, L["s_w"], 1, len(w_bytes), align(len(w_bytes)), align(len(w_bytes))),
        dma(DMA_LOAD, 1, q_ddr, L["s_q"], 2, OC * 4, L["q_stride"], L["q_stride"]),
        conv_cmd(
            FP16,
            0,
            H,
            W,
            C,
            L["in_stride"],
            L["s_w"],
            L["w_row"],
            k,
            k,
            OC,
            L["s_q"],
            L["s_out"],
            OH,
            OW,
            L["out_stride"],
            stride=(stride, stride),
            pad=(pad, pad),
            act=act,
            clip=clip,
            groups=groups,
            wait={DMA0: 0, DMA1: 0},
            w_dtype=w_dtype,
        ),
        dma(DMA_STORE, 0, L["s_out"], out_ddr, OH, OW * OC * 2, L["out_stride"], L["out_stride"], wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    ddr = out_ddr + OH * L["out_stride"]
    blob = pack_stream(tensors, cmds, weights, ddr, 1, 1, version=version, sram_used=L["s_out"] + OH * L["out_stride"])
    return blob, (OH, OW)


def _run(rt, x, codes, scale, bias, **kw):
    blob, (OH, OW) = w8_stream(codes, scale, bias, x.shape[1], x.shape[2], **kw)
    mod = rt["create"]("w8", blob)
    out = np.zeros((1, OH, OW, codes.shape[0]), np.float32)
    mod["w8"](T(x.astype(np.float32)), T(out))
    prof = json.loads(mod["get_profile"]())["last"]
    return out, prof, (OH, OW)


def _expect(x, codes, scale, bias, hw, stride=1, pad=0, act=0, clip=(0.0, 0.0), groups=1):
    s, p = (stride, stride), (pad, pad)
    return fp16.conv2d_w8(x, codes, scale, bias, hw, s, (1, 1), p, act, clip, groups).astype(np.float32)


def _bits_equal(out, want):
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("seed", range(12))
def test_w8a16_is_bit_exact_to_the_numpy_model(rt, seed):
    """Dense (a 1x1 over a row of tokens), 3x3 convolutions with stride and padding, depthwise; codes over the
    whole int8 range (-128 included), scales 2^-14..2^2 so the multiply rounds, activations with wide exponents
    so the in-order sums round and cancel."""
    rng = np.random.default_rng(seed)
    kind = ("dense", "conv", "depthwise")[seed % 3]
    if kind == "dense":
        H, W, C, OC, k, stride, pad, groups = (
            1,
            int(rng.integers(1, 9)),
            int(rng.integers(1, 300)),
            int(rng.integers(1, 70)),
            1,
            1,
            0,
            1,
        )
    else:
        H, W, C = (int(v) for v in rng.integers(3, 9, 3))
        k, stride, pad = 3, int(rng.integers(1, 3)), int(rng.integers(0, 2))
        OC, groups = (C, C) if kind == "depthwise" else (int(rng.integers(1, 40)), 1)
    wc = 1 if groups != 1 else C
    codes = rng.integers(-128, 128, (OC, k, k, wc)).astype(np.int8)
    scale = (rng.uniform(0.5, 1.0, OC) * 2.0 ** rng.integers(-14, 3, OC)).astype(np.float32)
    bias = (rng.standard_normal(OC) * 4).astype(np.float32)
    x = (rng.standard_normal((1, H, W, C)) * 2.0 ** rng.integers(-10, 4, (1, H, W, C))).astype(np.float16)
    act = int(seed % 3 == 1) if seed % 4 else 2
    clip = (-3.0, 5.0) if act == 2 else (0.0, 0.0)
    out, prof, hw = _run(rt, x, codes, scale, bias, stride=stride, pad=pad, act=act, clip=clip, groups=groups)
    _bits_equal(out, _expect(x, codes, scale, bias, hw, stride, pad, act, clip, groups))
    # Section 5: fp16's rate, passes as for any CONV2D (depthwise: channels on columns, taps on rows).
    OH, OW = hw
    if groups == 1:
        passes = OH * OW * k * k * -(-C // 32) * -(-OC // 32)
    else:
        passes = OH * OW * -(-C // 32) * -(-(k * k) // 32)
    rec = prof["records"][3]
    assert rec["opcode"] == "CONV2D" and rec["end"] - rec["start"] == 32 + 4 * passes
    assert rec["macs"] == OH * OW * OC * k * k * wc


def test_w8a16_scale_after_the_sum_is_what_the_model_states():
    """The numpy model discriminates: dequantizing each weight first (scale * code rounded to fp32, then
    the products) differs from one multiply after the exact sum in some outputs."""
    rng = np.random.default_rng(7)
    codes = rng.integers(-128, 128, (64, 1, 1, 200)).astype(np.int8)
    scale = rng.uniform(1e-3, 1e-2, 64).astype(np.float32)
    x = rng.standard_normal((1, 1, 8, 200)).astype(np.float16)
    zero = np.zeros(64, np.float32)
    ours = fp16.conv2d_w8(x, codes, scale, zero, (1, 8))
    deq = (codes.astype(np.float32) * scale[:, None, None, None]).astype(np.float32)
    acc = np.zeros((1, 1, 8, 64), np.float32)
    for c in range(200):
        acc += x[..., c : c + 1].astype(np.float32) * deq[:, 0, 0, c]
    assert np.count_nonzero(acc.astype(np.float16) != ours) > 0


def test_w8a16_edge_values(rt):
    """IEEE in fp32 before the one rounding: inf x code 0 is NaN, inf x a code is inf, NaN spreads, 65504 x 127
    summed overflows fp16 after the scale (inf), subnormal fp16 inputs times codes stay exact, a sum of -0.0
    products is +0.0 (the accumulator starts there), code -128 is -128."""
    codes = np.array(
        [[1, 0, 0, 0], [0, 1, 0, 0], [127, 127, 0, 0], [-128, 0, 0, 1], [0, 0, 1, -1], [1, 1, 1, 1]], np.int8
    ).reshape(6, 1, 1, 4)
    scale = np.array([1.0, 1.0, 1.0, 2.0**-20, 1.0, 0.5], np.float32)
    bias = np.array([0.0, 0.0, 0.0, 0.0, 0.0, -1.0], np.float32)
    x = np.array(
        [
            [np.inf, 1.0, 0.0, 0.0],
            [np.nan, 2.0, 3.0, 4.0],
            [65504.0, 65504.0, 2.0**-24, -(2.0**-24)],
            [-0.0, -0.0, -0.0, 0.0],
        ],
        np.float16,
    ).reshape(1, 1, 4, 4)
    out, _, hw = _run(rt, x, codes, scale, bias)
    want = _expect(x, codes, scale, bias, hw)
    _bits_equal(out, want)
    px = out[0, 0]
    assert np.isnan(px[0, 1]) and np.isinf(px[0, 0]) and np.isnan(px[1, 5])
    assert np.isinf(px[2, 2]) and px[2, 4] == 2.0**-23 and px[2, 3] == np.float32(-128 * 65504.0 * 2.0**-20)
    assert px[3, 4] == 0.0 and not np.signbit(px[3, 4])


def _block(oc=8, scale=1.0):
    return np.ones((oc, 1, 1, 16), np.int8), np.full(oc, scale, np.float32), np.zeros(oc, np.float32)


@pytest.mark.parametrize("bad", [0.0, -0.0, -1.0, np.inf, np.nan])
def test_bad_scale_is_bad_stream_at_run_time(rt, bad):
    codes, scale, bias = _block()
    scale[5] = bad
    blob, _ = w8_stream(codes, scale, bias, 1, 2)
    rt["validate"](blob)  # the scales are data: only the run can see them
    mod = rt["create"]("w8", blob)
    out = np.full((1, 1, 2, 8), 7.0, np.float32)
    msg = raises_code("ERR_BAD_STREAM", mod["w8"], T(np.ones((1, 1, 2, 16), np.float32)), T(out))
    assert "channel 5" in msg


def _with(**kw):
    codes, scale, bias = _block()
    blob, _ = w8_stream(codes, scale, bias, 1, 2, **kw)
    return blob


def test_w8a16_needs_format_1_4(rt):
    msg = raises_code("ERR_BAD_STREAM", rt["validate"], _with(version=(1, 3)))
    assert "word 31" in msg
    rt["validate"](_with())


@pytest.mark.parametrize("w_dtype", [FP16, 3, 4, 5, 9])
def test_other_w_dtypes_are_bad_stream(rt, w_dtype):
    msg = raises_code("ERR_BAD_STREAM", rt["validate"], _with(w_dtype=w_dtype))
    assert "w_dtype" in msg


def _conv(**kw):
    """A lone W8A16 CONV2D (16 -> 8 channels, 1 x 2 pixels) for the validation tests; operands by keyword."""
    ops = dict(dtype=FP16, in_addr=0, in_h=1, in_w=2, in_c=16, in_stride=128, w_addr=128, w_stride=16, kh=1, kw=1)
    ops.update(oc=8, bias_addr=256, out_addr=512, out_h=1, out_w=2, out_stride=128, stride_h=1, stride_w=1)
    ops.update(dil_h=1, dil_w=1, groups=1, w_dtype=W8)
    ops.update(kw)
    return command(0x10, ops)


def _one(cmd, version=V14):
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, version=version)


def test_lone_command_validates_and_int8_dtype_with_w_dtype_is_bad(rt):
    rt["validate"](_one(_conv()))
    raises_code(
        "ERR_BAD_STREAM", rt["validate"], _one(_conv(dtype=INT8, bias_addr=256, clip_lo=0xFFFFFF80, clip_hi=127))
    )
    msg = raises_code("ERR_BAD_STREAM", rt["validate"], _one(_conv(bias_addr=NO_BIAS)))
    assert "dequantization block" in msg


@pytest.mark.parametrize(
    "ops",
    [
        dict(out_addr=256),  # the output on the dequantization block (two rows: 256..511)
        dict(out_addr=384),  # ... its scale row
        dict(w_addr=2097152 - 64),  # 8 rows of 16 bytes: past SRAM
        dict(bias_addr=2097152 - 128),  # the scale row past SRAM
        dict(bias_addr=300),  # misaligned
    ],
)
def test_w8a16_addresses_are_invalid_addr(rt, ops):
    raises_code("ERR_INVALID_ADDR", rt["validate"], _one(_conv(**ops)))


def test_w8a16_weight_rows_are_one_byte_per_code(rt):
    """w_stride of 16 holds a 16-code row (fp16 would need 32: ERR_BAD_STREAM for that)."""
    rt["validate"](_one(_conv(w_stride=16)))
    raises_code("ERR_BAD_STREAM", rt["validate"], _one(_conv(w_stride=16, w_dtype=0)))
    raises_code("ERR_BAD_STREAM", rt["validate"], _one(_conv(w_stride=15)))


@pytest.mark.parametrize("level", ["portable", "avx2", "avx512vnni"])
def test_fast_levels_give_the_reference_bits(rt, level):
    """The fast kernels run the reference kernel for W8A16 (conv2d_fast.cc): every level's bits are the
    reference level's, through tvm_npu.kernels.run_conv2d (the command alone, buffers as bytes)."""
    import tvm_npu
    from npu_stream_pack import runtime_functions

    order = ["portable", "avx2", "avx512vnni"]
    if order.index(level) > order.index(tvm_npu.runtime.best_kernel_level()):
        pytest.skip(f"this CPU has no {level}")
    run = runtime_functions({"conv": "tvm_npu.kernels.run_conv2d"})["conv"]
    rng = np.random.default_rng(5)
    h, w, c, oc, k = 4, 5, 24, 20, 3
    in_stride, out_stride, q_row = w * c * 2, w * oc * 2, align(oc * 4)
    ops = dict(dtype=FP16, in_h=h, in_w=w, in_c=c, in_stride=in_stride, w_stride=k * k * c, kh=k, kw=k, oc=oc)
    ops.update(out_h=h, out_w=w, out_stride=out_stride, stride_h=1, stride_w=1, dil_h=1, dil_w=1, pad_top=1)
    ops.update(pad_left=1, act=1, groups=1, w_dtype=W8)
    words = command(0x10, ops)[4:]
    x = (rng.standard_normal(h * w * c) * 3).astype(np.float16).tobytes()
    codes = rng.integers(-128, 128, oc * k * k * c).astype(np.int8).tobytes()
    block = np.zeros((2, q_row // 4), np.float32)
    block[0, :oc], block[1, :oc] = rng.standard_normal(oc), rng.uniform(1e-3, 1e-1, oc)
    out = bytes(h * out_stride)
    want = run("ref", words, x, codes, block.tobytes(), out, 128, -1)
    got = run(level, words, x, codes, block.tobytes(), out, 128, -1)
    assert bytes(got) == bytes(want)
    ref = fp16.conv2d_w8(
        np.frombuffer(x, np.float16).reshape(1, h, w, c),
        np.frombuffer(codes, np.int8).reshape(oc, k, k, c),
        block[1, :oc],
        block[0, :oc],
        (h, w),
        pad=(1, 1),
        act=1,
    )
    assert bytes(want) == ref.tobytes()
    # The entry checks its buffers against the command: 1 byte a code, two rows in the block.
    raises_code("ERR_INVALID_ADDR", run, level, words, x, codes[:-1], block.tobytes(), out, 128, -1)
    raises_code("ERR_INVALID_ADDR", run, level, words, x, codes, block.tobytes()[: oc * 4], out, 128, -1)
