"""The reference NPU's MATMUL (0x30, format 1.4), from hand-packed streams (docs/npu.md sections 4-6, packed by
tests/npu_stream_pack.py, not by the compiler): bit-exact against the numpy model of section 2 over random
shapes (odd K and N, B transposed or not, grouped-query batches), its cycles, and the code of every bad
operand."""

import json

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


def matmul(
    dtype=FP16,
    batch=2,
    b_group=1,
    m=3,
    k=16,
    n=8,
    b_transposed=0,
    a=0,
    a_stride=128,
    a_bstride=384,
    b=1024,
    b_stride=128,
    b_bstride=2048,
    out=8192,
    out_stride=128,
    out_bstride=384,
    wait=None,
    **quant,
):
    """A MATMUL; `quant`: the int8 form's a_zp, b_zp, out_zp, scale (as words)."""
    ops = dict(dtype=dtype, batch=batch, b_group=b_group, m=m, k=k, n=n, b_transposed=b_transposed, a_addr=a)
    ops.update(a_stride=a_stride, a_bstride=a_bstride, b_addr=b, b_stride=b_stride, b_bstride=b_bstride)
    ops.update(out_addr=out, out_stride=out_stride, out_bstride=out_bstride, **quant)
    return command(MATMUL, ops, wait)


def one_command(cmd, version=V14):
    return pack_one(cmd, version)


def test_valid_matmul_commands_pass_validation(rt):
    for cmd in (
        matmul(),
        matmul(batch=1, a_bstride=0, b_bstride=0, out_bstride=0),  # one batch: strides unused
        matmul(batch=6, b_group=6, b_bstride=0, out=4096),  # every batch reads one B
        matmul(b=0),  # a and b may alias (x x x^T)
        matmul(b_transposed=1, b_stride=128, k=64, n=16),
    ):
        rt["validate"](one_command(cmd))


@pytest.mark.parametrize(
    "cmd",
    [
        matmul(dtype=3),  # int32 is no MAC dtype
        matmul(batch=0),
        matmul(m=0),
        matmul(k=0),
        matmul(n=0),
        matmul(b_group=0),
        matmul(b_transposed=2),
        matmul(a_bstride=256),  # below one batch of 3 rows x 128 bytes
        matmul(b_stride=0),  # below a row's bytes: a misaligned stride (ERR_INVALID_ADDR) or short
    ],
)
def test_bad_matmul_operands(rt, cmd):
    msg = str(pytest.raises(RuntimeError, rt["validate"], one_command(cmd)).value)
    assert msg.startswith(("ERR_BAD_STREAM:", "ERR_INVALID_ADDR:")), msg


@pytest.mark.parametrize(
    "cmd",
    [
        matmul(out=0),  # output on a
        matmul(out=1024 + 2048 - 128),  # output on b's second batch
        matmul(a=64),  # misaligned
        matmul(out_stride=192),
        matmul(b_bstride=2000),  # a batch stride off the alignment
        matmul(out=2097152 - 512),  # the second batch past SRAM
        matmul(batch=2, b_group=1, b=2097152 - 2048),  # the second B batch past SRAM
    ],
)
def test_bad_matmul_addresses_are_invalid_addr(rt, cmd):
    raises_code("ERR_INVALID_ADDR", rt["validate"], one_command(cmd))


def test_matmul_needs_format_1_4(rt):
    """int8 (format 1.4 too): tests/runtime/test_reference_npu_matmul_int8.py."""
    msg = raises_code("ERR_BAD_STREAM", rt["validate"], one_command(matmul(), version=(1, 3)))
    assert "1.4" in msg


