"""The reference NPU's ELTWISE (0x22), UNARY (0x23) and SOFTMAX (0x24), from hand-packed streams (docs/npu.md section 6,
packed by tests/npu_stream_pack.py, not by the compiler): results, cycles, and the ERR_* code of every
bad operand."""

import json
import struct

import numpy as np
import pytest

from npu_ref import fp16, int8, qdq
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    ELTWISE,
    END,
    FP16,
    INPUT,
    INT8,
    INT16,
    NHWC,
    NO_TABLE,
    OUTPUT,
    ROWS,
    SOFTMAX,
    UNARY,
    VECTOR,
    T,
    align,
    command,
    dma,
    f32_bits,
    pack_stream,
    raises_code,
    tensor,
)
from npu_stream_pack import one_command as pack_one

V11, V12 = (1, 1), (1, 2)


def eltwise(
    dtype=FP16,
    kind=0,
    b_mode=0,
    a=0,
    a_stride=128,
    b=1024,
    b_stride=128,
    out=2048,
    out_stride=128,
    rows=2,
    row_elems=16,
    channels=0,
    act=0,
    lo=0,
    hi=0,
    zps=(0, 0, 0),
    mults=(0, 0),
    shift=0,
    wait=None,
    dtypes=(0, 0, 0),
):
    return command(
        ELTWISE,
        dict(
            dtype=dtype,
            kind=kind,
            b_mode=b_mode,
            a_addr=a,
            a_stride=a_stride,
            b_addr=b,
            b_stride=b_stride,
            out_addr=out,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            channels=channels,
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            a_zp=zps[0],
            b_zp=zps[1],
            out_zp=zps[2],
            a_mult=mults[0],
            b_mult=mults[1],
            shift=shift,
            a_dtype=dtypes[0],
            b_dtype=dtypes[1],
            out_dtype=dtypes[2],
        ),
        wait,
    )


def unary(
    dtype=FP16,
    func=0,
    inp=0,
    in_stride=128,
    out=2048,
    out_stride=128,
    rows=2,
    row_elems=16,
    table=NO_TABLE,
    alpha=0,
    wait=None,
):
    return command(
        UNARY,
        dict(
            dtype=dtype,
            func=func,
            in_addr=inp,
            in_stride=in_stride,
            out_addr=out,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            table_addr=table,
            alpha=alpha,
        ),
        wait,
    )


def one_command(cmd, version=V12):
    return pack_one(cmd, version)


INT8_OK = dict(dtype=INT8, lo=-128 & 0xFFFFFFFF, hi=127, mults=(1 << 20, 1 << 19), shift=20)


def test_valid_vector_commands_pass_validation(rt):
    for cmd in (
        eltwise(),
        eltwise(b=0),  # a and b may alias (x * x)
        eltwise(b_mode=1, channels=8),
        eltwise(b_mode=2, b_stride=128),
        eltwise(**INT8_OK),
        eltwise(kind=2, **dict(INT8_OK, mults=(1 << 20, 0))),
        unary(),
        unary(func=4, alpha=f32_bits(0.1)),
        unary(dtype=INT8, table=1024),
    ):
        rt["validate"](one_command(cmd))


@pytest.mark.parametrize(
    "cmd",
    [
        eltwise(kind=5),  # unknown kind
        eltwise(b_mode=3),  # unknown broadcast mode
        eltwise(dtype=3),  # int32 is no vector dtype
        eltwise(b_mode=1, channels=0),  # per-channel without channels
        eltwise(b_mode=1, channels=5),  # row_elems 16 not a multiple of 5
        eltwise(b_mode=0, channels=8),  # channels only with b_mode 1
        eltwise(rows=0),
        eltwise(act=3),
        eltwise(zps=(1, 0, 0)),  # fp16 takes no zero points
        eltwise(kind=2, **INT8_OK),  # int8 multiply: b_mult must be 0
        eltwise(**dict(INT8_OK, shift=0)),
        eltwise(**dict(INT8_OK, mults=(1 << 31, 0))),
        eltwise(**dict(INT8_OK, zps=(200, 0, 0))),
        eltwise(**dict(INT8_OK, act=1)),
        unary(func=7),  # unknown function
        unary(table=1024),  # fp16 has no table
        unary(alpha=f32_bits(0.1)),  # alpha only for leaky relu
        unary(func=4, alpha=f32_bits(float("nan"))),
        unary(dtype=INT8),  # int8 needs its table
        unary(dtype=INT8, table=1024, alpha=1),
        unary(row_elems=0),
    ],
)
def test_bad_vector_operands_are_bad_stream(rt, cmd):
    raises_code("ERR_BAD_STREAM", rt["validate"], one_command(cmd))


