"""The reference NPU's ELTWISE (0x22), UNARY (0x23) and SOFTMAX (0x24), from hand-packed streams (docs/npu.md section 6,
packed by tests/npu_stream_pack.py, not by the compiler): results, cycles, and the ERR_* code of every
bad operand."""

import json
import struct

import numpy as np
import pytest

from npu_numpy import eltwise_fp16
from npu_stream_pack import (ALL_DONE, DMA0, DMA1, DMA_LOAD, DMA_STORE, END, FP16, INPUT, INT8, NHWC, OUTPUT,
                             VECTOR, T, align, command, dma, f32_bits, pack_stream, raises_code,
                             runtime_functions, tensor)

ELTWISE, UNARY, SOFTMAX = 0x22, 0x23, 0x24
NO_TABLE = 0xFFFFFFFF
V11 = (1, 1)


@pytest.fixture(scope="module")
def rt():
    return runtime_functions({"create": "runtime.NPUModuleCreate", "validate": "tvm_npu.runtime.validate_stream"})


def eltwise(dtype=FP16, kind=0, b_mode=0, a=0, a_stride=128, b=1024, b_stride=128, out=2048, out_stride=128,
            rows=2, row_elems=16, channels=0, act=0, lo=0, hi=0, zps=(0, 0, 0), mults=(0, 0), shift=0, wait=None):
    return command(ELTWISE, [dtype, kind, b_mode, a, a_stride, b, b_stride, out, out_stride, rows, row_elems,
                             channels, act, lo, hi, *zps, *mults, shift], wait)


def unary(dtype=FP16, func=0, inp=0, in_stride=128, out=2048, out_stride=128, rows=2, row_elems=16,
          table=NO_TABLE, alpha=0, wait=None):
    return command(UNARY, [dtype, func, inp, in_stride, out, out_stride, rows, row_elems, table, alpha], wait)


def one_command(cmd, version=V11):
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, version=version)


INT8_OK = dict(dtype=INT8, lo=-128 & 0xFFFFFFFF, hi=127, mults=(1 << 20, 1 << 19), shift=20)


def test_valid_vector_commands_pass_validation(rt):
    for cmd in (eltwise(), eltwise(b=0),  # a and b may alias (x * x)
                eltwise(b_mode=1, channels=8), eltwise(b_mode=2, b_stride=128),
                eltwise(**INT8_OK), eltwise(kind=2, **dict(INT8_OK, mults=(1 << 20, 0))),
                unary(), unary(func=4, alpha=f32_bits(0.1)), unary(dtype=INT8, table=1024)):
        rt["validate"](one_command(cmd))


@pytest.mark.parametrize("cmd", [
    eltwise(kind=5),                                 # unknown kind
    eltwise(b_mode=3),                               # unknown broadcast mode
    eltwise(dtype=3),                                # int32 is no vector dtype
    eltwise(b_mode=1, channels=0),                   # per-channel without channels
    eltwise(b_mode=1, channels=5),                   # row_elems 16 not a multiple of 5
    eltwise(b_mode=0, channels=8),                   # channels only with b_mode 1
    eltwise(rows=0),
    eltwise(act=3),
    eltwise(zps=(1, 0, 0)),                          # fp16 takes no zero points
    eltwise(kind=2, **INT8_OK),                      # int8 multiply: b_mult must be 0
    eltwise(**dict(INT8_OK, shift=0)),
    eltwise(**dict(INT8_OK, mults=(1 << 31, 0))),
    eltwise(**dict(INT8_OK, zps=(200, 0, 0))),
    eltwise(**dict(INT8_OK, act=1)),
    unary(func=5),                                   # unknown function
    unary(table=1024),                               # fp16 has no table
    unary(alpha=f32_bits(0.1)),                      # alpha only for leaky relu
    unary(func=4, alpha=f32_bits(float("nan"))),
    unary(dtype=INT8),                               # int8 needs its table
    unary(dtype=INT8, table=1024, alpha=1),
    unary(row_elems=0),
])
def test_bad_vector_operands_are_bad_stream(rt, cmd):
    raises_code("ERR_BAD_STREAM", rt["validate"], one_command(cmd))


