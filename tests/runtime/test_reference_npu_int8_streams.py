"""Hand-packed int8 / depthwise / ADD / POOL command streams (docs/npu.md section 6) run end to end
through runtime.NPUModuleCreate with int8 host I/O, their cycle counts against the formulas of
section 5 (their validation: test_int8_stream_validation.py; the builders: tests/int8_streams.py)."""

import json
import struct

import numpy as np
import pytest

from conftest import extreme_int8
from int8_streams import add_cmd, conv_cmd, conv_int8_stream, pool_cmd, vector_cycles, vector_stream
from npu_ref import fp16, int8, out_size
from npu_stream_pack import (
    ADD,
    ALL_DONE,
    END,
    FP16,
    INT8,
    NO_BIAS,
    NPU_REF,
    NPU_SMALL,
    POOL,
    T,
    align,
    command,
    pack_stream,
    raises_code,
    refresh_crc,
)


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