def _run(rt, a, b, b_group, b_transposed, dtype=FP16, **quant):
    """A, B loaded from DDR into SRAM, one MATMUL over every batch, the result stored: returns the output and
    the MATMUL's record. fp16 (host fp32), or int8 (host int8) with `quant` the int8 operands."""
    batch, m, k = a.shape
    b_batches, br, bc = b.shape
    n = br if b_transposed else bc
    el, host = (2, 4) if dtype == FP16 else (1, INT8)  # element bytes, host dtype
    sa, sb, so = align(k * el), align(bc * el), align(n * el)
    a_bytes, b_bytes, o_bytes = batch * m * sa, b_batches * br * sb, batch * m * so
    weights = b"\0" * 128
    da, db = 128, 128 + a_bytes
    do = db + b_bytes
    s_a, s_b, s_o = 0, a_bytes, a_bytes + b_bytes
    tensors = [
        tensor(INPUT, 0, [batch, m, 1, k], da, sa, dtype, host, NHWC, [batch, m, 1, k]),
        tensor(INPUT, 1, [b_batches, br, 1, bc], db, sb, dtype, host, NHWC, [b_batches, br, 1, bc]),
        tensor(OUTPUT, 0, [batch, m, 1, n], do, so, dtype, host, NHWC, [batch, m, 1, n]),
    ]
    cmds = [
        dma(DMA_LOAD, 0, da, s_a, batch * m, k * el, sa, sa),
        dma(DMA_LOAD, 1, db, s_b, b_batches * br, bc * el, sb, sb),
        matmul(
            dtype,
            batch,
            b_group,
            m,
            k,
            n,
            int(b_transposed),
            s_a,
            sa,
            m * sa,
            s_b,
            sb,
            br * sb,
            s_o,
            so,
            m * so,
            wait={DMA0: 0, DMA1: 0},
            **quant,
        ),
        dma(DMA_STORE, 0, s_o, do, batch * m, n * el, so, so, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, cmds, weights, do + o_bytes, 2, 1, version=V14, sram_used=s_o + o_bytes)
    mod = rt["create"]("mm", blob)
    np_host = np.float32 if dtype == FP16 else np.int8
    out = np.zeros((batch, m, 1, n), np_host)
    mod["mm"](T(a[:, :, None, :].astype(np_host)), T(b[:, :, None, :].astype(np_host)), T(out))
    rec = json.loads(mod["get_profile"]())["last"]["records"][2]
    return out[:, :, 0, :], rec


@pytest.mark.parametrize("seed", range(12))
def test_matmul_is_bit_exact_to_the_numpy_model(rt, seed):
    rng = np.random.default_rng(seed)
    group = (1, 2, 6)[seed % 3]
    b_batches = int(rng.integers(1, 3))
    batch = group * b_batches
    m, k, n = (int(v) for v in rng.integers(1, 70, 3))  # odd sizes, beyond one 32-wide pass
    transposed = bool(seed % 2)
    # Wide exponents: sums that cancel, round at every add, and reach fp16's subnormals and its overflow.
    a = (rng.standard_normal((batch, m, k)) * 2.0 ** rng.integers(-12, 8, (batch, m, k))).astype(np.float16)
    b_shape = (b_batches, n, k) if transposed else (b_batches, k, n)
    b = (rng.standard_normal(b_shape) * 2.0 ** rng.integers(-12, 6, b_shape)).astype(np.float16)
    out, rec = _run(rt, a, b, group, transposed)
    want = fp16.matmul(a, b, group, transposed).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    # Section 5: op_overhead + batch * m * ceil(k / mac_rows) * ceil(n / mac_cols) passes x fp16_rate_div.
    passes = batch * m * -(-k // 32) * -(-n // 32)
    assert rec["opcode"] == "MATMUL" and rec["end"] - rec["start"] == 32 + 4 * passes
    assert rec["macs"] == batch * m * n * k


def test_matmul_edge_values(rt):
    """inf, NaN and overflow follow IEEE arithmetic in fp32, then one rounding; a sum of -0.0 products is +0.0
    (the accumulator starts at +0.0)."""
    a = np.array([[[np.inf, 1.0], [-0.0, -0.0], [65504.0, 65504.0], [np.nan, 0.0]]], np.float16)
    b = np.array([[[1.0, 0.0, 2.0], [1.0, -0.0, 1.0]]], np.float16)
    out, _ = _run(rt, a, b, 1, False)
    want = fp16.matmul(a, b).astype(np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert np.isinf(out[0, 2, 2]) and np.isnan(out[0, 0, 1]) and not np.signbit(out[0, 1, 1])
