"""The reference NPU's MATMUL with an int8 B (b_dtype int8, b_scale_addr; format 1.4: an int8 KV cache), from
hand-packed streams (tests/npu_stream_pack.py, not the compiler): bit-exact against the numpy model of docs/npu.md
section 2 (npu_ref.fp16.matmul_b8) over random shapes, B transposed or not, grouped-query batches; its cycles
(fp16's passes) and B's DMA bytes (one byte per element); the code of every bad operand and scale."""

import json
import struct

import numpy as np
import pytest

from npu_ref import fp16
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
    OUTPUT,
    T,
    align,
    command,
    dma,
    pack_stream,
    raises_code,
    tensor,
)
from npu_stream_pack import one_command as pack_one
from tvm_npu.contract import layout

MATMUL = layout.OPCODES["MATMUL"]
V14 = (1, 4)


def matmul_b8(batch=2, b_group=1, m=3, k=16, n=8, b_transposed=0, b_scale=6144, out=8192, **kw):
    ops = dict(dtype=FP16, batch=batch, b_group=b_group, m=m, k=k, n=n, b_transposed=b_transposed, a_addr=0)
    ops.update(a_stride=128, a_bstride=384, b_addr=1024, b_stride=128, b_bstride=2048)
    ops.update(out_addr=out, out_stride=128, out_bstride=384, b_dtype=INT8, b_scale_addr=b_scale)
    ops.update(kw)
    return command(MATMUL, ops)


def test_valid_int8_b_commands_pass_validation(rt):
    for cmd in (matmul_b8(), matmul_b8(batch=4, b_group=2), matmul_b8(b_transposed=1, k=64, n=16)):
        rt["validate"](pack_one(cmd, V14))


@pytest.mark.parametrize(
    "cmd, code",
    [
        (matmul_b8(b_dtype=5), "ERR_BAD_STREAM"),  # int16 is no B dtype
        (matmul_b8(b_dtype=FP16), "ERR_BAD_STREAM"),  # fp16 is b_dtype 0
        (matmul_b8(b_dtype=0), "ERR_BAD_STREAM"),  # a scale address without an int8 B
        (matmul_b8(dtype=INT8), "ERR_OP_NOT_SUPPORTED"),  # int8 A with a per-batch B scale: no such datapath
        (matmul_b8(b_scale=6144 + 4), "ERR_INVALID_ADDR"),  # misaligned scale table
        (matmul_b8(b_scale=2097152 - 4, batch=4), "ERR_INVALID_ADDR"),  # the second scale past SRAM
        (matmul_b8(b_scale=8192), "ERR_INVALID_ADDR"),  # the output over the scales
    ],
)
def test_bad_int8_b_operands(rt, cmd, code):
    raises_code(code, rt["validate"], pack_one(cmd, V14))