@pytest.mark.parametrize(
    "cmd",
    [
        eltwise(out=1024),  # output on b
        eltwise(b=2097152 - 128),  # b rows past SRAM
        eltwise(b_mode=1, channels=8, b=2097152 - 128, b_stride=256),
        eltwise(b=64),  # misaligned
        eltwise(b_stride=192),
        unary(out=0),  # output on input
        unary(dtype=INT8, table=2097152 - 128),  # 256-byte table past SRAM
        unary(dtype=INT8, table=1000),  # misaligned table
        unary(dtype=INT8, table=2048),  # output on the table
    ],
)
def test_bad_vector_addresses_are_invalid_addr(rt, cmd):
    raises_code("ERR_INVALID_ADDR", rt["validate"], one_command(cmd))


def test_format_1_0_streams_may_not_use_the_new_opcodes(rt):
    for cmd in (eltwise(), unary()):
        msg = raises_code("ERR_BAD_STREAM", rt["validate"], one_command(cmd, version=(1, 0)))
        assert "1.1" in msg
    rt["validate"](one_command(dma(DMA_LOAD, 0, 0, 0, 1, 128, 128, 128), version=(1, 0)))


def test_format_1_3_streams_may_not_use_silu_or_gelu_tanh(rt):
    for func in (5, 6):
        msg = raises_code("ERR_BAD_STREAM", rt["validate"], one_command(unary(func=func), version=(1, 3)))
        assert "needs stream format 1.4" in msg
        rt["validate"](one_command(unary(func=func), version=(1, 4)))
        rt["validate"](one_command(unary(dtype=INT8, func=func, table=1024), version=(1, 4)))
        msg = raises_code("ERR_BAD_STREAM", rt["validate"], one_command(unary(func=func, alpha=1), version=(1, 4)))
        assert "alpha" in msg  # only leaky relu has a slope
    assert "6 gelu tanh" in raises_code("ERR_BAD_STREAM", rt["validate"], one_command(unary(func=7), version=(1, 4)))
    rt["validate"](one_command(unary(func=4, alpha=f32_bits(0.1)), version=(1, 3)))


def _io_stream(cmds, weights, in_view, in_stride, out_view, out_stride, dtype, host_dtype, host_in, host_out):
    in_addr = align(len(weights))
    out_addr = in_addr + in_view[0] * in_view[1] * in_stride
    ddr = out_addr + out_view[0] * out_view[1] * out_stride
    tensors = [
        tensor(INPUT, 0, in_view, in_addr, in_stride, dtype, host_dtype, NHWC, host_in),
        tensor(OUTPUT, 0, out_view, out_addr, out_stride, dtype, host_dtype, NHWC, host_out),
    ]
    return pack_stream(tensors, cmds(in_addr, out_addr), weights, ddr, 1, 1, version=V11, sram_used=8192)


def test_int8_unary_is_a_table_lookup(rt):
    rng = np.random.default_rng(3)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    rows, elems = 4, 64

    def cmds(in_addr, out_addr):
        return [
            dma(DMA_LOAD, 1, 0, 0, 1, 256, 256, 256),
            dma(DMA_LOAD, 0, in_addr, 256, rows, elems, 128, 128),
            unary(INT8, 3, 256, 128, 1024, 128, rows, elems, table=0, wait={DMA0: 0, DMA1: 0}),
            dma(DMA_STORE, 0, 1024, out_addr, rows, elems, 128, 128, wait={VECTOR: 0}),
            command(END, [], wait=ALL_DONE),
        ]

    view = [1, rows, 1, elems]
    blob = _io_stream(cmds, table.tobytes(), view, 128, view, 128, INT8, INT8, view, view)
    mod = rt["create"]("u", blob)
    x = rng.integers(-128, 128, view).astype(np.int8)
    out = np.zeros(view, np.int8)
    mod["u"](T(x), T(out))
    np.testing.assert_array_equal(out, table[x.astype(np.int64) + 128])
    rec = json.loads(mod["get_profile"]())["last"]["records"][2]
    assert rec["opcode"] == "UNARY" and rec["end"] - rec["start"] == 32 + rows * elems // 64


