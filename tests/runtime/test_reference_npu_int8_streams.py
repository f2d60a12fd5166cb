"""Hand-packed int8 / depthwise / ADD / POOL command streams (docs/npu.md section 6) run end to end
through runtime.NPUModuleCreate with int8 host I/O, their cycle counts against the formulas of
section 5, and the validation of the new commands and descriptors."""

import functools
import json
import random
import struct

import numpy as np
import pytest

import npu_stream_pack
from conftest import extreme_int8
from npu_ref import fp16, int8, out_size
from npu_stream_pack import (
    ADD,
    ALL_DONE,
    BIAS,
    CONV2D,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    INT32,
    MAC,
    NCHW,
    NHWC,
    NO_BIAS,
    NO_IO,
    NPU_REF,
    NPU_SMALL,
    OUTPUT,
    POOL,
    ROWS,
    VECTOR,
    WEIGHT,
    T,
    align,
    command,
    dma,
    f32_bits,
    pack_stream,
    raises_code,
    refresh_crc,
)

# ---------------------------------------------------------------------------------------------
# Hand-packed streams (docs/npu.md section 6, npu_stream_pack.py), run end to end.
# ---------------------------------------------------------------------------------------------

# Tensor descriptors here default to int8 on the NPU and on the host.
tensor = functools.partial(npu_stream_pack.tensor, dtype=INT8, host_dtype=INT8)


def clip_words(dtype, clip):
    fmt = "<2f" if dtype == FP16 else "<2i"
    return list(struct.unpack("<2I", struct.pack(fmt, *clip)))


def conv_cmd(
    dtype,
    in_addr,
    in_h,
    in_w,
    in_c,
    in_stride,
    w_addr,
    w_stride,
    kh,
    kw,
    oc,
    bias_addr,
    out_addr,
    out_h,
    out_w,
    out_stride,
    stride=(1, 1),
    dil=(1, 1),
    pad=(0, 0),
    act=0,
    clip=(0, 0),
    groups=1,
    in_zp=0,
    out_zp=0,
    pstride=(0, 0),
    wait=None,
):
    lo, hi = clip_words(dtype, clip)
    return command(
        CONV2D,
        dict(
            dtype=dtype,
            in_addr=in_addr,
            in_h=in_h,
            in_w=in_w,
            in_c=in_c,
            in_stride=in_stride,
            w_addr=w_addr,
            w_stride=w_stride,
            kh=kh,
            kw=kw,
            oc=oc,
            bias_addr=bias_addr,
            out_addr=out_addr,
            out_h=out_h,
            out_w=out_w,
            out_stride=out_stride,
            stride_h=stride[0],
            stride_w=stride[1],
            dil_h=dil[0],
            dil_w=dil[1],
            pad_top=pad[0],
            pad_left=pad[1],
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            groups=groups,
            in_zp=in_zp,
            out_zp=out_zp,
            in_pstride=pstride[0],
            out_pstride=pstride[1],
        ),
        wait,
    )


def add_cmd(
    dtype,
    a_addr,
    a_stride,
    b_addr,
    b_stride,
    out_addr,
    out_stride,
    rows,
    row_elems,
    act=0,
    clip=(0, 0),
    a_zp=0,
    b_zp=0,
    out_zp=0,
    a_mult=0,
    b_mult=0,
    shift=0,
    wait=None,
):
    lo, hi = clip_words(dtype, clip)
    return command(
        ADD,
        dict(
            dtype=dtype,
            a_addr=a_addr,
            a_stride=a_stride,
            b_addr=b_addr,
            b_stride=b_stride,
            out_addr=out_addr,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            a_zp=a_zp,
            b_zp=b_zp,
            out_zp=out_zp,
            a_mult=a_mult,
            b_mult=b_mult,
            shift=shift,
        ),
        wait,
    )


def pool_cmd(
    dtype,
    kind,
    in_addr,
    in_h,
    in_w,
    c,
    in_stride,
    out_addr,
    out_h,
    out_w,
    out_stride,
    k,
    stride=(1, 1),
    pad=(0, 0),
    act=0,
    clip=(0, 0),
    in_zp=0,
    out_zp=0,
    scale=0.0,
    pstride=(0, 0),
    wait=None,
):
    """`scale` is S as a float (packed as its fp32 bits; 0.0 for fp16)."""
    lo, hi = clip_words(dtype, clip)
    return command(
        POOL,
        dict(
            dtype=dtype,
            kind=kind,
            in_addr=in_addr,
            in_h=in_h,
            in_w=in_w,
            c=c,
            in_stride=in_stride,
            out_addr=out_addr,
            out_h=out_h,
            out_w=out_w,
            out_stride=out_stride,
            kh=k[0],
            kw=k[1],
            stride_h=stride[0],
            stride_w=stride[1],
            pad_top=pad[0],
            pad_left=pad[1],
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            in_zp=in_zp,
            out_zp=out_zp,
            scale=f32_bits(scale),
            in_pstride=pstride[0],
            out_pstride=pstride[1],
        ),
        wait,
    )