@pytest.mark.parametrize("cmd", [
    eltwise(out=1024),                               # output on b
    eltwise(b=2097152 - 128),                        # b rows past SRAM
    eltwise(b_mode=1, channels=8, b=2097152 - 128, b_stride=256),
    eltwise(b=64),                                   # misaligned
    eltwise(b_stride=192),
    unary(out=0),                                    # output on input
    unary(dtype=INT8, table=2097152 - 128),          # 256-byte table past SRAM
    unary(dtype=INT8, table=1000),                   # misaligned table
    unary(dtype=INT8, table=2048),                   # output on the table
])
def test_bad_vector_addresses_are_invalid_addr(rt, cmd):
    raises_code("ERR_INVALID_ADDR", rt["validate"], one_command(cmd))


def test_format_1_0_streams_may_not_use_the_new_opcodes(rt):
    for cmd in (eltwise(), unary()):
        msg = raises_code("ERR_BAD_STREAM", rt["validate"], one_command(cmd, version=(1, 0)))
        assert "1.1" in msg
    rt["validate"](one_command(dma(DMA_LOAD, 0, 0, 0, 1, 128, 128, 128), version=(1, 0)))


def _io_stream(cmds, weights, in_view, in_stride, out_view, out_stride, dtype, host_dtype, host_in, host_out):
    in_addr = align(len(weights))
    out_addr = in_addr + in_view[0] * in_view[1] * in_stride
    ddr = out_addr + out_view[0] * out_view[1] * out_stride
    tensors = [tensor(INPUT, 0, in_view, in_addr, in_stride, dtype, host_dtype, NHWC, host_in),
               tensor(OUTPUT, 0, out_view, out_addr, out_stride, dtype, host_dtype, NHWC, host_out)]
    return pack_stream(tensors, cmds(in_addr, out_addr), weights, ddr, 1, 1, version=V11, sram_used=8192)


def test_int8_unary_is_a_table_lookup(rt):
    rng = np.random.default_rng(3)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    rows, elems = 4, 64

    def cmds(in_addr, out_addr):
        return [dma(DMA_LOAD, 1, 0, 0, 1, 256, 256, 256),
                dma(DMA_LOAD, 0, in_addr, 256, rows, elems, 128, 128),
                unary(INT8, 3, 256, 128, 1024, 128, rows, elems, table=0, wait={DMA0: 0, DMA1: 0}),
                dma(DMA_STORE, 0, 1024, out_addr, rows, elems, 128, 128, wait={VECTOR: 0}),
                command(END, [], wait=ALL_DONE)]

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
        return [dma(DMA_LOAD, 1, 0, 0, 1, 128, 128, 128),
                dma(DMA_LOAD, 0, in_addr, 256, h, w * c * 2, 128, 128),
                eltwise(FP16, 3, 1, 256, 128, 0, 128, 1024, 128, h, w * c, channels=c, act=1,
                        wait={DMA0: 0, DMA1: 0}),
                dma(DMA_STORE, 0, 1024, out_addr, h, w * c * 2, 128, 128, wait={VECTOR: 0}),
                command(END, [], wait=ALL_DONE)]

    view = [1, h, w, c]
    blob = _io_stream(cmds, b.tobytes().ljust(128, b"\0"), view, 128, view, 128, FP16, 4, view, view)
    mod = rt["create"]("e", blob)
    x = rng.standard_normal(view).astype(np.float32)
    out = np.zeros(view, np.float32)
    mod["e"](T(x), T(out))
    np.testing.assert_array_equal(out, eltwise_fp16("maximum", x, b.astype(np.float32), act="relu"))
    rec = json.loads(mod["get_profile"]())["last"]["records"][2]
    assert rec["opcode"] == "ELTWISE" and rec["end"] - rec["start"] == 32 + h * w * c // 32
    assert struct.unpack("<H", blob[6:8])[0] == 1


def softmax(dtype=FP16, inp=0, in_stride=128, out=2048, out_stride=128, rows=2, row_elems=16):
    return command(SOFTMAX, [dtype, inp, in_stride, out, out_stride, rows, row_elems])


def test_softmax_operands(rt):
    v = rt["validate"]
    v(one_command(softmax()))
    raises_code("ERR_OP_NOT_SUPPORTED", v, one_command(softmax(dtype=INT8)))
    for bad in (softmax(dtype=3), softmax(rows=0), softmax(row_elems=0)):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    for bad in (softmax(out=0), softmax(out=2097152 - 128), softmax(in_stride=64)):
        raises_code("ERR_INVALID_ADDR", v, one_command(bad))
    assert "1.1" in raises_code("ERR_BAD_STREAM", v, one_command(softmax(), version=(1, 0)))