def test_fp16_per_channel_eltwise(rt):
    rng = np.random.default_rng(4)
    h, w, c = 3, 4, 8
    b = rng.standard_normal(c).astype(np.float16)

    def cmds(in_addr, out_addr):
        return [
            dma(DMA_LOAD, 1, 0, 0, 1, 128, 128, 128),
            dma(DMA_LOAD, 0, in_addr, 256, h, w * c * 2, 128, 128),
            eltwise(FP16, 3, 1, 256, 128, 0, 128, 1024, 128, h, w * c, channels=c, act=1, wait={DMA0: 0, DMA1: 0}),
            dma(DMA_STORE, 0, 1024, out_addr, h, w * c * 2, 128, 128, wait={VECTOR: 0}),
            command(END, [], wait=ALL_DONE),
        ]

    view = [1, h, w, c]
    blob = _io_stream(cmds, b.tobytes().ljust(128, b"\0"), view, 128, view, 128, FP16, 4, view, view)
    mod = rt["create"]("e", blob)
    x = rng.standard_normal(view).astype(np.float32)
    out = np.zeros(view, np.float32)
    mod["e"](T(x), T(out))
    np.testing.assert_array_equal(out, fp16.eltwise("maximum", x, b.astype(np.float32), act="relu"))
    rec = json.loads(mod["get_profile"]())["last"]["records"][2]
    assert rec["opcode"] == "ELTWISE" and rec["end"] - rec["start"] == 32 + h * w * c // 32
    assert struct.unpack("<H", blob[6:8])[0] == 1


def softmax(dtype=FP16, inp=0, in_stride=128, out=2048, out_stride=128, rows=2, row_elems=16):
    return command(
        SOFTMAX,
        dict(
            dtype=dtype,
            in_addr=inp,
            in_stride=in_stride,
            out_addr=out,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
        ),
    )


def test_softmax_operands(rt):
    v = rt["validate"]
    v(one_command(softmax()))
    # int8 (format 1.4) needs its scales (test_reference_npu_softmax_int8.py); a 1.1 stream has no words for them
    raises_code("ERR_BAD_STREAM", v, one_command(softmax(dtype=INT8)))
    for bad in (softmax(dtype=3), softmax(rows=0), softmax(row_elems=0)):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    for bad in (softmax(out=0), softmax(out=2097152 - 128), softmax(in_stride=64)):
        raises_code("ERR_INVALID_ADDR", v, one_command(bad))
    assert "1.1" in raises_code("ERR_BAD_STREAM", v, one_command(softmax(), version=(1, 0)))


# Format 1.2: int16 operands and results (docs/npu.md section 2, "16-bit tensors").
INT16_OK = dict(
    dtype=INT8, lo=-32768 & 0xFFFFFFFF, hi=32767, mults=(1 << 20, 1 << 19), shift=20, dtypes=(INT16, INT8, INT16)
)


def test_int16_eltwise_operands_validate(rt):
    v = rt["validate"]
    for cmd in (
        eltwise(**INT16_OK),
        eltwise(**dict(INT16_OK, zps=(-30000 & 0xFFFFFFFF, 5, 20000))),
        eltwise(**dict(INT16_OK, dtypes=(0, 0, INT16))),  # int8 a and b, an int16 result
        eltwise(kind=2, **dict(INT16_OK, mults=((1 << 31) - 1, 0))),  # int16 x int8: 2^31 bound
        eltwise(kind=2, **dict(INT16_OK, dtypes=(INT16, INT16, INT16), mults=((1 << 30) - 1, 0))),
    ):
        v(one_command(cmd))
    for bad in (
        eltwise(**dict(INT16_OK, dtypes=(INT16, 3, INT16))),  # int32 is no operand dtype
        eltwise(**dict(INT16_OK, zps=(0, 200, 0))),  # b is int8: zero point 200
        eltwise(**dict(INT16_OK, dtypes=(INT16, INT8, INT8))),  # int8 result, int16 clamp
        eltwise(kind=2, **dict(INT16_OK, dtypes=(INT16, INT16, INT16), mults=(1 << 30, 0))),
        eltwise(dtypes=(INT16, 0, 0)),
    ):  # fp16 takes no operand dtypes
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    # A 1.1 stream may not use 1.2's operand dtypes or an int16 tensor.
    raises_code("ERR_BAD_STREAM", v, one_command(eltwise(**INT16_OK), version=V11))
    rt["validate"](one_command(eltwise(**dict(INT16_OK, dtypes=(0, 0, 0), lo=-128 & 0xFFFFFFFF, hi=127)), version=V11))


