"""tvm_npu.from_onnx folds values computed from static shapes alone (frontend/static_fold.py, issue 34):
an attention scale Shape -> Gather -> Cast -> Sqrt -> Div and a Range / Less / Where causal mask become
initializers of exactly onnxruntime's values, while a node reading a real input stays a node."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from tvm_npu.frontend import static_fold

ort = pytest.importorskip("onnxruntime")

H, S = 4, 8


def _model():
    """softmax(x * (1 / sqrt(Shape(x)[3])) + causal_mask(S)) + sqrt(|ReduceMax(x)|), the mask built from
    Range(0, Shape(x)[3]) with Less / Where, the last term depending on the input x."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, H, S, S])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, H, S, S])
    c = lambda name, v, dt=np.int64: numpy_helper.from_array(np.array(v, dt), name)  # noqa: E731
    inits = [
        c("three", [3]), c("zero", 0), c("one", 1), c("one_f", 1.0, np.float32), c("zero_f", 0.0, np.float32),
        c("neg", np.finfo(np.float32).min, np.float32), c("ax0", [0]), c("ax1", [1]), c("ax01", [0, 1]),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "three"], ["d"], axis=0),
        helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["df"], ["sq"]),
        helper.make_node("Div", ["one_f", "sq"], ["scale"]),
        helper.make_node("Mul", ["x", "scale"], ["xs"]),
        helper.make_node("Squeeze", ["d", "ax0"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "ax1"], ["rows"]),
        helper.make_node("Unsqueeze", ["r", "ax0"], ["cols"]),
        helper.make_node("Less", ["rows", "cols"], ["future"]),
        helper.make_node("Where", ["future", "neg", "zero_f"], ["m2"]),
        helper.make_node("Unsqueeze", ["m2", "ax01"], ["mask"]),
        helper.make_node("Add", ["xs", "mask"], ["z"]),
        helper.make_node("Softmax", ["z"], ["p"], axis=-1),
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=1),
        helper.make_node("Abs", ["mx"], ["ab"]),
        helper.make_node("Sqrt", ["ab"], ["run_time"]),
        helper.make_node("Add", ["p", "run_time"], ["y"]),
    ]
    g = helper.make_graph(nodes, "static_fold", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_computed_scale_and_mask_fold_to_exact_constants():
    folded = static_fold.folded(_model())
    ops = [n.op_type for n in folded.graph.node]
    assert "Range" not in ops and "Less" not in ops and "Where" not in ops and "Shape" not in ops
    assert ops.count("Sqrt") == 1  # the input-dependent sqrt(|ReduceMax(x)|) is not folded
    assert "ReduceMax" in ops
    inits = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert inits["scale"].tobytes() == (np.float32(1) / np.sqrt(np.float32(S))).tobytes()
    future = np.triu(np.ones((S, S), bool), 1)
    want_mask = np.where(future, np.finfo(np.float32).min, np.float32(0))[None, None].astype(np.float32)
    np.testing.assert_array_equal(inits["mask"], want_mask)


def test_folded_model_builds_for_the_npu_and_matches_onnxruntime():
    model = _model()
    x = np.random.default_rng(0).standard_normal((1, H, S, S)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = tvm_npu.from_onnx(model)
    text = mod["main"].script(show_meta=False)
    assert "R.sqrt" in text and "R.less" not in text and "R.where" not in text and "shape_of" not in text
    ex = tvm_npu.build(mod, target="npu")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    err = float(np.abs(got - want).max())
    assert err <= 1e-2 * max(1.0, float(np.abs(want).max())), err


def test_large_results_stay_ops():
    """An Expand of a constant to more than static_fold's cap stays an Expand of the small constant."""
    big = [1, 64, 64, 32]  # 131072 elements > 65536
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, big)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, big)
    inits = [
        numpy_helper.from_array(np.array([2.0], np.float32), "c"),
        numpy_helper.from_array(np.array(big, np.int64), "shape"),
    ]
    nodes = [helper.make_node("Expand", ["c", "shape"], ["e"]), helper.make_node("Mul", ["x", "e"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "big", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    ops = [n.op_type for n in static_fold.folded(model).graph.node]
    assert ops == ["Expand", "Mul"]