def _run(rt, a, codes, scales, b_group, b_transposed):
    """A (fp16) and B (int8 codes) staged, the scales from the weight region, one MATMUL, the result stored:
    (the output, the MATMUL's record, B's DMA record)."""
    batch, m, k = a.shape
    b_batches, br, bc = codes.shape
    n = br if b_transposed else bc
    sa, sb, so = align(k * 2), align(bc), align(n * 2)
    a_bytes, b_bytes, o_bytes = batch * m * sa, b_batches * br * sb, batch * m * so
    weights = struct.pack(f"<{b_batches}f", *scales).ljust(128, b"\0")
    da, db = 128, 128 + a_bytes
    do = db + b_bytes
    s_a, s_b, s_s = 0, a_bytes, a_bytes + b_bytes
    s_o = s_s + 128
    tensors = [
        tensor(INPUT, 0, [batch, m, 1, k], da, sa, FP16, 4, NHWC, [batch, m, 1, k]),
        tensor(INPUT, 1, [b_batches, br, 1, bc], db, sb, INT8, INT8, NHWC, [b_batches, br, 1, bc]),
        tensor(OUTPUT, 0, [batch, m, 1, n], do, so, FP16, 4, NHWC, [batch, m, 1, n]),
    ]
    ops = dict(dtype=FP16, batch=batch, b_group=b_group, m=m, k=k, n=n, b_transposed=int(b_transposed))
    ops.update(a_addr=s_a, a_stride=sa, a_bstride=m * sa, b_addr=s_b, b_stride=sb, b_bstride=br * sb)
    ops.update(out_addr=s_o, out_stride=so, out_bstride=m * so, b_dtype=INT8, b_scale_addr=s_s)
    cmds = [
        dma(DMA_LOAD, 0, da, s_a, batch * m, k * 2, sa, sa),
        dma(DMA_LOAD, 1, db, s_b, b_batches * br, bc, sb, sb),
        dma(DMA_LOAD, 0, 0, s_s, 1, 4 * b_batches, 128, 128, wait={DMA0: 0}),
        command(MATMUL, ops, {DMA0: 0, DMA1: 0}),
        dma(DMA_STORE, 0, s_o, do, batch * m, n * 2, so, so, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, cmds, weights, do + o_bytes, 2, 1, version=V14, sram_used=s_o + o_bytes)
    mod = rt["create"]("mm", blob)
    out = np.zeros((batch, m, 1, n), np.float32)
    mod["mm"](T(a[:, :, None, :].astype(np.float32)), T(codes[:, :, None, :].copy()), T(out))
    recs = json.loads(mod["get_profile"]())["last"]["records"]
    return out[:, :, 0, :], recs[3], recs[1]


@pytest.mark.parametrize("seed", range(10))
def test_int8_b_matmul_is_bit_exact_to_the_numpy_model(rt, seed):
    rng = np.random.default_rng(100 + seed)
    group = (1, 2, 4)[seed % 3]
    b_batches = int(rng.integers(1, 3))
    batch = group * b_batches
    m, k, n = (int(v) for v in rng.integers(1, 70, 3))
    transposed = bool(seed % 2)
    a = (rng.standard_normal((batch, m, k)) * 2.0 ** rng.integers(-12, 8, (batch, m, k))).astype(np.float16)
    shape = (b_batches, n, k) if transposed else (b_batches, k, n)
    codes = rng.integers(-128, 128, shape).astype(np.int8)
    scales = (rng.uniform(0.5, 2.0, b_batches) * 2.0 ** rng.integers(-10, 2, b_batches)).astype(np.float32)
    out, rec, b_dma = _run(rt, a, codes, scales, group, transposed)
    want = fp16.matmul_b8(a, codes, scales, group, transposed).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    # Section 5: fp16's passes; B's rows are one byte per element, whole bursts each.
    passes = batch * m * -(-k // 32) * -(-n // 32)
    assert rec["opcode"] == "MATMUL" and rec["end"] - rec["start"] == 32 + 4 * passes
    assert rec["macs"] == batch * m * n * k
    br, bc = shape[1], shape[2]
    assert b_dma["bus_bytes"] == b_batches * br * -(-bc // 128) * 128


def test_int8_b_scale_after_the_sum(rt):
    """One multiply after the in-order sum, not a dequantized B: 1 + 2^-11 (fp16) x code 3 x scale 1/3 rounds
    as the contract says, and edge values follow IEEE (code 0 times inf is NaN)."""
    a = np.array([[[1.0 + 2.0**-10, 1.0], [np.inf, 1.0], [-0.0, -0.0]]], np.float16)
    codes = np.array([[[3, 0], [-3, 0]]], np.int8)
    scales = np.array([1.0 / 3.0], np.float32)
    out, _, _ = _run(rt, a, codes, scales, 1, False)
    want = fp16.matmul_b8(a, codes, scales).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert np.isnan(out[0, 1, 1]) and not np.signbit(out[0, 2, 0])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_scale_is_bad_stream_when_the_command_runs(rt, bad):
    a = np.ones((1, 2, 4), np.float16)
    codes = np.ones((1, 4, 4), np.int8)
    raises_code("ERR_BAD_STREAM", _run, rt, a, codes, np.array([bad], np.float32), 1, False)
