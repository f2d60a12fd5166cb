"""Dense layers wider than max_width (an LLM's FFN, 8960 in Qwen2-1.5B; its LM head, a vocabulary wide):
K and N are limited by SRAM (constraint_dense_fits), not by max_width."""

import numpy as np
from tvm import relax

import tvm_npu
from conftest import run_vm
from npu_ref import QDQInterpreter
from qdq_models import GraphBuilder, ort_session, output_scale, quantize_with_ort


def _dense(m: int, k: int, n: int, seed: int = 0):
    w = (np.random.default_rng(seed).standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, relax.const(w))))
        bb.emit_func_output(out)
    return bb.get(), w


def test_fp16_dense_wider_than_max_width_runs_on_the_npu():
    for m, k, n in [(1, 3000, 2500), (3, 2100, 64), (2, 96, 4100)]:
        mod, w = _dense(m, k, n)
        report = tvm_npu.BuildReport()
        ex = tvm_npu.build(mod, report=report)
        assert [p.device for p in report.placements] == ["npu"], report.table()
        x = np.random.default_rng(1).standard_normal((m, k)).astype("float32")
        ref = x.astype(np.float64) @ w.astype(np.float64)
        got = run_vm(ex, x)
        assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max()), (m, k, n)


def test_dense_whose_weight_block_does_not_fit_sram_stays_on_the_cpu():
    # npu-small: 512 KiB; a 64-column block of K = 4000 fp16 weights with its rows needs more.
    mod, w = _dense(1, 4000, 64)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, config="npu-small", report=report)
    assert report.npu_ops == 0 and "NPU_E_SRAM" in report.table()
    x = np.random.default_rng(2).standard_normal((1, 4000)).astype("float32")
    got = run_vm(ex, x)
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    # The same layer fits npu-ref's 2 MiB.
    report = tvm_npu.BuildReport()
    tvm_npu.build(mod, config="npu-ref", report=report)
    assert report.npu_ops == 1


def test_int8_dense_wider_than_max_width_matches_onnxruntime_within_1_lsb(tmp_path):
    g = GraphBuilder(3)
    model = g.model([1, 2300], g.gemm("input", 2300, 2200), [1, 2200])
    calib = [np.random.default_rng(i).standard_normal((1, 2300)).astype("float32") for i in range(4)]
    q = quantize_with_ort(model, calib, tmp_path / "wide.onnx")
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(q), report=report)
    assert all(p.device == "npu" for p in report.placements if "matmul" in p.op or "dense" in p.op), report.table()
    sess, ref, s = ort_session(q, True), QDQInterpreter(q), output_scale(q)
    for seed in (7, 8):
        x = np.random.default_rng(seed).standard_normal((1, 2300)).astype("float32")
        got = run_vm(ex, x)
        np.testing.assert_array_equal(got, ref.run(x))
        assert np.abs(got - sess.run(None, {"input": x})[0]).max() / s <= 1 + 1e-3