def rows_bytes(a2d, stride):
    """A 2-D uint8 view as rows padded to `stride` bytes."""
    return b"".join(r.tobytes().ljust(stride, b"\0") for r in a2d)


def conv_int8_stream(
    groups, C=8, OC=8, H=6, W=7, k=3, stride=1, pad=1, zx=-5, zy=4, clamp=(-128, 127), seed=3, config=NPU_REF
):
    """NCHW int8 input -> DMA x3 -> int8 CONV2D (dense or depthwise) -> DMA -> NHWC int8 output.
    Every address and row stride, the requantization rows included, is a multiple of the
    configuration's alignment."""
    a = config[11]
    rng = np.random.default_rng(seed)
    wc = C // groups
    wt = extreme_int8(rng, (OC, k, k, wc))
    bias = rng.integers(-5000, 5000, OC).astype(np.int32)
    S = int8.conv_scale(0.02, rng.uniform(0.0005, 0.004, OC) * 0.1 / 0.02, 0.1)
    OH = out_size(H, k, stride, 1, pad, pad)
    OW = out_size(W, k, stride, 1, pad, pad)
    w_row, w_stride, q_stride = k * k * wc, align(k * k * wc, a), align(OC * 4, a)
    weights = rows_bytes(wt.reshape(OC, -1).view(np.uint8), w_stride)
    q_addr = len(weights)
    weights += rows_bytes(np.stack([bias, S.view(np.int32)]).view(np.uint8), q_stride)
    in_addr, in_stride = len(weights), align(W * C, a)
    out_addr, out_stride = in_addr + H * in_stride, align(OW * OC, a)
    ddr = out_addr + OH * out_stride
    s_in, s_w = 0, align(H * in_stride, a)
    s_q = s_w + OC * w_stride
    s_out = s_q + 2 * q_stride
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], in_addr, in_stride, layout=NCHW, host_shape=[1, C, H, W]),
        tensor(OUTPUT, 0, [1, OH, OW, OC], out_addr, out_stride, host_shape=[1, OH, OW, OC]),
        tensor(WEIGHT, NO_IO, [1, OC, 1, w_row], 0, w_stride),
        tensor(BIAS, NO_IO, [1, 2, 1, OC], q_addr, q_stride, dtype=INT32, host_dtype=INT32),
    ]
    commands = [
        dma(DMA_LOAD, 0, in_addr, s_in, H, W * C, in_stride, in_stride),
        dma(DMA_LOAD, 1, 0, s_w, OC, w_row, w_stride, w_stride),
        dma(DMA_LOAD, 0, q_addr, s_q, 2, OC * 4, q_stride, q_stride),
        conv_cmd(
            INT8,
            s_in,
            H,
            W,
            C,
            in_stride,
            s_w,
            w_stride,
            k,
            k,
            OC,
            s_q,
            s_out,
            OH,
            OW,
            out_stride,
            stride=(stride, stride),
            pad=(pad, pad),
            clip=clamp,
            groups=groups,
            in_zp=zx,
            out_zp=zy,
            wait={DMA0: 0, DMA1: 0},
        ),
        dma(DMA_STORE, 0, s_out, out_addr, OH, OW * OC, out_stride, out_stride, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, commands, weights, ddr, 1, 1, config, s_out + OH * out_stride)

    def expected(x_nchw):
        return int8.conv2d(
            x_nchw.transpose(0, 2, 3, 1),
            wt,
            bias,
            S,
            (OH, OW),
            (stride, stride),
            (1, 1),
            (pad, pad),
            groups,
            zx,
            zy,
            *clamp,
        )

    return blob, expected, (OH, OW)


@pytest.mark.parametrize(
    "groups,C,OC,stride,clamp",
    [(1, 8, 16, 1, (-128, 127)), (1, 40, 33, 2, (4, 127)), (8, 8, 8, 1, (-128, 127)), (48, 48, 48, 2, (-20, 20))],
)
def test_stream_int8_conv_end_to_end(rt, groups, C, OC, stride, clamp):
    H, W, zx, zy = 6, 7, -5, 4
    blob, expected, (OH, OW) = conv_int8_stream(groups, C, OC, H, W, 3, stride, 1, zx, zy, clamp)
    mod = rt["create"]("q", blob)
    x = extreme_int8(np.random.default_rng(C), (1, C, H, W))
    out = np.full((1, OH, OW, OC), 77, np.int8)
    mod["q"](T(x), T(out))
    np.testing.assert_array_equal(out, expected(x))
    last = json.loads(mod["get_profile"]())["last"]
    assert [r["opcode"] for r in last["records"]] == ["DMA_LOAD", "DMA_LOAD", "DMA_LOAD", "CONV2D", "DMA_STORE", "END"]
    conv = last["records"][3]
    if groups == 1:
        passes = OH * OW * 9 * -(-C // 32) * -(-OC // 32)
        assert last["macs"] == conv["macs"] == OH * OW * OC * 9 * C
    else:
        passes = OH * OW * -(-C // 32) * -(-9 // 32)
        assert last["macs"] == conv["macs"] == OH * OW * C * 9
    assert conv["end"] - conv["start"] == 32 + passes  # int8: rate_div 1
    raises_code("ERR_SHAPE_MISMATCH", mod["q"], T(x.astype(np.float32)), T(out))
    raises_code("ERR_SHAPE_MISMATCH", mod["q"], T(x), T(out.astype(np.uint8)))


def test_stream_int8_conv_alignment_256(rt):
    """With alignment 256 the requantization rows are align(OC * 4, 256) bytes apart."""
    config = NPU_REF[:7] + [256, 64, 2, 64, 256] + NPU_REF[12:]  # burst_bytes, alignment 256
    blob, expected, (OH, OW) = conv_int8_stream(1, OC=16, config=config)
    x = extreme_int8(np.random.default_rng(9), (1, 8, 6, 7))
    out = np.zeros((1, OH, OW, 16), np.int8)
    rt["create"]("q", blob)["q"](T(x), T(out))
    np.testing.assert_array_equal(out, expected(x))


@pytest.mark.parametrize("bad_s", [0.0, -0.0, -2.0, float("inf"), float("-inf"), float("nan")])
def test_stream_int8_conv_with_bad_requant_block_fails_at_run(rt, bad_s):
    blob, _, (OH, OW) = conv_int8_stream(1)
    b = bytearray(blob)
    weights_offset = struct.unpack_from("<I", b, 24)[0]
    q_addr = 8 * align(9 * 8)  # the block follows the 8 weight rows; its row 1 holds S
    struct.pack_into("<f", b, weights_offset + q_addr + 128 + 4, bad_s)  # channel 1
    mod = rt["create"]("q", refresh_crc(bytes(b)))  # valid at load: the block is data
    out = np.full((1, OH, OW, 8), 42, np.int8)
    msg = raises_code("ERR_BAD_STREAM", mod["q"], T(np.zeros((1, 8, 6, 7), np.int8)), T(out))
    assert "output channel 1" in msg
    assert (out == 42).all()


def vector_stream(op, dtype, shape, config=NPU_REF, **kw):
    """ADD: two ROWS inputs [R, K] -> out. POOL: NHWC input -> out. Host int8, or fp32 for fp16."""
    elem = 1 if dtype == INT8 else 2
    host = INT8 if dtype == INT8 else FP32
    if op == ADD:
        R, K = shape
        stride = align(K * elem)
        size = R * stride
        view = [1, R, 1, K]
        tensors = [
            tensor(INPUT, i, view, i * size, stride, dtype=dtype, host_dtype=host, layout=ROWS, host_shape=[R, K])
            for i in range(2)
        ]
        tensors.append(
            tensor(OUTPUT, 0, view, 2 * size, stride, dtype=dtype, host_dtype=host, layout=ROWS, host_shape=[R, K])
        )
        commands = [
            dma(DMA_LOAD, 0, 0, 0, R, K * elem, stride, stride),
            dma(DMA_LOAD, 1, size, size, R, K * elem, stride, stride),
            add_cmd(dtype, 0, stride, size, stride, 2 * size, stride, R, K, wait={DMA0: 0, DMA1: 0}, **kw),
            dma(DMA_STORE, 0, 2 * size, 2 * size, R, K * elem, stride, stride, wait={VECTOR: 0}),
            command(END, [], wait=ALL_DONE),
        ]
        return pack_stream(tensors, commands, b"", 3 * size, 2, 1, config)
    (N, H, W, C), (OH, OW) = shape
    in_stride, out_stride = align(W * C * elem), align(OW * C * elem)
    in_size = H * in_stride
    tensors = [
        tensor(
            INPUT, 0, [1, H, W, C], 0, in_stride, dtype=dtype, host_dtype=host, layout=NHWC, host_shape=[1, H, W, C]
        ),
        tensor(
            OUTPUT,
            0,
            [1, OH, OW, C],
            in_size,
            out_stride,
            dtype=dtype,
            host_dtype=host,
            layout=NHWC,
            host_shape=[1, OH, OW, C],
        ),
    ]
    commands = [
        dma(DMA_LOAD, 1, 0, 0, H, W * C * elem, in_stride, in_stride),
        pool_cmd(dtype, kw.pop("kind"), 0, H, W, C, in_stride, in_size, OH, OW, out_stride, wait={DMA1: 0}, **kw),
        dma(DMA_STORE, 0, in_size, in_size, OH, OW * C * elem, out_stride, out_stride, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    return pack_stream(tensors, commands, b"", in_size + OH * out_stride, 1, 1, config)


def vector_cycles(config, dtype, steps):
    lanes = config[10] if dtype == INT8 else config[10] // 2
    return config[12] + -(-steps // lanes)


@pytest.mark.parametrize("config", [NPU_REF, NPU_SMALL])
@pytest.mark.parametrize("dtype", [INT8, FP16])
def test_stream_add_end_to_end(rt, config, dtype):
    R, K = 5, 200
    rng = np.random.default_rng(dtype)
    if dtype == INT8:
        (Ma, Mb), n = int8.multipliers(0.03 / 0.04, 0.05 / 0.04)
        q = dict(clip=(-100, 120), a_zp=-128, b_zp=7, out_zp=-2, a_mult=Ma, b_mult=Mb, shift=n)
        a, b = extreme_int8(rng, (R, K)), extreme_int8(rng, (R, K))
        ref = int8.add(a, b, -128, 7, -2, Ma, Mb, n, -100, 120)
    else:
        q = dict(act=2, clip=(-1.0, 3.0))
        a, b = (rng.standard_normal((2, R, K)) * 2).astype(np.float32)
        ref = fp16.add(a.astype(np.float16), b.astype(np.float16), 2, (-1.0, 3.0))
    mod = rt["create"]("v", vector_stream(ADD, dtype, (R, K), config, **q))
    out = np.zeros((R, K), a.dtype)
    mod["v"](T(a), T(b), T(out))
    np.testing.assert_array_equal(out, ref.astype(out.dtype))
    last = json.loads(mod["get_profile"]())["last"]
    add = last["records"][2]
    assert (add["opcode"], add["engine"], add["macs"]) == ("ADD", "vector", 0)
    assert add["end"] - add["start"] == vector_cycles(config, dtype, R * K)
    assert add["issue"] == max(r["end"] for r in last["records"][:2])  # waited for both loads
    assert last["records"][3]["issue"] == add["end"]  # the store waited for the vector unit
    assert last["macs"] == 0 and last["vector_cycles"] == add["end"] - add["start"]


POOL_STREAM_CASES = [
    # kind, (N, H, W, C), k, stride, pad
    (1, (1, 8, 8, 16), (3, 3), (2, 2), (1, 1)),
    (0, (1, 7, 7, 64), (7, 7), (1, 1), (0, 0)),  # global average pooling
    (0, (1, 6, 9, 5), (2, 3), (2, 1), (0, 1)),
]


@pytest.mark.parametrize("case", POOL_STREAM_CASES)
@pytest.mark.parametrize("dtype", [INT8, FP16])
def test_stream_pool_end_to_end(rt, case, dtype):
    kind, (N, H, W, C), k, stride, pad = case
    OH, OW = (out_size(H, k[0], stride[0], 1, pad[0], pad[0]), out_size(W, k[1], stride[1], 1, pad[1], pad[1]))
    rng = np.random.default_rng(C)
    if dtype == INT8:
        S = int8.avg_pool_scale(0.1, *k, 0.08) if kind == 0 else int8.max_pool_scale(0.1, 0.08)
        q = dict(clip=(-128, 100), in_zp=-9, out_zp=6, scale=float(S))
        x = extreme_int8(rng, (N, H, W, C))
        ref = int8.pool(x, kind, *k, (OH, OW), stride, pad, -9, 6, S, -128, 100)
    else:
        q = dict(act=1)
        x = (rng.standard_normal((N, H, W, C)) * 2).astype(np.float32)
        ref = fp16.pool(x.astype(np.float16), kind, *k, (OH, OW), stride, pad, 1, (0, 0))
    mod = rt["create"](
        "p", vector_stream(POOL, dtype, ((N, H, W, C), (OH, OW)), kind=kind, k=k, stride=stride, pad=pad, **q)
    )
    out = np.zeros((N, OH, OW, C), x.dtype)
    mod["p"](T(x), T(out))
    np.testing.assert_array_equal(out, ref.astype(out.dtype))
    rec = json.loads(mod["get_profile"]())["last"]["records"][1]
    assert (rec["opcode"], rec["engine"], rec["macs"]) == ("POOL", "vector", 0)
    assert rec["end"] - rec["start"] == vector_cycles(NPU_REF, dtype, OH * OW * C * k[0] * k[1])


@pytest.mark.parametrize("config", [NPU_REF, NPU_SMALL])
@pytest.mark.parametrize("C,k", [(8, 3), (33, 3), (40, 7)])
def test_compute_only_depthwise_cycles_equal_formula(rt, config, C, k):
    oh, ow = 5, 6
    in_stride, w_stride, out_stride = align(ow * C * 2), align(k * k * 2), align(ow * C * 2)
    w_addr = 16 * in_stride
    out_addr = w_addr + C * w_stride
    cmd = conv_cmd(
        FP16, 0, 16, ow, C, in_stride, w_addr, w_stride, k, k, C, NO_BIAS, out_addr, oh, ow, out_stride, groups=C
    )
    mod = rt["create"]("d", pack_stream([], [cmd, command(END, [])], config=config))
    mod["d"]()
    last = json.loads(mod["get_profile"]())["last"]
    rows, cols, rate, overhead = config[1], config[2], config[3], config[12]
    passes = oh * ow * -(-C // cols) * -(-(k * k) // rows)
    assert last["total_cycles"] == last["mac_cycles"] == overhead + passes * rate
    assert last["macs"] == oh * ow * C * k * k


@pytest.mark.parametrize("config", [NPU_REF, NPU_SMALL])
def test_vector_and_mac_engines_run_concurrently(rt, config):
    """An ADD and a CONV2D with no waits between them overlap; END waits for both."""
    conv = conv_cmd(FP16, 0, 4, 4, 32, 256, 4096, 128, 1, 1, 32, NO_BIAS, 8192, 4, 4, 256)
    add = add_cmd(
        INT8, 16384, 1024, 16384, 1024, 32768, 1024, 3, 1000, clip=(-128, 127), a_mult=2**30, b_mult=2**30, shift=30
    )
    pool = pool_cmd(FP16, 0, 65536, 3, 3, 20, 128, 69632, 1, 1, 128, (3, 3))
    mod = rt["create"]("c", pack_stream([], [conv, add, pool, command(END, [], wait=ALL_DONE)], config=config))
    mod["c"]()
    recs = json.loads(mod["get_profile"]())["last"]["records"]
    conv_cycles = config[12] + 4 * 4 * -(-32 // config[1]) * -(-32 // config[2]) * 4
    add_cycles = vector_cycles(config, INT8, 3000)
    pool_cycles = vector_cycles(config, FP16, 20 * 9)
    assert [(r["issue"], r["start"], r["end"]) for r in recs[:3]] == [
        (0, 0, conv_cycles),
        (1, 1, 1 + add_cycles),
        (2, 1 + add_cycles, 1 + add_cycles + pool_cycles),
    ]
    assert recs[3]["issue"] == max(conv_cycles, 1 + add_cycles + pool_cycles)
    assert [r["engine"] for r in recs] == ["mac", "vector", "vector", None]


# ---------------------------------------------------------------------------------------------
# Validation of the new commands and descriptors
# ---------------------------------------------------------------------------------------------


def one(cmd, config=NPU_REF):
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, config=config)


OK_ADD = dict(
    dtype=INT8,
    a_addr=0,
    a_stride=128,
    b_addr=128,
    b_stride=128,
    out_addr=256,
    out_stride=128,
    rows=1,
    row_elems=100,
    clip=(-128, 127),
    a_mult=2**30,
    b_mult=2**30,
    shift=31,
)
OK_POOL = dict(
    dtype=INT8,
    kind=1,
    in_addr=0,
    in_h=4,
    in_w=4,
    c=8,
    in_stride=128,
    out_addr=1024,
    out_h=2,
    out_w=2,
    out_stride=128,
    k=(2, 2),
    stride=(2, 2),
    clip=(-128, 127),
    scale=1.0,
)
OK_CONV8 = dict(
    dtype=INT8,
    in_addr=0,
    in_h=4,
    in_w=4,
    in_c=8,
    in_stride=128,
    w_addr=1024,
    w_stride=128,
    kh=3,
    kw=3,
    oc=8,
    bias_addr=2048,
    out_addr=4096,
    out_h=4,
    out_w=4,
    out_stride=128,
    pad=(1, 1),
    clip=(-128, 127),
)


def bad(code, rt, builder, base, **changes):
    raises_code(code, rt["validate"], one(builder(**{**base, **changes})))


def test_new_commands_validate(rt):
    rt["validate"](one(add_cmd(**OK_ADD)))
    rt["validate"](one(pool_cmd(**OK_POOL)))
    rt["validate"](one(conv_cmd(**OK_CONV8)))
    rt["validate"](one(conv_cmd(**{**OK_CONV8, "groups": 8, "w_stride": 128})))
    rt["validate"](one(add_cmd(**{**OK_ADD, "b_addr": 0})))  # a and b may alias
    rt["validate"](one(pool_cmd(**{**OK_POOL, "scale": 1e-45})))  # any finite S > 0
    # Channel slices (1.1): beat-aligned addresses, pixels further apart than their bytes.
    rt["validate"](one(pool_cmd(**{**OK_POOL, "in_addr": 16, "out_addr": 1040, "pstride": (16, 40)})))
    rt["validate"](one(conv_cmd(**{**OK_CONV8, "in_addr": 48, "out_addr": 4112, "pstride": (24, 32)})))
    rt["validate"](one(pool_cmd(**{**OK_POOL, "scale": 3.4e38})))
    rt["validate"](one(pool_cmd(**{**OK_POOL, "dtype": FP16, "clip": (0.0, 0.0), "c": 4, "scale": 0.0})))


def test_bad_conv_commands_are_refused(rt):
    for code, changes in [
        ("ERR_OP_NOT_SUPPORTED", dict(groups=2)),
        ("ERR_OP_NOT_SUPPORTED", dict(groups=8, oc=4)),
        ("ERR_OP_NOT_SUPPORTED", dict(groups=0)),
        ("ERR_BAD_STREAM", dict(bias_addr=NO_BIAS)),  # int8 needs its requant block
        ("ERR_BAD_STREAM", dict(in_zp=128)),
        ("ERR_BAD_STREAM", dict(out_zp=-129)),
        ("ERR_BAD_STREAM", dict(clip=(3, 2))),
        ("ERR_BAD_STREAM", dict(clip=(-129, 0))),
        ("ERR_BAD_STREAM", dict(act=1)),  # int8: act is 0
        ("ERR_BAD_STREAM", dict(dtype=FP16, in_zp=1, w_stride=256, clip=(0.0, 0.0))),
        ("ERR_INVALID_ADDR", dict(bias_addr=2097152 - 128)),  # 2 rows of 128 pass SRAM's end
        ("ERR_INVALID_ADDR", dict(bias_addr=2100)),  # misaligned
        ("ERR_INVALID_ADDR", dict(bias_addr=4096 - 128)),  # row S overlaps the output
        ("ERR_INVALID_ADDR", dict(out_addr=2048 + 128)),  # output on the block's row S
    ]:
        bad(code, rt, conv_cmd, OK_CONV8, **changes)
    # A dense weight row holds KH*KW*C elements (144 bytes for C = 16: more than its 128-byte
    # stride), a depthwise row KH*KW (9 bytes).
    c16 = {**OK_CONV8, "in_c": 16, "oc": 16, "bias_addr": 3072}
    raises_code("ERR_BAD_STREAM", rt["validate"], one(conv_cmd(**c16)))
    rt["validate"](one(conv_cmd(**c16, groups=16)))


def test_bad_vector_commands_are_refused(rt):
    for code, changes in [
        ("ERR_BAD_STREAM", dict(dtype=INT32)),
        ("ERR_BAD_STREAM", dict(rows=0)),
        ("ERR_BAD_STREAM", dict(shift=0)),
        ("ERR_BAD_STREAM", dict(shift=63)),
        ("ERR_BAD_STREAM", dict(a_mult=2**31)),
        ("ERR_BAD_STREAM", dict(b_zp=200)),
        ("ERR_BAD_STREAM", dict(clip=(0, 128))),
        ("ERR_BAD_STREAM", dict(act=2)),
        ("ERR_BAD_STREAM", dict(dtype=FP16, clip=(0.0, 0.0))),  # fp16 with int8 quant fields
        ("ERR_BAD_STREAM", dict(row_elems=129)),  # a row longer than its stride
        ("ERR_INVALID_ADDR", dict(out_addr=128)),  # output on b
        ("ERR_INVALID_ADDR", dict(a_stride=64)),
        ("ERR_INVALID_ADDR", dict(out_addr=2097152)),
    ]:
        bad(code, rt, add_cmd, OK_ADD, **changes)
    for code, changes in [
        ("ERR_BAD_STREAM", dict(kind=2)),
        ("ERR_OP_NOT_SUPPORTED", dict(stride=(3, 2))),
        ("ERR_BAD_STREAM", dict(k=(0, 2))),
        ("ERR_BAD_STREAM", dict(c=0)),
        ("ERR_BAD_STREAM", dict(scale=0.0)),
        ("ERR_BAD_STREAM", dict(scale=-0.0)),
        ("ERR_BAD_STREAM", dict(scale=-1.0)),
        ("ERR_BAD_STREAM", dict(scale=float("inf"))),
        ("ERR_BAD_STREAM", dict(scale=float("nan"))),
        ("ERR_BAD_STREAM", dict(dtype=FP16, clip=(0.0, 0.0), c=4, scale=1.0)),  # fp16: S is 0
        ("ERR_BAD_STREAM", dict(in_zp=-200)),
        ("ERR_BAD_STREAM", dict(pad=(2, 0))),  # a max window all padding
        ("ERR_BAD_STREAM", dict(out_h=4, stride=(2, 2))),  # last window past the tile
        ("ERR_INVALID_ADDR", dict(out_addr=256)),  # output on the input
        ("ERR_INVALID_ADDR", dict(in_addr=8)),  # not on a 16-byte beat
        ("ERR_BAD_STREAM", dict(pstride=(4, 0))),  # pixels of 8 bytes, 4 apart
        ("ERR_BAD_STREAM", dict(pstride=(0, 7))),
        ("ERR_BAD_STREAM", dict(pstride=(48, 0))),  # 3 * 48 + 8 > the row stride 128
    ]:
        bad(code, rt, pool_cmd, OK_POOL, **changes)
    # The average of a window in the padding is defined (0 + bias-free): accepted.
    rt["validate"](one(pool_cmd(**{**OK_POOL, "kind": 0, "pad": (2, 0)})))
    # fp16 vector ops need vector_lanes / 2 >= 1.
    tiny = NPU_REF[:10] + [1] + NPU_REF[11:]
    raises_code("ERR_BAD_STREAM", rt["validate"], one(add_cmd(**OK_ADD), tiny))
    # Unused operand words after the last operand stay zero.
    raises_code("ERR_BAD_STREAM", rt["validate"], one(add_cmd(**OK_ADD)[:-4] + b"\1\0\0\0"))


def test_io_descriptors(rt):
    view, host = [1, 1, 1, 64], [64]
    # int8 on the device, fp32 on the host is quantized staging: format 1.3 and a quantization table
    # (tests/runtime/test_quantized_staging.py), so in this 1.0 stream it is refused as too old a format.
    for dtype, host_dtype, code in [
        (INT8, INT8, None),
        (FP16, FP32, None),
        (INT8, FP32, "ERR_BAD_STREAM"),
        (FP16, INT8, "ERR_OP_NOT_SUPPORTED"),
        (INT32, INT32, "ERR_OP_NOT_SUPPORTED"),
    ]:
        t = [tensor(INPUT, 0, view, 0, 128, dtype=dtype, host_dtype=host_dtype, layout=ROWS, host_shape=host)]
        blob = pack_stream(t, [command(END, [])], b"", 256, 1, 0)
        if code is None:
            rt["validate"](blob)
        else:
            raises_code(code, rt["validate"], blob)


def test_int8_io_relayout_only(rt):
    """int8 host I/O: NCHW in, ROWS out, bytes moved unchanged (no conversion)."""
    C, H, W = 3, 4, 5
    stride = 128
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], 0, stride, layout=NCHW, host_shape=[1, C, H, W]),
        tensor(OUTPUT, 0, [1, H, W, C], H * stride, stride, layout=NHWC, host_shape=[1, H, W, C]),
    ]
    cmds = [
        dma(DMA_LOAD, 0, 0, 0, H, W * C, stride, stride),
        dma(DMA_STORE, 0, 0, H * stride, H, W * C, stride, stride, wait={DMA0: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    mod = rt["create"]("r", pack_stream(tensors, cmds, b"", 2 * H * stride, 1, 1))
    x = np.arange(-60, 60, 2, dtype=np.int8).reshape(1, C, H, W)
    out = np.zeros((1, H, W, C), np.int8)
    mod["r"](T(x), T(out))
    np.testing.assert_array_equal(out, x.transpose(0, 2, 3, 1))


def test_mutated_int8_streams_never_crash(rt):
    """Random word mutations (CRC fixed up) of int8 CONV2D / ADD / POOL streams: each validates or
    raises a coded error. Mutations of the quantization operands, which leave the sizes alone,
    are also run: they must compute or fail with a code, never crash."""
    conv_blob = conv_int8_stream(1)[0]
    dw_blob = conv_int8_stream(8)[0]
    add_blob = vector_stream(ADD, INT8, (3, 100), clip=(-128, 127), a_mult=2**30, b_mult=2**30, shift=30)
    pool_blob = vector_stream(
        POOL, INT8, ((1, 6, 6, 8), (3, 3)), kind=1, k=(3, 3), stride=(2, 2), pad=(1, 1), clip=(-128, 127), scale=1.0
    )
    rng = random.Random(1)
    interesting = [
        0,
        1,
        2,
        30,
        31,
        62,
        63,
        127,
        128,
        129,
        2**30,
        2**31 - 1,
        0x7FFFFFFF,
        0x80000000,
        0xFFFFFF80,
        0xFFFFFF81,
        0xFFFFFFFF,
        # fp32 scales: 1.0, -1.0, FLT_MAX, the smallest subnormal, inf, -inf, NaN
        0x3F800000,
        0xBF800000,
        0x7F7FFFFF,
        0x00000001,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
    ]
    for blob in [conv_blob, dw_blob, add_blob, pool_blob]:
        n_tensors, n_cmds = struct.unpack_from("<2I", blob, 16)
        end = 128 + 64 * n_tensors + 128 * n_cmds
        for _ in range(4000):
            b = bytearray(blob)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(16, end, 4)
                b[pos : pos + 4] = struct.pack("<I", rng.choice(interesting + [rng.getrandbits(32)]))
            try:
                rt["validate"](refresh_crc(bytes(b)))
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)

    # Run mutations of the quantization words only (act .. end of the operands; for POOL also
    # the first unused word 24, which held the old shift and must now be 0), and of the conv's
    # requantization block (bias and S rows: data, checked by the kernel when it runs).
    def operand_positions(blob, opcode, words):
        n_tensors, n_cmds = struct.unpack_from("<2I", blob, 16)
        cmd_base = 128 + 64 * n_tensors
        idx = next(i for i in range(n_cmds) if blob[cmd_base + 128 * i] == opcode)
        return [cmd_base + 128 * idx + 4 * w for w in words]

    q_base = struct.unpack_from("<I", conv_blob, 24)[0] + 8 * align(9 * 8)  # OC = 8, C = 8
    block = [q_base + row * 128 + 4 * o for row in range(2) for o in range(8)]
    cases = [
        (add_blob, operand_positions(add_blob, ADD, range(10, 19))),
        (pool_blob, operand_positions(pool_blob, POOL, range(18, 25))),
        (conv_blob, operand_positions(conv_blob, CONV2D, range(23, 29))),
        (conv_blob, block),
    ]
    for blob, positions in cases:
        n_tensors = struct.unpack_from("<I", blob, 16)[0]
        for trial in range(300):
            b = bytearray(blob)
            for _ in range(rng.randint(1, 2)):
                pos = rng.choice(positions)
                b[pos : pos + 4] = struct.pack("<I", rng.choice(interesting + [rng.getrandbits(32)]))
            try:
                mod = rt["create"]("m", refresh_crc(bytes(b)))
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)
                continue
            args = []
            for t in range(n_tensors):
                role, _, _, _, _, rank, *shape = struct.unpack_from("<10I", blob, 128 + 64 * t)
                if role in (INPUT, OUTPUT):
                    args.append(T(np.full(shape[:rank], trial % 256 - 128, np.int8)))
            try:
                mod["m"](*args)
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)
