"""The activation-aware int4 scales (quantization/awq.py): on a Llama step model with a trained model's outlier
channels, the next-token distributions after AWQ are closer to the float model's (onnxruntime on the same
file) than round to nearest's; the folds of 1 / s (into the norms and into `up` before the down projection)
leave the float model the same function; the scales are the documented ones; an input with nowhere to fold
keeps s = 1, reported; and the guard keeps round to nearest, said and warned, when the scales do worse."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import numpy_helper
from tvm import relax
from tvm.script import relax as R

import tvm_npu
from llm.reference import BUILDERS
from tvm_npu.quantization import awq, awq_plan, quantize_weights_int4, weight_int4

K, N, ROWS = 64, 64, 96
S, T, GROUP = 16, 32, 32


# -- a Llama step model with outlier channels ------------------------------------------------------------


def _outlier_llama():
    """The tests' Llama step (2 layers, d 64, GQA 4 / 2, vocab 256) with what a trained model's norms have and
    a random one's do not: a few channels of every RMSNorm gain 10x the others."""
    model = BUILDERS["llama"](seq_len=S, max_context=T)
    for init in model.graph.initializer:
        if init.name.startswith("gamma"):
            gain = numpy_helper.to_array(init).copy()
            gain[[3, 17, 40]] *= 10.0
            init.CopyFrom(numpy_helper.from_array(gain, init.name))
    return model


def _prompts(seed, n):
    rng = np.random.default_rng(seed)
    cache = [np.zeros((1, 2, T, 16), np.float32)] * 4
    return [[rng.integers(0, 256, (1, S)).astype(np.int64), np.zeros(1, np.int64), *cache] for _ in range(n)]


def _log_softmax(x):
    x = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _logits(mod, batches):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return [vm["main"](*[tvm.runtime.tensor(a) for a in b])[0].numpy() for b in batches]


@pytest.fixture(scope="module")
def llama():
    """(the ONNX model, its Relax module, calibration batches, held-out batches, onnxruntime's logits on them)."""
    model = _outlier_llama()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    held = _prompts(1, 6)
    want = [sess.run(None, dict(zip(names, b)))[0] for b in held]
    return model, tvm_npu.from_onnx(model), _prompts(0, 8), held, want


def _kl(got, want):
    """Mean KL(float || quantized) of the next-token distributions, nats per position."""
    kl = [
        np.sum(np.exp(w) * (w - g), axis=-1) for g, w in ((_log_softmax(g), _log_softmax(w)) for g, w in zip(got, want))
    ]
    return float(np.mean(kl))


def test_awq_is_closer_to_the_float_model_than_round_to_nearest(llama):
    _, mod, calibration, held, want = llama
    kl = {}
    for method in ("rtn", "awq"):
        qmod, report = quantize_weights_int4(mod, GROUP, method=method, calibration_data=calibration, progress=False)
        kl[method] = _kl(_logits(qmod, held), want)
    assert kl["awq"] <= 0.8 * kl["rtn"], kl
    # every norm's consumers searched on their block; each attention's output projection (it reads heads
    # through a reshape: nowhere to fold) and the LM head keep s = 1, said
    assert sum("on the output of" in n for n in report.notes) == 4, report.notes
    reshape = "its producer (relax.reshape) has no per-channel constant to fold 1/s into"
    assert sorted(why for _, why in report.skipped) == sorted(
        [f"awq: s = 1 (round to nearest): {why}" for why in (reshape, reshape, awq_plan.HEAD)]
    ), report.skipped


class _FloatLayer:
    """An Int4Layer stand-in that keeps its (scaled) weight in float: the module then differs from the float
    model by the folds alone."""

    def __init__(self, w):
        self.w, self.codes, self.sqnr_db = w, np.zeros(w.shape), float("inf")

    def emit(self, bb, fresh, name):
        return bb.emit(relax.const(np.ascontiguousarray(self.w.T)), fresh(f"{name}_wf"))


def test_the_folds_leave_the_float_model_the_same_function(llama, monkeypatch):
    """alpha 0.5 everywhere (s far from 1 on the outlier channels), the weights kept float after their scale:
    the module is the float model (onnxruntime) up to float rounding, so 1 / s went where s was applied."""
    _, mod, calibration, held, want = llama
    monkeypatch.setattr(awq, "ALPHAS", np.array([0.5]))
    real = weight_int4.Int4Layer.of

    def of(w, group, symmetric, method, x=None):
        return _FloatLayer(w) if method == "awq" else real(w, group, symmetric, method, x)

    monkeypatch.setattr(weight_int4.Int4Layer, "of", staticmethod(of))
    qmod, report = quantize_weights_int4(mod, GROUP, method="awq", calibration_data=calibration, progress=False)
    assert sum("alpha 0.50" in n for n in report.notes) == 6, report.notes  # q/k/v, gate/up, down per layer
    for got, ref in zip(_logits(qmod, held), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# -- one norm and two dense layers, written here -----------------------------------------------------------


def _norm_dense(gamma: np.ndarray, w: np.ndarray, w2: np.ndarray) -> tvm.IRModule:
    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((1, ROWS, K), "float32")):
            with R.dataflow():
                n = R.nn.rms_norm(x, R.const(gamma), axes=[-1], epsilon=1e-5)
                y = R.matmul(n, R.const(w))
                z = R.matmul(y, R.const(w2))
                R.output(z)
            return z

    return Mod


def _dense_only(w: np.ndarray) -> tvm.IRModule:
    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((1, ROWS, K), "float32")):
            with R.dataflow():
                y = R.matmul(x, R.const(w))
                R.output(y)
            return y

    return Mod


