"""MATMUL's head slices (format 1.8, docs/npu.md section 3) on the reference NPU, from hand-packed streams
(tests/npu_stream_pack.py, not the compiler): Q [S, H * D] and K [Sk, H * D] in SRAM as whole rows, each
head addressed at column h * D, the scores of every head written side by side into [S, H * Sk]; one
MATMUL per head and one MATMUL over all heads with interleaved batches, both bit-exact against the numpy
model of docs/npu.md section 2 on the heads numpy slices out. A head off 16 bytes, the same stream said
to be 1.7, and batches that overlap in a row are refused with their codes."""

import json

import numpy as np
import pytest
from test_reference_npu_matmul import matmul

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

V18 = (1, 8)


def _stream(s, sk, heads, d, interleaved, version=V18):
    """Q [s, heads * d] and K [sk, heads * d] from DDR, Q_h x K_h^T for every head into [s, heads * sk]."""
    c = heads * d
    sq, so = align(c * 2), align(heads * sk * 2)
    q_bytes, k_bytes, o_bytes = s * sq, sk * sq, s * so
    dq, dk = 128, 128 + q_bytes
    do = dk + k_bytes
    s_q, s_k, s_o = 0, q_bytes, q_bytes + k_bytes
    tensors = [
        tensor(INPUT, 0, [1, s, 1, c], dq, sq, FP16, 4, NHWC, [1, s, 1, c]),
        tensor(INPUT, 1, [1, sk, 1, c], dk, sq, FP16, 4, NHWC, [1, sk, 1, c]),
        tensor(OUTPUT, 0, [1, s, 1, heads * sk], do, so, FP16, 4, NHWC, [1, s, 1, heads * sk]),
    ]
    common = dict(m=s, k=d, n=sk, b_transposed=1, a_stride=sq, b_stride=sq, out_stride=so)
    if interleaved:  # every head in one command: batch strides of one head's bytes
        mm = [matmul(batch=heads, a=s_q, a_bstride=d * 2, b=s_k, b_bstride=d * 2, out=s_o, out_bstride=sk * 2,
                     wait={DMA0: 0, DMA1: 0}, **common)]  # fmt: skip
    else:
        mm = [
            matmul(
                batch=1,
                a=s_q + h * d * 2,
                a_bstride=0,
                b=s_k + h * d * 2,
                b_bstride=0,
                out=s_o + h * sk * 2,
                out_bstride=0,
                wait={DMA0: 0, DMA1: 0},
                **common,
            )  # fmt: skip
            for h in range(heads)
        ]
    cmds = [
        dma(DMA_LOAD, 0, dq, s_q, s, c * 2, sq, sq),
        dma(DMA_LOAD, 1, dk, s_k, sk, c * 2, sq, sq),
        *mm,
        dma(DMA_STORE, 0, s_o, do, s, heads * sk * 2, so, so, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    return pack_stream(tensors, cmds, b"\0" * 128, do + o_bytes, 2, 1, version=version, sram_used=s_o + o_bytes)


@pytest.mark.parametrize("s, sk, heads, d", [(5, 8, 2, 8), (9, 16, 4, 40), (3, 24, 8, 64)])
@pytest.mark.parametrize("interleaved", [False, True])
def test_head_slices_are_bit_exact_to_the_numpy_model(rt, s, sk, heads, d, interleaved):
    rng = np.random.default_rng(s * 100 + heads)
    q = rng.standard_normal((s, heads * d)).astype(np.float16)
    k = rng.standard_normal((sk, heads * d)).astype(np.float16)
    mod = rt["create"]("heads", _stream(s, sk, heads, d, interleaved))
    out = np.zeros((1, s, 1, heads * sk), np.float32)
    mod["heads"](T(q[None, :, None].astype(np.float32)), T(k[None, :, None].astype(np.float32)), T(out))
    # The model on the heads numpy cuts out: [heads, s, d] x [heads, sk, d]^T.
    qh = q.reshape(s, heads, d).transpose(1, 0, 2)
    kh = k.reshape(sk, heads, d).transpose(1, 0, 2)
    want = fp16.matmul(qh, kh, 1, True).astype(np.float32).transpose(1, 0, 2).reshape(s, heads * sk)
    np.testing.assert_array_equal(out[0, :, 0].view(np.uint32), want.view(np.uint32))
    records = json.loads(mod["get_profile"]())["last"]["records"]
    # The cycle formula is MATMUL's of format 1.4: op_overhead + passes x fp16_rate_div per command.
    mm = [r for r in records if r["opcode"] == "MATMUL"]
    per_head = s * -(-d // 32) * -(-sk // 32)
    want_cycles = [32 + 4 * per_head * heads] if interleaved else [32 + 4 * per_head] * heads
    assert [r["end"] - r["start"] for r in mm] == want_cycles


def test_a_head_slice_needs_format_1_8(rt):
    """The same stream said to be 1.7: its head addresses are off the 128-byte alignment of 1.4's MATMUL."""
    rt["validate"](_stream(5, 8, 2, 8, False))
    msg = raises_code("ERR_INVALID_ADDR", rt["validate"], _stream(5, 8, 2, 8, False, version=(1, 7)))
    assert "alignment 128" in msg
    raises_code("ERR_INVALID_ADDR", rt["validate"], _stream(5, 8, 2, 8, True, version=(1, 7)))  # interleaved


@pytest.mark.parametrize(
    "cmd, code",
    [
        (matmul(batch=1, a=8, a_bstride=0, b_bstride=0, out_bstride=0), "ERR_INVALID_ADDR"),  # 8 B: no beat
        (matmul(batch=1, b=1024 + 40, a_bstride=0, b_bstride=0, out_bstride=0), "ERR_INVALID_ADDR"),
        (matmul(batch=1, out=8192 + 4, a_bstride=0, b_bstride=0, out_bstride=0), "ERR_INVALID_ADDR"),
        (matmul(batch=2, m=3, k=4, a_bstride=8), "ERR_INVALID_ADDR"),  # a batch stride off the beat
        # Interleaved batches must not overlap: batch stride 16 below a row of k = 16 fp16 (32 bytes).
        (matmul(batch=2, m=3, k=16, a_bstride=16), "ERR_BAD_STREAM"),
        # Nor leave the row stride: 2 batches of 96 bytes 64 apart reach past 128.
        (matmul(batch=2, m=3, k=48, a_bstride=64), "ERR_BAD_STREAM"),
    ],
)
def test_bad_head_slices_keep_their_codes(rt, cmd, code):
    raises_code(code, rt["validate"], pack_one(cmd, V18))


def test_valid_head_slices_pass(rt):
    for cmd in (
        matmul(batch=1, a=16, b=1024 + 80, out=8192 + 160, a_bstride=0, b_bstride=0, out_bstride=0),
        matmul(batch=2, m=3, k=16, a_bstride=32),  # two heads of 16 fp16 side by side in 128-byte rows
    ):
        rt["validate"](pack_one(cmd, V18))
