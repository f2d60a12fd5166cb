"""SOFTMAX's format-1.4 scale and additive mask on the reference NPU, from hand-packed streams
(tests/npu_stream_pack.py): bit for bit against the numpy reference of docs/npu.md section 2
(tests/npu_ref/softmax.py), -inf masks and fully masked rows included, and the ERR_* code of every bad
operand."""

import numpy as np
import pytest

from npu_ref import exact, softmax
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    OUTPUT,
    ROWS,
    SOFTMAX,
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

V13, V14 = (1, 3), (1, 4)
NEG_INF = np.float16(-np.inf)


def op(inp=0, in_stride=128, out=2048, out_stride=128, rows=2, row_elems=16, wait=None, **masked):
    a = dict(
        dtype=FP16,
        in_addr=inp,
        in_stride=in_stride,
        out_addr=out,
        out_stride=out_stride,
        rows=rows,
        row_elems=row_elems,
    )
    return command(SOFTMAX, dict(a, **masked), wait)


def one(cmd, version=V14):
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, version=version)


def test_masked_softmax_operands(rt):
    v = rt["validate"]
    mask = dict(mask_addr=4096, mask_stride=128, mask_rows=3, mask_row0=2)
    for ok in (op(), op(scale=f32_bits(0.125)), op(**mask), op(scale=f32_bits(-2.0), **mask)):
        v(one(ok))
    for bad in (
        op(scale=f32_bits(float("inf"))),
        op(scale=f32_bits(float("nan"))),
        op(mask_addr=4096),  # a mask address without mask rows
        op(mask_stride=128),
        op(mask_row0=1),
        op(**dict(mask, mask_row0=3)),  # mask_row0 must be below mask_rows
    ):
        raises_code("ERR_BAD_STREAM", v, one(bad))
    for bad in (
        op(**dict(mask, mask_addr=2048 + 64)),  # overlaps the output
        op(**dict(mask, mask_addr=2097152 - 128)),  # past the end of SRAM
        op(**dict(mask, mask_addr=4097)),  # misaligned
        op(**dict(mask, mask_stride=16)),  # a stride below the row's 32 bytes
    ):
        raises_code("ERR_INVALID_ADDR", v, one(bad))
    # A 1.3 stream has 7 SOFTMAX operands: a scale or mask there is an unknown word.
    v(one(op(), version=V13))
    for bad in (op(scale=f32_bits(0.5)), op(**mask)):
        assert "unused operand word" in raises_code("ERR_BAD_STREAM", v, one(bad, version=V13))


