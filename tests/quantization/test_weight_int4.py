"""Group-wise int4 weight-only quantization (quantization/weight_int4.py, `tvm_npu.quantize(weight_bits=4)`).

References: the rounding rule written out here in numpy (fp16 scale max|w| / 7 per group, codes
round(w / s) in [-8, 7]), TVM's llvm build of the float model, and the layer-output error measured in
numpy for GPTQ against round-to-nearest."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from conftest import run_cpu
from tvm_npu.models.decoder import gpt2_step
from tvm_npu.quantization.weight_int4 import quantize_gptq, quantize_rtn
from tvm_npu.tools.accuracy import layer_sqnr, sqnr_db


def _dense_module(w: np.ndarray, rows: int = 4):
    x = relax.Var("x", relax.TensorType((rows, w.shape[0]), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.matmul(x, relax.const(w)))
            out = bb.emit_output(relax.op.nn.relu(h))
        bb.emit_func_output(out)
    return bb.get()


def _reference_rtn(w_nk: np.ndarray, group: int) -> np.ndarray:
    """The documented symmetric rule, group by group: the dequantized weight [N, K]."""
    out = np.empty_like(w_nk)
    for j in range(0, w_nk.shape[1], group):
        g = w_nk[:, j : j + group]
        s = (np.abs(g).max(axis=1) / 7.0).astype(np.float16).astype(np.float32)[:, None]
        out[:, j : j + group] = np.clip(np.round(g / s), -8, 7) * s
    return out


@pytest.mark.parametrize("group", [32, 64, 128])
def test_rtn_follows_the_documented_rule_and_the_module_computes_it(group):
    rng = np.random.default_rng(group)
    w = rng.standard_normal((256, 24)).astype(np.float32)
    w[5, 3] = 9.0  # one outlier: its group's step is coarse, the others' are not
    codes, scales, zps = quantize_rtn(w.T, group, symmetric=True)
    groups = np.arange(256) // group
    np.testing.assert_array_equal((codes - zps[:, groups]) * scales[:, groups], _reference_rtn(w.T, group))
    assert np.all(scales.astype(np.float16).astype(np.float32) == scales)  # fp16 scales, as the NPU reads them
    qmod, report = tvm_npu.quantize(_dense_module(w), weight_bits=4, group_size=group)
    assert [(t.k, t.n) for t in report.tensors] == [(256, 24)]
    x = rng.standard_normal((4, 256)).astype(np.float32)
    want = np.maximum(x @ _reference_rtn(w.T, group).T, 0)
    np.testing.assert_allclose(run_cpu(qmod, x), want, rtol=1e-5, atol=1e-5)
    assert report.tensors[0].weight_sqnr_db == pytest.approx(sqnr_db(w.T, _reference_rtn(w.T, group)), abs=1e-6)


def test_asymmetric_codes_use_a_zero_point_per_group():
    w = np.random.default_rng(1).uniform(0.0, 1.0, (64, 8)).astype(np.float32)  # all positive
    codes, scales, zps = quantize_rtn(w.T, 32, symmetric=False)
    assert codes.min() >= 0 and codes.max() <= 15 and np.all(zps == 0)  # the range starts at 0
    sym = quantize_rtn(w.T, 32, symmetric=True)
    g = np.arange(64) // 32
    # 16 levels over [0, max] instead of 8: half the step, so at most half the error
    err_asym = np.abs((codes - zps[:, g]) * scales[:, g] - w.T).max()
    err_sym = np.abs((sym[0] - sym[2][:, g]) * sym[1][:, g] - w.T).max()
    assert err_asym <= 0.55 * err_sym


def test_gptq_lowers_the_layer_output_error_on_correlated_inputs():
    rng = np.random.default_rng(2)
    k, n = 128, 32
    x = rng.standard_normal((2048, 16)) @ rng.standard_normal((16, k))  # rank 16: strongly correlated
    x += 0.1 * rng.standard_normal(x.shape)
    w = rng.standard_normal((n, k)).astype(np.float32)
    g = np.arange(k) // 32
    out = {}
    for name, (codes, scales, zps) in {"rtn": quantize_rtn(w, 32, True), "gptq": quantize_gptq(w, x, 32, True)}.items():
        out[name] = sqnr_db(x @ w.T, x @ ((codes - zps[:, g]) * scales[:, g]).T)
    assert out["gptq"] > out["rtn"] + 3, out


def test_gptq_beats_rtn_on_a_decoder_step():
    """A 2-layer GPT-2-like step (d 128, 16 tokens): logits SQNR against the float model (llvm)."""
    model = gpt2_step(layers=2, d=128, heads=4, ffn=512, vocab=512, max_context=64, seq_len=16)
    mod = tvm_npu.from_onnx(model)

    def batch(seed):
        rng = np.random.default_rng(seed)
        return [rng.integers(0, 512, (1, 16)).astype(np.int64), np.zeros(1, np.int64)] + [
            np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input[2:]
        ]

    test = batch(100)
    ref = run_cpu(mod, *test)[0]
    got = {}
    for method in ("rtn", "gptq"):
        qmod, report = tvm_npu.quantize(
            mod, [batch(s) for s in range(48)], weight_bits=4, group_size=32, weight_method=method, progress=False
        )
        got[method] = sqnr_db(ref, run_cpu(qmod, *test)[0])
    assert report.batches == 48 and len(report.tensors) == 9  # 4 per block + the LM head
    assert got["gptq"] >= got["rtn"] + 1.0, got
    rows = layer_sqnr(mod, qmod, report, test, build=lambda m: tvm.compile(m, target="llvm"))
    assert len(rows) == 9 and all(10 < db < 60 for _, _, db in rows), rows


def test_bad_arguments_are_refused():
    mod = _dense_module(np.ones((64, 8), np.float32))
    with pytest.raises(tvm_npu.NPUError, match="group sizes are"):
        tvm_npu.quantize(mod, weight_bits=4, group_size=48)
    with pytest.raises(tvm_npu.NPUError, match="needs calibration_data"):
        tvm_npu.quantize(mod, weight_bits=4, weight_method="gptq")
    with pytest.raises(tvm_npu.NPUError, match="weight_bits must be 8 or 4"):
        tvm_npu.quantize(mod, [np.ones((4, 64), np.float32)], weight_bits=3)


def test_a_layer_whose_k_the_group_does_not_divide_stays_float():
    w = np.random.default_rng(3).standard_normal((48, 8)).astype(np.float32)
    qmod, report = tvm_npu.quantize(_dense_module(w), weight_bits=4, group_size=32)
    assert report.tensors == [] and "not a multiple of group_size 32" in report.skipped[0][1]
    x = np.random.default_rng(4).standard_normal((4, 48)).astype(np.float32)
    np.testing.assert_allclose(run_cpu(qmod, x), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
