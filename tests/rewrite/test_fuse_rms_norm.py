"""rewrite/fuse_rms_norm.py: torch's export of Hugging Face Llama's RMSNorm (Pow, ReduceMean, Add, Sqrt,
Div or Reciprocal, Mul, Mul) becomes one relax.nn.rms_norm, only when the function is exactly that one;
the fused model runs on the NPU within 1e-2 of onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from test_fuse_activations import SHAPE, _model
from test_rewrite import count_ops

import tvm_npu
from conftest import run_vm
from tvm_npu import rewrite

D = SHAPE[-1]


def rms_norm_model(square="pow", inverse="div", gamma_first=True, eps=1e-6, axis=-1, gamma_shape=(D,), extra_use=False):
    """gamma * (x * 1 / sqrt(mean(x^2, axis, keepdims) + eps)), as torch exports LlamaRMSNorm."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"])
        if square == "pow"
        else helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["v"]),
        helper.make_node("Sqrt", ["v"], ["r"]),
        helper.make_node("Div", ["one", "r"], ["inv"])
        if inverse == "div"
        else helper.make_node("Reciprocal", ["r"], ["inv"]),
        helper.make_node("Mul", ["x", "inv"], ["n"]),
        helper.make_node("Mul", ["gamma", "n"] if gamma_first else ["n", "gamma"], ["g" if extra_use else "y"]),
    ]
    if extra_use:  # the normalized x also feeds something else: the chain must stay
        nodes.append(helper.make_node("Add", ["g", "n"], ["y"]))
    gamma = 1.0 + 0.1 * np.random.default_rng(0).standard_normal(gamma_shape)
    inits = {"two": np.float32(2.0), "eps": np.float32(eps), "one": np.float32(1.0), "gamma": gamma}
    return _model(nodes, inits)


@pytest.mark.parametrize(
    "square, inverse, gamma_first", [("pow", "div", True), ("mul", "reciprocal", False), ("pow", "reciprocal", True)]
)
def test_written_out_rms_norm_becomes_one_rms_norm_on_the_npu(square, inverse, gamma_first):
    model = rms_norm_model(square, inverse, gamma_first)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.rms_norm") == 1, mod
    for op in ("relax.mean", "relax.sqrt", "relax.divide", "relax.multiply", "relax.power", "relax.add"):
        assert count_ops(mod, op) == 0, op
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert {(p.device, p.composite) for p in report.placements} == {("npu", "npu.rms_norm")}, report.table()
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32) * 4
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_vm(ex, x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize(
    "change",
    [
        dict(axis=0),  # the mean over another axis: not a row's RMS
        dict(eps=-1e-6),  # a negative eps: not RMSNorm's
        dict(gamma_shape=(SHAPE[0], D)),  # a gamma per element, not per column
        dict(extra_use=True),  # an intermediate read elsewhere
    ],
)
def test_another_function_is_left_alone(change):
    mod = rewrite.run(tvm_npu.from_onnx(rms_norm_model(**change)))
    assert count_ops(mod, "relax.nn.rms_norm") == 0 and count_ops(mod, "relax.mean") == 1