def run(rt, x, scale=None, mask=None, mask_row0=0, out_stride=None, quant=None):
    """x [rows, E] through DMA -> SOFTMAX (mask rows loaded from the weight region) -> DMA; fp16 out, or
    with `quant` (in_zp, in_scale, out_zp, out_scale operand words) int8 codes in and out."""
    rows, elems = x.shape
    el, dtype, host = (2, FP16, FP32) if quant is None else (1, INT8, INT8)
    stride = align(elems * el)
    out_stride = out_stride or stride
    weights = b""
    masked = {}
    if scale is not None:
        masked["scale"] = f32_bits(scale)
    if mask is not None:
        m = np.zeros((mask.shape[0], align(elems * 2) // 2), np.float16)
        m[:, :elems] = mask
        weights = m.tobytes()
    mask_stride = align(elems * 2)
    in_ddr = align(len(weights))
    out_ddr = in_ddr + rows * stride
    in_sram, out_sram, mask_sram = 0, rows * stride, rows * (stride + out_stride)
    if mask is not None:
        masked.update(mask_addr=mask_sram, mask_stride=mask_stride, mask_rows=mask.shape[0], mask_row0=mask_row0)
    cmds = [dma(DMA_LOAD, 0, in_ddr, in_sram, rows, elems * el, stride, stride)]
    if mask is not None:
        cmds.append(dma(DMA_LOAD, 1, 0, mask_sram, mask.shape[0], elems * 2, mask_stride, mask_stride))
    cmds += [
        op(
            in_sram,
            stride,
            out_sram,
            out_stride,
            rows,
            elems,
            wait={DMA0: 0, DMA1: 0},
            **masked,
            **({} if quant is None else dict(quant, dtype=INT8)),
        ),
        dma(DMA_STORE, 0, out_sram, out_ddr, rows, elems * el, out_stride, stride, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    view = [1, rows, 1, elems]
    tensors = [
        tensor(INPUT, 0, view, in_ddr, stride, dtype, host, ROWS, [rows, elems]),
        tensor(OUTPUT, 0, view, out_ddr, stride, dtype, host, ROWS, [rows, elems]),
    ]
    sram = mask_sram + (0 if mask is None else mask.shape[0] * mask_stride)
    blob = pack_stream(tensors, cmds, weights, out_ddr + rows * stride, 1, 1, version=V14, sram_used=sram)
    mod = rt["create"]("s", blob)
    if quant is not None:
        out = np.zeros((rows, elems), np.int8)
        mod["s"](T(x.astype(np.int8)), T(out))
        return out
    out = np.zeros((rows, elems), np.float32)
    mod["s"](T(x.astype(np.float16).astype(np.float32)), T(out))  # fp16 values: staged exactly
    return out.astype(np.float16)


def causal(t, rows=None, value=-np.inf):
    """[rows, t]: 0 where j <= i, `value` above the diagonal (the last `rows` query positions)."""
    rows = rows or t
    i = np.arange(t - rows, t)[:, None]
    return np.where(np.arange(t)[None, :] <= i, 0.0, value).astype(np.float16)


def assert_bits(got, want):
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize(
    "heads, t, elems, scale, kind",
    [
        (3, 5, 5, 0.125, "causal"),  # [T, T] causal over 3 heads: mask row r % 5
        (2, 17, 17, None, "causal"),
        (4, 1, 33, 0.7071, "random"),  # a decode row [1, T] shared by every head
        (2, 7, 64, -1.5, "random"),
        (1, 9, 100, 3.0, "neg10000"),  # -10000: the finite large negative of BERT-style masks
        (5, 3, 1, 2.0, "random"),  # one-element rows
    ],
)
def test_masked_softmax_is_bit_exact(rt, heads, t, elems, scale, kind):
    rng = np.random.default_rng(heads * 100 + elems)
    if kind == "causal":
        mask = causal(elems, t)
    elif kind == "neg10000":
        mask = np.where(rng.random((t, elems)) < 0.4, -10000.0, 0.0).astype(np.float16)
    else:
        mask = rng.standard_normal((t, elems)).astype(np.float16)
        mask[rng.random((t, elems)) < 0.3] = NEG_INF
        mask[:, 0] = 0  # keep one element of every row
    x = (rng.standard_normal((heads * t, elems)) * 4).astype(np.float16)
    x[rng.random(x.shape) < 0.02] = 65504  # edge values: the fp16 extremes
    x[rng.random(x.shape) < 0.02] = -65504
    got = run(rt, x, scale, mask)
    assert_bits(got, softmax.softmax(x, scale, mask))
    assert exact.fp16_ulps(got, softmax.exact(x, scale, mask)).max() <= 1
    if kind == "causal":  # above the diagonal exactly 0; the first query row all on its first key
        rows = causal(elems, t) == NEG_INF
        assert (got.reshape(heads, t, elems)[:, rows] == 0).all()


def test_fully_masked_row_is_nan_and_others_are_not(rt):
    """A row whose z are all -inf has max -inf and z - max NaN: NaN, as ONNX and TVM give."""
    rng = np.random.default_rng(7)
    mask = causal(6)
    mask[2] = NEG_INF  # query row 2 sees nothing
    x = rng.standard_normal((12, 6)).astype(np.float16)
    got = run(rt, x, 0.5, mask)
    assert_bits(got, softmax.softmax(x, 0.5, mask))
    nan_rows = np.isnan(got).all(axis=1)
    assert nan_rows.tolist() == [r % 6 == 2 for r in range(12)]
    assert not np.isnan(got[~nan_rows]).any()


def test_mask_row0_starts_the_period_mid_mask(rt):
    """A tile that starts at global row 4 of a [3, T] mask period reads mask row 4 % 3 = 1 first."""
    rng = np.random.default_rng(8)
    mask = rng.standard_normal((3, 20)).astype(np.float16)
    x = rng.standard_normal((5, 20)).astype(np.float16)
    got = run(rt, x, None, mask, mask_row0=1)
    assert_bits(got, softmax.softmax(x, None, mask, 1))
    assert_bits(got[0], run(rt, x[:1], None, mask[1:2])[0])


def test_zero_operands_keep_the_unmasked_softmax(rt):
    """scale 0 and no mask is 1.1's SOFTMAX: the same bits as the reference without them."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((6, 40)) * 3).astype(np.float16)
    assert_bits(run(rt, x), softmax.softmax(x))
    assert exact.fp16_ulps(run(rt, x), exact.softmax(x)).max() <= 1