def _int16_stream(kind, a_dt, b_dt, out_dt, rows, elems, mults, shift, zps, b_mode=0):
    """Inputs a, b and output as ROWS [rows, elems] in their own dtypes -> DMA -> ELTWISE -> DMA."""
    size = {INT8: 1, INT16: 2}
    b_rows = rows if b_mode == 0 else 1
    b_elems = elems if b_mode == 0 else 1
    a_at, b_at = 0, align(rows * 128)
    out_at = b_at + align(b_rows * 128)
    info = np.iinfo(np.int16 if out_dt == INT16 else np.int8)
    cmds = [
        dma(DMA_LOAD, 0, a_at, 0, rows, elems * size[a_dt], 128, 128),
        dma(DMA_LOAD, 1, b_at, 4096, b_rows, b_elems * size[b_dt], 128, 128),
        eltwise(
            INT8,
            kind,
            b_mode,
            0,
            128,
            4096,
            128,
            8192,
            128,
            rows,
            elems,
            0,
            0,
            info.min & 0xFFFFFFFF,
            info.max,
            [z & 0xFFFFFFFF for z in zps],
            mults,
            shift,
            wait={DMA0: 0, DMA1: 0},
            dtypes=(a_dt, b_dt, out_dt),
        ),
        dma(DMA_STORE, 0, 8192, out_at, rows, elems * size[out_dt], 128, 128, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    tensors = [
        tensor(INPUT, 0, [1, rows, 1, elems], a_at, 128, a_dt, a_dt, ROWS, [rows, elems]),
        tensor(INPUT, 1, [1, b_rows, 1, b_elems], b_at, 128, b_dt, b_dt, ROWS, [b_rows, b_elems]),
        tensor(OUTPUT, 0, [1, rows, 1, elems], out_at, 128, out_dt, out_dt, ROWS, [rows, elems]),
    ]
    return pack_stream(tensors, cmds, b"", out_at + rows * 128, 2, 1, version=V12, sram_used=16384)


def _codes(rng, dt, shape):
    info = np.iinfo(np.int16 if dt == INT16 else np.int8)
    x = rng.integers(info.min, info.max + 1, shape).astype(info.dtype)
    x.flat[:4] = [info.min, info.max, 0, -1]  # the extremes reach the largest intermediates
    return x


@pytest.mark.parametrize(
    "kind, a_dt, b_dt, out_dt",
    [
        ("Mul", INT16, INT8, INT16),  # f * c: the cell state times a gate
        ("Mul", INT8, INT8, INT16),  # i * g
        ("Add", INT16, INT16, INT16),  # c = f * c + i * g
        ("Mul", INT16, INT16, INT16),  # the tightest multiplier bound, 2^30
        ("Sub", INT16, INT8, INT8),
        ("Max", INT8, INT16, INT16),
    ],
)
def test_int16_eltwise_matches_the_numpy_model(rt, kind, a_dt, b_dt, out_dt):
    rng = np.random.default_rng(len(kind) * 10 + a_dt + 2 * b_dt + 3 * out_dt)
    rows, elems = 3, 40
    a, b = _codes(rng, a_dt, (rows, elems)), _codes(rng, b_dt, (rows, elems))
    s_a, s_b, s_y = 1 / 1024, 1 / 128, 1 / 2048 if out_dt == INT16 else 1 / 16
    z_a, z_b, z_y = (0 if a_dt == INT16 else -3), (0 if b_dt == INT16 else 5), (7 if out_dt == INT16 else -2)
    m_a, m_b, n = int8.eltwise_multipliers(qdq.ELTWISE[kind], s_a, s_b, s_y, a.dtype, b.dtype)
    code = {"Add": 0, "Sub": 1, "Mul": 2, "Max": 3}[kind]
    mod = rt["create"]("e", _int16_stream(code, a_dt, b_dt, out_dt, rows, elems, (m_a, m_b), n, (z_a, z_b, z_y)))
    out = np.zeros((rows, elems), np.int16 if out_dt == INT16 else np.int8)
    mod["e"](T(a), T(b), T(out))
    expected = int8.eltwise(qdq.ELTWISE[kind], a, b, z_a, z_b, z_y, m_a, m_b, n, out_dtype=out.dtype)
    np.testing.assert_array_equal(out, expected)
    rec = json.loads(mod["get_profile"]())["last"]["records"][2]
    assert rec["opcode"] == "ELTWISE" and rec["end"] - rec["start"] == 32 + -(-rows * elems // 32)  # 2-byte rate
    with pytest.raises(Exception, match="ERR_SHAPE_MISMATCH"):
        mod["e"](T(a.astype(np.int32)), T(b), T(out))


def test_int16_requantized_to_int8_by_an_add_with_b_mult_0(rt):
    """The change of scale the compiler uses before a table lookup: t = (a - z_a) * M_a, b ignored."""
    rng = np.random.default_rng(8)
    rows, elems = 2, 64
    a = _codes(rng, INT16, (rows, elems))
    s_a, s_y, z_y = 1 / 1000, 0.25, 3
    (m_a,), n = int8.multipliers(s_a / s_y)
    blob = _int16_stream(0, INT16, INT8, INT8, rows, elems, (m_a, 0), n, (0, 0, z_y), b_mode=2)
    mod = rt["create"]("r", blob)
    out = np.zeros((rows, elems), np.int8)
    mod["r"](T(a), T(np.full((1, 1), 99, np.int8)), T(out))
    expected = np.clip(np.rint(a.astype(np.float64) * s_a / s_y) + z_y, -128, 127)
    np.testing.assert_array_equal(out, expected)  # no tie: a * s_a / s_y is never k + 0.5 exactly here