def _run(mod, *xs):
    """`mod`'s output on `xs` (TVM llvm): one array, or a list for several inputs."""
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = [vm["main"](tvm.runtime.tensor(x)).numpy() for x in xs]
    return out[0] if len(xs) == 1 else out


def _data(seed=0):
    rng = np.random.default_rng(seed)
    gamma = np.ones(K, np.float32)
    gamma[:4] = 12.0  # four outlier channels: the activations AWQ protects
    w = rng.normal(0, 0.1, (K, N)).astype(np.float32)
    w2 = rng.normal(0, 0.1, (N, 32)).astype(np.float32)
    batches = [[rng.normal(0, 1, (1, ROWS, K)).astype(np.float32)] for _ in range(3)]
    return gamma, w, w2, batches


def test_awq_beats_round_to_nearest_with_outlier_channels():
    gamma, w, w2, batches = _data()
    mod = _norm_dense(gamma, w, w2)
    x = batches[0][0]
    want = _run(mod, x)  # the float model
    errs = {}
    for method in ("rtn", "awq"):
        qmod, report = quantize_weights_int4(mod, 32, method=method, calibration_data=batches, progress=False)
        errs[method] = float(np.mean((_run(qmod, x) - want) ** 2))
    assert errs["awq"] < 0.8 * errs["rtn"], errs
    # z reads y, a dense layer's output: no constant to fold 1 / s into
    why = "its producer (relax.matmul) has no per-channel constant to fold 1/s into"
    assert report.skipped == [("z", f"awq: s = 1 (round to nearest): {why}")]


def test_the_scales_are_the_documented_ones(monkeypatch):
    """alpha fixed at 1, s = 1 made the worst candidate and the guard off: the norm's gain becomes gamma / s, s = mean
    |rms_norm(x)| per channel over the calibration rows the search reads (the weights' term is
    ``m ** 0``), normalized by sqrt(max * min)."""
    monkeypatch.setattr(awq, "ALPHAS", np.array([1.0]))
    real = awq.search
    monkeypatch.setattr(awq, "search", lambda a, wm, loss: real(a, wm, lambda s: float(np.all(s == 1))))
    monkeypatch.setattr(awq_plan, "guard", lambda *args: (True, "guard off"))  # these scales may lose to it
    gamma, w, w2, batches = _data()
    qmod, _ = quantize_weights_int4(
        _norm_dense(gamma, w, w2), 32, method="awq", calibration_data=batches, progress=False
    )
    xs = np.concatenate([b[0].reshape(-1, K) for b in batches]).astype(np.float64)
    normed = xs / np.sqrt(np.mean(xs**2, axis=-1, keepdims=True) + 1e-5) * gamma
    a = np.abs(normed[: awq._SAMPLES]).mean(axis=0)
    s = a / np.sqrt(a.max() * a.min())
    norm = next(
        e for _, e in weight_int4.rg.Graph(qmod["main"]).bindings if weight_int4.rg.op_name(e) == "relax.nn.rms_norm"
    )
    np.testing.assert_allclose(norm.args[1].value.numpy(), gamma / s, rtol=1e-5)


def test_awq_without_a_producer_to_fold_into_keeps_s_1():
    _, w, _, batches = _data()
    mod = _dense_only(w)
    rtn, _ = quantize_weights_int4(mod, 32, method="rtn", progress=False)
    awq_mod, report = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False)
    assert [why for _, why in report.skipped] == ["awq: s = 1 (round to nearest): its input is a graph input"]
    # s = 1, the group ranges clipped on the layer's inputs: no worse than round to nearest on them
    xs = [b[0] for b in batches]
    want = [x[0] @ w for x in xs]
    err = {
        name: float(np.mean([np.mean((y - t) ** 2) for y, t in zip(_run(m, *xs), want)]))
        for name, m in (("rtn", rtn), ("awq", awq_mod))
    }
    assert err["awq"] <= err["rtn"], err


def test_the_guard_keeps_round_to_nearest_when_the_scales_do_worse(monkeypatch):
    """The search made to choose wild scales (10^-2 to 10^2 per channel): the model is worse than round to
    nearest on the calibration data, so round to nearest is kept, with a warning and a report line, and a
    second module of the model (the memo) gets round to nearest too."""
    wild = (10.0 ** np.random.default_rng(5).uniform(-2, 2, K)).astype(np.float32)
    monkeypatch.setattr(awq, "search", lambda a, wm, loss: (wild, 1.0, 0.0, 1.0))
    gamma, w, w2, batches = _data()
    mod = _norm_dense(gamma, w, w2)
    memo: dict = {}
    with pytest.warns(UserWarning, match="kept round to nearest for the whole model"):
        qmod, report = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False, memo=memo)
    assert any(n.startswith("awq: kept round to nearest for the whole model") for n in report.notes), report.notes
    rtn, _ = quantize_weights_int4(mod, 32, method="rtn", progress=False)
    again, report2 = quantize_weights_int4(mod, 32, method="awq", progress=False, memo=memo)
    x = batches[1][0]
    np.testing.assert_array_equal(_run(qmod, x), _run(rtn, x))
    np.testing.assert_array_equal(_run(again, x), _run(rtn, x))
    assert any("kept round to nearest" in n for n in report2.notes)


def test_a_memo_gives_the_second_module_the_same_codes_without_calibration():
    gamma, w, w2, batches = _data()
    mod = _norm_dense(gamma, w, w2)
    memo: dict = {}
    first, _ = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False, memo=memo)
    second, _ = quantize_weights_int4(mod, 32, method="awq", calibration_data=None, progress=False, memo=memo)
    x = batches[1][0]
    np.testing.assert_array_equal(_run(first, x), _run(second, x))
