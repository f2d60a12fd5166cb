"""Quantized staging (stream format 1.3, docs/npu.md sections 2 and 6): a float32 host tensor quantized to
int8 / int16 as the runtime stages a region input, and dequantized as it stages an output. Hand-packed
streams (tests/npu_stream_pack.py) against the numpy model of the contract (tests/npu_ref) and against
TVM llvm's build of relax.quantize / relax.dequantize; bad tables refused with their codes. The compiler's
side is tests/backend/test_quantized_staging_build.py."""

import numpy as np
import pytest

from npu_ref import int8
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    INT16,
    NCHW,
    OUTPUT,
    ROWS,
    T,
    align,
    command,
    dma,
    pack_stream,
    raises_code,
    tensor,
)
from tvm_npu.contract import stream
from tvm_npu.runtime import profile_of

V12, V13 = (1, 2), (1, 3)
NP = {INT8: np.int8, INT16: np.int16}


def staging_values(scale, rng, n):
    """Random values over and beyond the range, exact and near ties, NaN, infinities, signed zeros."""
    s = np.float64(np.float32(scale))
    k = rng.integers(-40000, 40000, n // 4)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-40], np.float32)
    ties = ((k + 0.5) * s).astype(np.float32)
    return np.concatenate(
        [
            special,
            ties,
            np.nextafter(ties, np.inf),
            (k * s).astype(np.float32),
            (rng.standard_normal(n) * 300 * s).astype(np.float32),
        ]
    )[:n]


# --- a hand-packed 1.3 stream: input quantized in, copied, out as raw codes and dequantized ---------------


def copy_stream(dtype, shape, layout, q_in, q_out, version=V13, qparams=True, **pack):
    """Input 0 (host fp32, device `dtype`, quantized with q_in) is copied through SRAM to output 0 (raw
    codes, host `dtype`) and output 1 (host fp32, dequantized with q_out)."""
    size = 1 if dtype == INT8 else 2
    if layout == NCHW:
        n, c, h, w = shape
        view = [n, h, w, c]
    else:
        view = [1, int(np.prod(shape[:-1])), 1, shape[-1]]
    rows, row_bytes = view[0] * view[1], view[2] * view[3] * size
    stride = align(row_bytes)
    a_at, b_at, c_at = 0, rows * stride, 2 * rows * stride
    cmds = [
        dma(DMA_LOAD, 0, a_at, 0, rows, row_bytes, stride, stride),
        dma(DMA_STORE, 0, 0, b_at, rows, row_bytes, stride, stride, wait={DMA0: 0}),
        dma(DMA_STORE, 1, 0, c_at, rows, row_bytes, stride, stride, wait={DMA0: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    tensors = [
        tensor(INPUT, 0, view, a_at, stride, dtype, FP32, layout, shape),
        tensor(OUTPUT, 0, view, b_at, stride, dtype, dtype, layout, shape),
        tensor(OUTPUT, 1, view, c_at, stride, dtype, FP32, layout, shape),
    ]
    table = [q_in, (0.0, 0), q_out] if qparams else None
    return pack_stream(
        tensors, cmds, b"", 3 * rows * stride, 1, 2, version=version, sram_used=rows * stride, qparams=table, **pack
    )


CASES = [  # dtype, host shape, layout, (scale, zp) in, (scale, zp) out
    (INT8, (3, 37), ROWS, (0.1, 3), (0.05, -7)),
    (INT8, (2, 1, 40), ROWS, (1 / 3, -128), (0.0372, 127)),
    (INT8, (1, 3, 4, 5), NCHW, (0.25, 0), (0.25, 0)),  # exact ties; NCHW: staged element by element
    (INT16, (3, 37), ROWS, (0.00031, 0), (1e-3, 0)),
    (INT16, (1, 1, 64), ROWS, (5.4540469e-05, 0), (4.4e-05, 0)),
]


@pytest.mark.parametrize("dtype, shape, layout, q_in, q_out", CASES)
def test_staging_matches_the_numpy_model(rt, dtype, shape, layout, q_in, q_out):
    rng = np.random.default_rng(sum(shape) + dtype)
    x = staging_values(q_in[0], rng, int(np.prod(shape))).reshape(shape)
    mod = rt["create"]("s", copy_stream(dtype, shape, layout, q_in, q_out))
    codes, back = np.zeros(shape, NP[dtype]), np.zeros(shape, np.float32)
    mod["s"](T(x), T(codes), T(back))
    want = int8.quantize(x, *q_in, NP[dtype])
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(back.view(np.uint32), int8.dequantize(want, *q_out).view(np.uint32))
    assert codes.flat[0] == np.iinfo(NP[dtype]).max and codes.flat[1] == np.iinfo(NP[dtype]).max  # NaN
    assert codes.flat[3] == np.iinfo(NP[dtype]).min and codes.flat[4] == codes.flat[5] == q_in[1]
    # fp32 is the host dtype now; the integer one is refused
    raises_code("ERR_SHAPE_MISMATCH", mod["s"], T(want), T(codes), T(back))


def test_ties_round_to_even(rt):
    x = (np.arange(-8, 8, dtype=np.float32) + 0.5) * np.float32(0.25)  # x / s = -7.5 .. 7.5, exact
    mod = rt["create"]("s", copy_stream(INT8, (1, 16), ROWS, (0.25, 0), (1.0, 0)))
    codes, back = np.zeros((1, 16), np.int8), np.zeros((1, 16), np.float32)
    mod["s"](T(x.reshape(1, 16)), T(codes), T(back))
    np.testing.assert_array_equal(codes[0], [-8, -6, -6, -4, -4, -2, -2, 0, 0, 2, 2, 4, 4, 6, 6, 8])


def _view_rows(x, layout):
    """The host tensor's values per row of the device view (n * H + h): a ROWS tensor's rows of its last
    axis, an NCHW tensor's (n, h) rows of every channel."""
    if layout == NCHW:
        return x.transpose(0, 2, 1, 3).reshape(x.shape[0] * x.shape[2], -1)
    return x.reshape(-1, x.shape[-1])


@pytest.mark.parametrize("dtype, shape, layout, q_in, q_out", CASES)
def test_the_staging_counts_the_values_it_clamps(rt, dtype, shape, layout, q_in, q_out):
    """clamped_inputs / clamped_rows (docs/npu.md section 2) against the numpy formula: the values whose
    round_half_even(fp32(x / s)) + z falls outside the dtype (NaN fails every compare: it counts), per input
    and per view row, summed over calls in "total"; the fp16 count stays 0; reset_profile zeroes them."""
    rng = np.random.default_rng(sum(shape) + dtype + 1)
    x = staging_values(q_in[0], rng, int(np.prod(shape))).reshape(shape)
    if layout == NCHW:  # the last view row without a clamped value: not listed
        x[:, :, -1] = 0.0
    elif x.size > shape[-1]:
        x.reshape(-1, shape[-1])[-1] = 0.0
    mod = rt["create"]("s", copy_stream(dtype, shape, layout, q_in, q_out))
    codes, back = np.zeros(shape, NP[dtype]), np.zeros(shape, np.float32)
    info = np.iinfo(NP[dtype])
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.rint(_view_rows(x, layout) / np.float32(q_in[0])) + q_in[1]
    per_row = (~((r >= info.min) & (r <= info.max))).sum(axis=1)
    want_rows = [[i, int(c)] for i, c in enumerate(per_row) if c]
    assert want_rows and (len(per_row) == 1 or want_rows[-1][0] < len(per_row) - 1)
    for calls in (1, 2):
        mod["s"](T(x), T(codes), T(back))
        prof = profile_of(mod)
        assert prof["last"]["clamped_inputs"] == [int(per_row.sum())]
        assert prof["last"]["clamped_rows"] == [want_rows]
        assert prof["total"]["clamped_inputs"] == [calls * int(per_row.sum())]
        assert tuple(mod["clamped_inputs"]()) == (calls * int(per_row.sum()),)
        assert prof["last"]["saturated_inputs"] == prof["total"]["saturated_inputs"] == [0]
    mod["reset_profile"]()
    assert profile_of(mod)["total"]["clamped_inputs"] == [0] and tuple(mod["clamped_inputs"]()) == (0,)


@pytest.mark.parametrize("zp, want", [(0, [3, 0, 4]), (3, [3, 0, 4]), (-128, [3, 1, 5])])
def test_clamped_counts_at_the_bounds(rt, zp, want):
    """Counted by hand, s = 0.25 so every x / s below is exact. A tie half a step past a bound rounds to
    even: with z 0, 127.5 gives 128 (saturates) and -128.5 gives -128 (does not); with z 3 the top tie
    124.5 gives 124 + 3 (does not) and the bottom one -131.5 gives -132 + 3 (saturates). NaN, +-inf and
    the largest finite values count; with z -128, -1 is one below the range."""
    hi, lo = 127 - zp, -128 - zp  # the quotients that land on the bounds
    rows = [
        [hi + 0.5, hi - 0.5, lo - 0.5, np.nan, hi, np.inf, lo, 0.0],
        [hi - 1.5, lo + 0.5, lo, hi, 1.0, -1.0, 0.5, -0.5],
        [lo - 1.5, -np.inf, 3e38, -3e38, hi + 0.49, lo - 0.49, 2.5, -2.5],
    ]
    x = (np.array(rows, np.float64) * 0.25).astype(np.float32)
    mod = rt["create"]("s", copy_stream(INT8, x.shape, ROWS, (0.25, zp), (1.0, 0)))
    mod["s"](T(x), T(np.zeros(x.shape, np.int8)), T(np.zeros(x.shape, np.float32)))
    last = profile_of(mod)["last"]
    assert last["clamped_inputs"] == [sum(want)], last["clamped_rows"]
    assert last["clamped_rows"] == [[[i, c] for i, c in enumerate(want) if c]]


@pytest.mark.parametrize("dtype, q", [(INT8, (0.0372, -7)), (INT16, (0.00031, 0))])
def test_the_numpy_model_is_what_tvm_llvm_computes(dtype, q):
    """The contract is TVM 0.27's llvm build of relax.quantize / relax.dequantize (ties, clamping, NaN)."""
    import tvm
    from tvm import relax

    name = "int8" if dtype == INT8 else "int16"
    x = staging_values(q[0], np.random.default_rng(5), 20000)
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    scale, zp = relax.const(np.float32(q[0])), relax.const(np.array(q[1], name))
    with bb.function("main", [xv]):
        with bb.dataflow():
            c = bb.emit(relax.op.quantize(xv, scale, zp, axis=-1, out_dtype=name))
            d = bb.emit(relax.op.dequantize(c, scale, zp, axis=-1, out_dtype="float32"))
            out = bb.emit_output(relax.Tuple([c, d]))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    codes, back = (t.numpy() for t in vm["main"](tvm.runtime.tensor(x)))
    np.testing.assert_array_equal(codes, int8.quantize(x, *q, NP[dtype]))
    np.testing.assert_array_equal(back.view(np.uint32), int8.dequantize(codes, *q).view(np.uint32))


# --- validation at load -------------------------------------------------------------------------------

GOOD = (INT8, (3, 37), ROWS, (0.1, 3), (0.05, -7))


def test_a_valid_table_passes_and_old_streams_still_load(rt):
    rt["validate"](copy_stream(*GOOD))
    # A 1.2 stream (no table, fp16 staging) still loads in a 1.3 runtime.
    view, shape = [1, 2, 1, 16], (2, 16)
    tensors = [
        tensor(INPUT, 0, view, 0, 128, FP16, FP32, ROWS, shape),
        tensor(OUTPUT, 0, view, 256, 128, FP16, FP32, ROWS, shape),
    ]
    cmds = [
        dma(DMA_LOAD, 0, 0, 0, 2, 32, 128, 128),
        dma(DMA_STORE, 1, 0, 256, 2, 32, 128, 128, wait={DMA0: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    rt["validate"](pack_stream(tensors, cmds, b"", 512, 1, 1, version=V12, sram_used=256))


@pytest.mark.parametrize(
    "why, kwargs",
    [
        ("1.2 with a quantized descriptor", dict(version=V12, qparams=False)),
        ("1.2 with a table", dict(version=V12)),
        ("no table", dict(qparams=False)),
        ("scale 0", dict(q_in=(0.0, 3))),
        ("negative scale", dict(q_in=(-0.1, 3))),
        ("infinite scale", dict(q_out=(np.inf, 0))),
        ("NaN scale", dict(q_in=(np.nan, 0))),
        ("int8 zero point out of range", dict(q_in=(0.1, 128))),
        ("int8 zero point out of range, low", dict(q_out=(0.1, -129))),
        ("int16 zero point not 0", dict(dtype=INT16, q_in=(0.1, 1), q_out=(0.1, 0))),
        ("table overlaps the command table", dict(qparams_offset=64)),
        ("table past weights_offset", dict(qparams_offset=128 + 3 * 64 + 4 * 128 + 128)),
        ("table misaligned", dict(qparams_offset=128 + 3 * 64 + 4 * 128 + 2)),
    ],
)
def test_bad_quantization_tables_are_refused_at_load(rt, why, kwargs):
    args = dict(zip(("dtype", "shape", "layout", "q_in", "q_out"), GOOD))
    args.update(kwargs)
    blob = copy_stream(
        args.pop("dtype"), args.pop("shape"), args.pop("layout"), args.pop("q_in"), args.pop("q_out"), **args
    )
    if why == "table past weights_offset":  # the packer grew the blob to hold it; point it past the end
        blob = _with_header_word(blob, 13, len(blob) - 8)
    raises_code("ERR_BAD_STREAM", rt["validate"], blob)


def test_a_table_entry_of_a_tensor_not_quantized_must_be_zero(rt):
    blob = copy_stream(*GOOD)
    at = int.from_bytes(blob[52:56], "little")
    entry = at + 8  # output 0: raw codes, not quantized
    blob = bytearray(blob)
    blob[entry : entry + 4] = np.float32(1.0).tobytes()
    raises_code("ERR_BAD_STREAM", rt["validate"], _refresh(bytes(blob)))


def _with_header_word(blob, word, value):
    blob = bytearray(blob)
    blob[4 * word : 4 * word + 4] = int(value).to_bytes(4, "little")
    return _refresh(bytes(blob))


def _refresh(blob):
    import zlib

    return blob[:48] + (zlib.crc32(blob[64:]) & 0xFFFFFFFF).to_bytes(4, "little") + blob[52:]


def test_python_encoder_round_trips_the_table():
    from tvm_npu.contract.config import get_config

    view = (1, 2, 1, 16)
    tensors = [
        stream.TensorDesc("input", 0, "int8", "float32", "ROWS", (2, 16), view, 0, 128, 0.125, -3),
        stream.TensorDesc("output", 0, "int16", "float32", "ROWS", (2, 16), view, 256, 128, 2e-4, 0),
        stream.TensorDesc("output", 1, "int8", "int8", "ROWS", (2, 16), view, 512, 128),
    ]
    blob = stream.encode(stream.Stream(get_config("npu-ref"), tensors, [stream.Command("END")], b"", 640, 0))
    back = stream.decode(blob)
    assert back.version == (1, 3)  # quantized staging is 1.3; nothing here needs 1.4 (written_minor)
    assert [(t.scale, t.zero_point) for t in back.tensors] == [(0.125, -3), (np.float32(2e-4), 0), (0.0, 0)]
