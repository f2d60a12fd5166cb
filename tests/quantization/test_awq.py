"""The activation-aware int4 scales (quantization/awq.py): the scales folded into the norm before change
nothing but the rounding (the float model is the same function), the output error on calibration data
with outlier channels is below round-to-nearest's, and an input with nowhere to fold keeps round to
nearest, reported."""

import numpy as np
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_npu  # noqa: F401  (registers the NPU's pieces TVM's build may meet)
from tvm_npu.quantization import quantize_weights_int4

K, N, ROWS = 64, 48, 96


def _norm_dense(gamma: np.ndarray, w: np.ndarray) -> tvm.IRModule:
    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((1, ROWS, K), "float32")):
            with R.dataflow():
                n = R.nn.rms_norm(x, R.const(gamma), axes=[-1], epsilon=1e-5)
                y = R.matmul(n, R.const(w))
                R.output(y)
            return y

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


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    gamma = np.ones(K, np.float32)
    gamma[:4] = 12.0  # four outlier channels: the activations AWQ protects
    w = rng.normal(0, 0.1, (K, N)).astype(np.float32)
    batches = [[rng.normal(0, 1, (1, ROWS, K)).astype(np.float32)] for _ in range(3)]
    return gamma, w, batches


def test_awq_beats_round_to_nearest_with_outlier_channels():
    gamma, w, batches = _data()
    mod = _norm_dense(gamma, w)
    x = batches[0][0]
    want = _run(mod, x)  # the float model
    errs = {}
    for method in ("rtn", "awq"):
        qmod, report = quantize_weights_int4(mod, 32, method=method, calibration_data=batches, progress=False)
        assert not report.skipped, report.skipped
        errs[method] = float(np.mean((_run(qmod, x) - want) ** 2))
    assert errs["awq"] < 0.8 * errs["rtn"], errs


def _rtn_numpy(w: np.ndarray, group: int) -> np.ndarray:
    """Symmetric int4 round to nearest of w [K, N] per group of K, dequantized (the test's own)."""
    out = np.empty_like(w)
    for g in range(0, w.shape[0], group):
        blk = w[g : g + group]
        scale = np.maximum(np.abs(blk).max(axis=0) / 7.0, 2.0**-14).astype(np.float16).astype(np.float32)
        out[g : g + group] = np.clip(np.round(blk / scale), -8, 7) * scale
    return out


def test_awq_folds_one_over_s_into_the_norm(monkeypatch):
    """alpha fixed at 1 (s = mean|x| normalized): the quantized module computes rms_norm(x) * (gamma / s)
    @ Q(W * s), Q the symmetric RTN written out here, s from the calibration rows as the docstring says."""
    from tvm_npu.quantization import awq

    monkeypatch.setattr(awq, "ALPHAS", np.array([1.0]))
    gamma, w, batches = _data()
    mod = _norm_dense(gamma, w)
    qmod, _ = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False)
    xs = np.concatenate([b[0].reshape(-1, K) for b in batches])
    normed = xs / np.sqrt(np.mean(xs.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5) * gamma
    a = np.maximum(np.abs(normed[: awq._SAMPLES]).mean(axis=0), 1e-8)
    s = (a / np.sqrt(a.max() * a.min())).astype(np.float32)
    x = batches[0][0]
    n = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5) * (gamma / s)
    want = n.astype(np.float32) @ _rtn_numpy(w * s[:, None], 32)
    np.testing.assert_allclose(_run(qmod, x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_awq_without_a_producer_to_fold_into_is_round_to_nearest():
    _, w, batches = _data()
    mod = _dense_only(w)
    rtn, _ = quantize_weights_int4(mod, 32, method="rtn", progress=False)
    awq, report = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False)
    assert [why for _, why in report.skipped] == ["awq: s = 1 (round to nearest): its input is a graph input"]
    x = batches[0][0]
    np.testing.assert_array_equal(_run(awq, x), _run(rtn, x))


def test_a_memo_gives_the_second_module_the_same_codes_without_calibration():
    gamma, w, batches = _data()
    mod = _norm_dense(gamma, w)
    memo: dict = {}
    first, _ = quantize_weights_int4(mod, 32, method="awq", calibration_data=batches, progress=False, memo=memo)
    second, _ = quantize_weights_int4(mod, 32, method="awq", calibration_data=None, progress=False, memo=memo)
    x = batches[1][0]
    np.testing.assert_array_equal(_run(first, x), _run(second, x))
