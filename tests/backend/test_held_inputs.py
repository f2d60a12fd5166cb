"""Held region inputs (backend/plan/held_inputs.py): a MATMUL's B that is a region input (a diffusion step's
hoisted K) is loaded into SRAM by one DMA ahead of its reader instead of one DMA per batch right before
each MATMUL. Checked against onnxruntime on the same hand-built ONNX file within 1e-2 x max(1, max|ref|)
(fp16); the plan's DMA count and cycles against the same region planned without holding."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import assert_fp16_close, run_vm
from tvm_npu.backend.plan import held_inputs

B, M, K, N = 8, 16, 32, 16


def _model(rng):
    """q [8, 16, 32] -> two 1x1 dense layers -> MatMul with the model input k [8, 32, 16] (batch by batch)."""
    inits = {
        "w1": (0.2 * rng.standard_normal((K, K))).astype(np.float32),
        "w2": (0.2 * rng.standard_normal((K, K))).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["q", "w1"], ["h1"]),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"]),
        helper.make_node("MatMul", ["h2", "k"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "held_inputs",
        [
            helper.make_tensor_value_info("q", TensorProto.FLOAT, [B, M, K]),
            helper.make_tensor_value_info("k", TensorProto.FLOAT, [B, K, N]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, M, N])],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _build(model):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert report.fallback_cost()["regions"] == 1, report.table()
    (region,) = report.regions.values()
    return ex, region


def test_a_matmuls_b_input_is_loaded_once_and_matches_onnxruntime(monkeypatch):
    rng = np.random.default_rng(7)
    model = _model(rng)
    ex, region = _build(model)
    assert "k" in [name.split(":")[0] for name in region["held_inputs"]], region["held_inputs"]
    q = rng.standard_normal((B, M, K)).astype(np.float32)
    k = rng.standard_normal((B, K, N)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"q": q, "k": k})[0]
    assert_fp16_close(run_vm(ex, q, k), want)
    monkeypatch.setattr(held_inputs, "worth_trying", lambda *_: False)
    _, streamed = _build(model)
    assert streamed["held_inputs"] == []
    assert region["estimated_cycles"] < streamed["estimated_cycles"], (region, streamed)
    print("cycles held", region["estimated_cycles"], "streamed", streamed["estimated_cycles"])
