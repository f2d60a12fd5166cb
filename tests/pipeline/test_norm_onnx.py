"""NORM from ONNX: LayerNormalization (opset 17) and RMSNormalization (opset 23) models imported by
tvm_npu.from_onnx, built for the NPU and compared with onnxruntime (fp16 datapath: within
1e-2 * max(1, max|ref|)); a GPT-2-like fragment (LayerNorm -> MatMul + bias) with both ops in one NPU
region; a LayerNormalization whose Mean output is used is refused at import, with a code."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import assert_fp16_close, run_vm


def _model(nodes, inits, x_shape, y_shape, opset, outputs=("y",)):
    graph = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, list(y_shape[:-1]) + [1] if o != "y" else list(y_shape))
            for o in outputs
        ],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _build(model):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(tvm_npu.from_onnx(model), report=report), report


@pytest.mark.parametrize("shape,with_bias", [((2, 5, 64), True), ((3, 768), True), ((4, 33), False)])
def test_onnx_layer_normalization_runs_on_npu_close_to_onnxruntime(rng, shape, with_bias):
    e = shape[-1]
    inits = {"g": rng.standard_normal(e).astype(np.float32)}
    if with_bias:
        inits["b"] = rng.standard_normal(e).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", *inits], ["y"], axis=-1, epsilon=1e-5)
    model = _model([node], inits, shape, shape, 17)
    ex, report = _build(model)
    assert [(p.device, p.composite) for p in report.placements] == [("npu", "npu.layer_norm")], report.table()
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    assert_fp16_close(run_vm(ex, x), _ort(model, x))


@pytest.mark.parametrize("shape", [(2, 5, 64), (1, 1536)])
def test_onnx_rms_normalization_runs_on_npu_close_to_onnxruntime(rng, shape):
    inits = {"g": rng.standard_normal(shape[-1]).astype(np.float32)}
    node = helper.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6)
    model = _model([node], inits, shape, shape, 23)
    ex, report = _build(model)
    assert [(p.device, p.composite) for p in report.placements] == [("npu", "npu.rms_norm")], report.table()
    x = rng.standard_normal(shape).astype(np.float32)
    assert_fp16_close(run_vm(ex, x), _ort(model, x))


def test_onnx_layer_normalization_over_two_axes_stays_on_cpu(rng):
    shape = (2, 4, 8)
    inits = {"g": rng.standard_normal((4, 8)).astype(np.float32), "b": rng.standard_normal((4, 8)).astype(np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=1, epsilon=1e-5)
    model = _model([node], inits, shape, shape, 17)
    ex, report = _build(model)
    (p,) = report.placements
    assert p.device == "cpu" and p.code == "NPU_E_AXIS", report.table()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), _ort(model, x), rtol=1e-5, atol=1e-5)


def test_onnx_layer_normalization_mean_output_is_refused():
    """TVM's importer gives the Mean and InvStdDev outputs as a constant 0: a model reading them would get
    wrong values, so the import stops with a code instead."""
    inits = {"g": np.ones(8, np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], axis=-1)
    model = _model([node], inits, (2, 8), (2, 8), 17, outputs=("y", "mean"))
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.from_onnx(model)
    assert info.value.code == "ERR_OP_NOT_SUPPORTED" and "output 1 (mean)" in str(info.value), str(info.value)


def test_gpt2_like_fragment_layer_norm_then_matmul_on_npu(rng):
    """ln_1 -> the fused QKV projection of a GPT-2 block (d 64, 3 * 64 outputs), 8 tokens: LayerNorm and
    MatMul + bias both on the NPU, in one region, within the fp16 bound of onnxruntime."""
    d, t = 64, 8
    inits = {
        "g": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        "b": (0.1 * rng.standard_normal(d)).astype(np.float32),
        "w": (rng.standard_normal((d, 3 * d)) / np.sqrt(d)).astype(np.float32),
        "bias": (0.1 * rng.standard_normal(3 * d)).astype(np.float32),
    }
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["h"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["h", "w"], ["qkv"]),
        helper.make_node("Add", ["qkv", "bias"], ["y"]),
    ]
    model = _model(nodes, inits, (1, t, d), (1, t, 3 * d), 17)
    ex, report = _build(model)
    placed = {p.op: (p.device, p.region) for p in report.placements}
    assert placed["relax.nn.layer_norm"][0] == "npu" and placed["relax.matmul"][0] == "npu", report.table()
    assert len({region for _, region in placed.values()}) == 1, report.table()
    x = rng.standard_normal((1, t, d)).astype(np.float32)
    assert_fp16_close(run_vm(ex, x), _ort(model, x))
