"""Weight-only int8 (W8A16, quantization/weight_only.py) end to end: the pass's codes and scales, dense layers
on the NPU with 1-byte weights (CONV2D's w_dtype, format 1.4) against TVM's llvm build of the same
dequantized model (within 1e-2 x max(1, max|ref|)) and bit for bit against the numpy model of docs/npu.md,
their weight bytes half the fp16 layer's (estimator and stream), and a dequantize the NPU cannot compute as
stated (a scale per row K) kept as an fp16 weight."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import chain, dense_layer, module_of
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import fp16
from tvm_npu.contract import layout, stream
from tvm_npu.dse.estimator import estimate
from tvm_npu.ir.values import constant_value
from tvm_npu.quantization import quantize_weights_int8
from tvm_npu.quantization.weight_only import int8_columns

INT8 = layout.codes("dtype")["int8"]


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def streams(ex):
    return [stream.decode(bytes(m["get_stream"]())) for m in npu_modules(ex)]


def convs(ex):
    return [c for s in streams(ex) for c in s.commands if c.op == "CONV2D"]


def weight_load_bytes(ex, weights: bool = True):
    """Bytes the DMA loads from the weight region (DDR below weights_bytes) in every NPU stream; with
    `weights=False` the bytes of every other DMA (activations loaded and stored)."""
    total = 0
    for s in streams(ex):
        wb = len(s.weights)
        for c in s.commands:
            if c.op in ("DMA_LOAD", "DMA_STORE") and (c.op == "DMA_LOAD" and c.args["ddr_addr"] < wb) == weights:
                total += c.args["rows"] * c.args["row_bytes"]
    return total


def test_int8_columns_are_symmetric_max_abs_per_column(rng):
    w = rng.standard_normal((40, 7)).astype(np.float32)
    w[:, 3] = 0.0  # an all-zero column keeps a positive scale
    codes, scales = int8_columns(w)
    assert codes.dtype == np.int8 and codes.shape == w.shape and scales.shape == (7,)
    assert np.all(scales > 0) and np.all(codes[:, 3] == 0)
    amax = np.abs(w).max(axis=0)
    np.testing.assert_array_equal(np.abs(codes).max(axis=0)[amax > 0], 127)
    np.testing.assert_allclose(codes * scales, w, atol=float(scales.max()) / 2 * 1.0001)


def test_the_pass_turns_constant_dense_weights_into_dequantized_codes(rng):
    layers = [dense_layer(rng, 64, 48, act="relu"), dense_layer(rng, 48, 16, bias=False)]
    mod = chain((5, 64), layers)
    wmod = quantize_weights_int8(mod)
    deqs = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.dequantize":
            deqs.append(e)

    relax.analysis.post_order_visit(wmod["main"], visit)
    assert len(deqs) == 2
    for d, layer in zip(deqs, layers):
        codes, scales = constant_value(d.args[0]), constant_value(d.args[1])
        want_codes, want_scales = int8_columns(layer["w"].T.copy())  # [K, N], one scale per column N
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(scales, want_scales)
        assert int(d.attrs.axis) == 1
    # No transpose of the float weight is left behind; a second pass finds nothing more to do.
    assert "permute_dims" not in wmod["main"].script()
    assert quantize_weights_int8(wmod).same_as(wmod)


@pytest.mark.parametrize(
    "m, k, n, act, bias", [(1, 256, 96, "relu", True), (7, 100, 33, "none", False), (3, 64, 130, "clip", True)]
)
def test_w8a16_dense_on_the_npu(rng, m, k, n, act, bias):
    layer = dense_layer(rng, k, n, act=act, bias=bias)
    wmod = quantize_weights_int8(chain((m, k), [layer]))
    ex, report = build(wmod)
    rows = [p for p in report.placements if p.op == "relax.matmul"]
    assert rows and all(p.device == "npu" for p in rows), report.table()
    cmds = convs(ex)
    assert cmds and all(c.args["w_dtype"] == INT8 for c in cmds)
    assert all(s.version == (1, 4) for s in streams(ex))
    x = (rng.standard_normal((m, k)) * 2).astype(np.float32)
    got = run_vm(ex, x)
    close(got, run_cpu(wmod, x))
    # Bit for bit: the numpy model of the W8A16 CONV2D on the staged input, a dense as a 1x1 conv over
    # [1, M, 1, K]; no bias means the block's bias row of zeros.
    codes, scales = int8_columns(layer["w"].T.copy())
    b = layer["b"] if bias else np.zeros(n, np.float32)
    clip = (0.0, 6.0)
    want = fp16.conv2d_w8(
        fp16.stage(x).reshape(m, 1, 1, k), codes.T.reshape(n, 1, 1, k), scales, b, (1, 1), act=act, clip=clip
    )
    np.testing.assert_array_equal(got, want.reshape(m, n).astype(np.float32))


def test_w8a16_halves_the_weight_bytes_of_a_decode_dense(rng):
    """A decode step's dense (one token, K = N = 512): the weight DMA moves 1 byte a weight, half the fp16
    layer's 2 (plus one aligned row of scales), and the DMA-bound step gets faster."""
    k = n = 512
    mod = chain((1, k), [dense_layer(rng, k, n)])
    wmod = quantize_weights_int8(mod)
    ex16, _ = build(mod)
    ex8, _ = build(wmod)
    assert convs(ex8)[0].args["w_dtype"] == INT8 and convs(ex16)[0].args["w_dtype"] == 0
    row = 4 * n  # one aligned row of fp32 per output channel (n * 4 is a multiple of 128 here)
    assert weight_load_bytes(ex16) == 2 * k * n + row  # fp16 weights, fp32 bias
    assert weight_load_bytes(ex8) == k * n + 2 * row  # int8 codes, the bias and scale rows
    e16, e8 = estimate(mod), estimate(wmod)
    # The planner may split either layer into output-channel blocks that each reload the one-row input
    # (the fp16 one does, to overlap a block's compute with the next block's weights): count those
    # activation bytes from the streams, apart from the weight bytes
    acts = weight_load_bytes(ex16, weights=False) - weight_load_bytes(ex8, weights=False)
    assert e16["ddr_bytes"] - e8["ddr_bytes"] == k * n - row + acts
    assert e8["cycles"] < 0.6 * e16["cycles"], (e8["cycles"], e16["cycles"])


def test_a_scale_per_row_stays_an_fp16_weight(rng):
    """dequantize(codes [K, N], scales [K], axis 0): one scale per input row, which CONV2D's w_dtype cannot
    apply after the sum. The dense still runs on the NPU, with the weight dequantized at compile time and
    rounded to fp16 as any float weight is, and matches the llvm build."""
    k, n = 48, 24
    codes = rng.integers(-127, 128, (k, n)).astype(np.int8)
    scales = rng.uniform(0.001, 0.02, k).astype(np.float32)

    def fn(x):
        w = relax.op.dequantize(relax.const(codes), relax.const(scales), relax.const(np.zeros(k, np.int8)), axis=0)
        return relax.op.matmul(x, w)

    mod = module_of(fn, [(4, k)])
    ex, report = build(mod)
    assert [c.args["w_dtype"] for c in convs(ex)] == [0], report.table()
    x = rng.standard_normal((4, k)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))
