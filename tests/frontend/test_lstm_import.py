"""ONNX LSTM import (onnx_lstm.py) against onnxruntime's LSTM: forward, reverse, bidirectional, with and
without biases and initial states, layout 1; built for the CPU (llvm) and with tvm_npu.build."""

import numpy as np
import pytest

import tvm_npu
from conftest import run_vm
from lstm_models import feeds_of, llvm_run, lstm_model, ort_run


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(direction="reverse"),
        dict(direction="bidirectional"),
        dict(bias=False, init=False),
        dict(T=1, B=1, H=16, I=10),
    ],
)
def test_lstm_matches_onnxruntime(kw):
    model = lstm_model(**kw)
    feeds = feeds_of(model)
    for got, want in zip(llvm_run(model, feeds), ort_run(model, feeds)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_layout_1_is_the_batch_major_form_of_layout_0():
    # onnxruntime refuses layout 1, so its layout-0 result, transposed, is the reference.
    m0, m1 = lstm_model(direction="bidirectional"), lstm_model(direction="bidirectional", layout=1)
    f0 = feeds_of(m0)
    f1 = {"X": f0["X"].transpose(1, 0, 2), "h0": f0["h0"].transpose(1, 0, 2), "c0": f0["c0"].transpose(1, 0, 2)}
    y, y_h, y_c = ort_run(m0, f0)
    got = llvm_run(m1, f1)
    np.testing.assert_allclose(got[0], y.transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], (y_h, y_c)):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("init", [True, False], ids=["initial_state", "zero_state"])
def test_lstm_through_the_npu_build_matches_onnxruntime(init):
    # fp16 tolerance. Without initial_h / initial_c (ONNX's zeros) the first step has no h @ R and no
    # f * c: a constant-zero state matched into a dense layer once crashed the build.
    model = lstm_model(T=8, B=1, I=10, H=16, seed=3, init=init)
    feeds = feeds_of(model)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert any(p.device == "npu" and p.op == "relax.matmul" for p in report.placements)
    got = run_vm(ex, *[feeds[i.name] for i in model.graph.input])
    for g, w in zip(got, ort_run(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2)


def test_full_length_sequence_lens_is_accepted():
    model = lstm_model(extra_inputs=[(4, np.array([5, 5], np.int32))])
    feeds = feeds_of(model)
    for got, want in zip(llvm_run(model, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
