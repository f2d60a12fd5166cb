"""rewrite/fuse_silu.py and rewrite/fuse_gelu_tanh.py: torch's exports of SiLU (Sigmoid then Mul) and of
GPT-2's tanh GELU (eight ops) become one relax.nn.silu / relax.nn.gelu_tanh, only when the function is
exactly that one; the fused model runs on the NPU within 1e-2 of onnxruntime."""

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from conftest import run_vm
from tvm_npu import rewrite

SHAPE = (4, 40)


def _model(nodes, inits, opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def silu_model(order="x_first", extra_use=False):
    mul_in = ["x", "s"] if order == "x_first" else ["s", "x"]
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", mul_in, ["m" if extra_use else "y"])]
    if extra_use:  # the sigmoid also feeds something else: it must stay
        nodes.append(helper.make_node("Add", ["m", "s"], ["y"]))
    return _model(nodes, {})


def gelu_tanh_model(cube="pow", half="on_x", consts=None):
    """HF GPT-2's NewGELUActivation as torch exports it: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    c = {"half": 0.5, "one": 1.0, "three": 3.0, "cubic": 0.044715, "k": math.sqrt(2 / math.pi), **(consts or {})}
    nodes = (
        [helper.make_node("Pow", ["x", "three"], ["x3"])]
        if cube == "pow"
        else [helper.make_node("Mul", ["x", "x"], ["x2"]), helper.make_node("Mul", ["x2", "x"], ["x3"])]
    )
    nodes += [
        helper.make_node("Mul", ["cubic", "x3"], ["w"]),
        helper.make_node("Add", ["x", "w"], ["inner"]),
        helper.make_node("Mul", ["k", "inner"], ["z"]),
        helper.make_node("Tanh", ["z"], ["t"]),
        helper.make_node("Add", ["one", "t"], ["t1"]),
    ]
    if half == "on_x":  # (0.5 * x) * (1 + t)
        nodes += [helper.make_node("Mul", ["half", "x"], ["hx"]), helper.make_node("Mul", ["hx", "t1"], ["y"])]
    else:  # (x * (1 + t)) * 0.5
        nodes += [helper.make_node("Mul", ["t1", "x"], ["xt"]), helper.make_node("Mul", ["xt", "half"], ["y"])]
    inits = {k: np.float32(v) for k, v in c.items() if k != "three" or cube == "pow"}
    return _model(nodes, inits)


@pytest.mark.parametrize("order", ["x_first", "sigmoid_first"])
def test_x_times_sigmoid_x_becomes_one_silu_on_the_npu(order):
    model = silu_model(order)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.silu") == 1 and count_ops(mod, "relax.sigmoid") == 0
    assert count_ops(mod, "relax.multiply") == 0
    _runs_on_npu_like_onnxruntime(model, {"npu.silu"})


def test_a_sigmoid_with_another_use_is_not_fused():
    mod = rewrite.run(tvm_npu.from_onnx(silu_model(extra_use=True)))
    assert count_ops(mod, "relax.nn.silu") == 0 and count_ops(mod, "relax.sigmoid") == 1


@pytest.mark.parametrize("cube,half", [("pow", "on_x"), ("mul", "last")])
def test_decomposed_tanh_gelu_becomes_one_gelu_tanh_on_the_npu(cube, half):
    model = gelu_tanh_model(cube, half)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.gelu_tanh") == 1, mod
    for op in ("relax.tanh", "relax.multiply", "relax.add", "relax.power"):
        assert count_ops(mod, op) == 0, op
    _runs_on_npu_like_onnxruntime(model, {"npu.gelu_tanh"})


@pytest.mark.parametrize("consts", [{"cubic": 0.04471}, {"k": 0.7978}, {"half": 0.25}, {"one": 2.0}, {"three": 2.0}])
def test_a_decomposed_gelu_with_other_constants_is_left_alone(consts):
    """Not the tanh GELU (one constant differs from it as float32): fusing would change the values."""
    mod = rewrite.run(tvm_npu.from_onnx(gelu_tanh_model(consts=consts)))
    assert count_ops(mod, "relax.nn.gelu_tanh") == 0 and count_ops(mod, "relax.tanh") == 1


def _runs_on_npu_like_onnxruntime(model, composites):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert {(p.device, p.composite) for p in report.placements} == {("npu", c) for c in composites}, report.table()
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32) * 4
    x.reshape(-1)[:5] = [-9.0, -4.0, 0.0, 4.0, 9.0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_vm(ex, x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
