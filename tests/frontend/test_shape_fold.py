"""tvm_npu.from_onnx folds shape arithmetic on need (frontend/shape_fold.py): a model whose every input
is static but whose shapes are computed in the graph (a Reshape of Shape -> Gather -> Concat, which
TVM's importer refuses; a Slice of computed bounds, torch's chunk, which it imports of unknown shape)
builds for the NPU and matches onnxruntime."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from tvm_npu.frontend import shape_fold

ort = pytest.importorskip("onnxruntime")


def _model(batch):
    """x [batch, 3, 8] -> Reshape(x, [Shape(x)[0], -1]) and the two halves of x's last axis (Slice with
    bounds Shape(x)[2] / 2 computed in the graph), multiplied."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 12])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "two"], ["w"], axis=0),
        helper.make_node("Div", ["w", "two"], ["half"]),
        helper.make_node("Slice", ["x", "zero", "half", "two"], ["lo"]),
        helper.make_node("Slice", ["x", "half", "w", "two"], ["hi"]),
        helper.make_node("Mul", ["lo", "hi"], ["p"]),
        helper.make_node("Concat", ["n", "minus"], ["ns"], axis=0),
        helper.make_node("Reshape", ["p", "ns"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("zero", 0), ("two", 2), ("minus", -1))]
    g = helper.make_graph(nodes, "shape_arith", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_static_shape_arithmetic_is_folded_and_matches_onnxruntime():
    model = _model(2)
    mod = tvm_npu.from_onnx(model)
    assert shape_fold.unknown_shapes(mod) == 0
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    ex = tvm_npu.build(mod, target="npu")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert model.graph.node[0].op_type == "Shape"  # the caller's model is not changed


def test_symbolic_inputs_are_not_folded():
    """A symbolic batch: nothing to fold with, TVM's importer's refusal stays a coded error."""
    with pytest.raises(tvm_npu.NPUError, match="ERR_OP_NOT_SUPPORTED.*fold shape"):
        tvm_npu.from_onnx(_model("N"))


def test_inputs_static():
    assert shape_fold.inputs_static(_model(2)) and not shape_fold.inputs_static(_model("N"))


def test_shape_dict_makes_symbolic_inputs_static():
    """shape_dict= fixes the symbolic batch as if the file declared it: the arithmetic then folds."""
    model = _model("N")
    mod = tvm_npu.from_onnx(model, shape_dict={"x": [2, 3, 8]})
    assert shape_fold.unknown_shapes(mod) == 0
    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    ex = tvm_npu.build(mod, target="npu")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert shape_fold.with_shapes(model, {"x": [2, 3]}) is None  # another rank: TVM's importer reads it as given
    assert shape_fold.with_shapes(model, {"y": [2, 3, 8]}) is None
