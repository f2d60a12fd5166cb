"""The reference NPU's int8 SOFTMAX (format 1.4: int8 codes in and out, dequantized and quantized per tensor
around the fp32 softmax; docs/npu.md section 2), from hand-packed streams (tests/npu_stream_pack.py): bit for
bit against the numpy reference (npu_ref.softmax.softmax_int8), with and without scale and mask, its
cycles at the int8 rate (section 5), and the code of every bad int8 operand."""

import json

import numpy as np
import pytest
from test_reference_npu_softmax_mask import causal, one, op, run

from npu_ref import int8, softmax
from npu_stream_pack import INT8, f32_bits, raises_code

F32 = np.float32


def quant(s_x, z_x, s_y, z_y) -> dict:
    """The int8 SOFTMAX's operand words: zero points two's complement, scales as fp32 bits."""
    return dict(in_zp=z_x & 0xFFFFFFFF, in_scale=f32_bits(s_x), out_zp=z_y & 0xFFFFFFFF, out_scale=f32_bits(s_y))


def qop(q=(0.1, 0, 1 / 256, -128), **kw):
    return op(**dict(kw, dtype=INT8, **quant(*q)))


def test_int8_softmax_operands(rt):
    v = rt["validate"]
    for ok in (qop(), qop((0.5, -128, 0.01, 127)), qop(scale=f32_bits(0.125))):
        v(one(ok))
    for bad in (
        qop((0.0, 0, 1 / 256, -128)),  # scales finite and > 0
        qop((0.1, 0, -1.0, -128)),
        qop((float("nan"), 0, 1 / 256, -128)),
        qop((0.1, 128, 1 / 256, -128)),  # zero points within int8
        qop((0.1, 0, 1 / 256, -129)),
        op(in_scale=f32_bits(0.1)),  # fp16: the int8 words are 0
        op(out_zp=3),
    ):
        raises_code("ERR_BAD_STREAM", v, one(bad))


@pytest.mark.parametrize(
    "rows, elems, q, scale, masked",
    [
        (6, 16, (0.1, 0, 1 / 256, -128), None, False),  # onnxruntime's softmax output scale / zero point
        (5, 77, (0.05, -20, 1 / 255, -128), 0.125, False),
        (9, 9, (0.2, 13, 0.004, -100), None, True),  # a causal [T, T] mask over rows
        (3, 300, (0.03125, 0, 1 / 256, -128), 0.5, True),  # a long row: outputs near code -128
    ],
)
def test_int8_softmax_is_bit_exact(rt, rows, elems, q, scale, masked):
    rng = np.random.default_rng(rows * 1000 + elems)
    x = rng.integers(-128, 128, (rows, elems)).astype(np.int8)
    mask = causal(elems, rows % elems or elems) if masked else None
    got = run(rt, x, scale, mask, quant=quant(*q))
    want = softmax.softmax_int8(x, *q, scale=scale, mask=mask)
    np.testing.assert_array_equal(got, want)
    # Independent of the fp32 order: within 1 code of the float64 softmax of the dequantized codes.
    z = softmax.z_values(None, scale, mask, x32=int8.dequantize(x, q[0], q[1])).astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    ideal = np.clip(np.rint(e / e.sum(axis=1, keepdims=True) / q[2]) + q[3], -128, 127)
    assert np.abs(got - ideal).max() <= 1 and len(np.unique(got)) > 3


def test_int8_softmax_ties_round_to_even(rt):
    """Two equal elements give 0.5 each: 0.5 / (1 / 64) = 32 exactly; with s_y = 1 / 3 (fp32), y / s_y
    lands near 1.5 and rounds as the fp32 quotient says, the same bits on both sides."""
    x = np.zeros((2, 2), np.int8)
    for q in ((0.1, 0, 1 / 64, -128), (0.1, 0, 1 / 3, 0), (0.1, 0, 0.25, 0)):  # 0.5 / 0.25 = 2 (even)
        np.testing.assert_array_equal(run(rt, x, quant=quant(*q)), softmax.softmax_int8(x, *q))
    assert (run(rt, x, quant=quant(0.1, 0, 1.0, 0)) == 0).all()  # 0.5 / 1 is a tie: round to even 0


def test_int8_softmax_cycles_at_the_int8_rate(rt):
    """Section 5: op_overhead + ceil(3 * rows * row_elems / vector_lanes), the int8 rate (fp16: lanes / 2)."""
    x = np.zeros((4, 100), np.int8)
    got = _record(rt, x)
    assert got["opcode"] == "SOFTMAX" and got["end"] - got["start"] == 32 + -(-3 * 4 * 100 // 64)


def _record(rt, x):
    from npu_stream_pack import (
        ALL_DONE,
        DMA_LOAD,
        DMA_STORE,
        END,
        INPUT,
        OUTPUT,
        ROWS,
        VECTOR,
        T,
        align,
        command,
        dma,
        pack_stream,
        tensor,
    )

    rows, elems = x.shape
    stride = align(elems)
    cmds = [
        dma(DMA_LOAD, 0, 0, 0, rows, elems, stride, stride),
        qop(inp=0, in_stride=stride, out=rows * stride, out_stride=stride, rows=rows, row_elems=elems, wait={0: 0}),
        dma(DMA_STORE, 0, rows * stride, rows * stride, rows, elems, stride, stride, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    view = [1, rows, 1, elems]
    tensors = [
        tensor(INPUT, 0, view, 0, stride, INT8, INT8, ROWS, [rows, elems]),
        tensor(OUTPUT, 0, view, rows * stride, stride, INT8, INT8, ROWS, [rows, elems]),
    ]
    blob = pack_stream(tensors, cmds, b"", 2 * rows * stride, 1, 1, version=(1, 4), sram_used=2 * rows * stride)
    mod = rt["create"]("s", blob)
    out = np.zeros_like(x)
    mod["s"](T(x), T(out))
    return json.loads(mod["get_profile"]())["last"]["records"][1]
