"""rewrite/split_dense_columns.py on diffusers' GEGLU: the projection's two halves taken by two Slices
of the last axis (torch's `chunk(2, dim=-1)` as exported) ran on the CPU in every transformer block;
split into the dense layer's columns, the feed-forward is one NPU region within 1e-2 of onnxruntime.
Slices that do not tile the columns (overlapping, a gap) are left alone."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from tvm_npu import rewrite

S, C, F = 16, 32, 64


def geglu_model(halves=((0, F), (F, 2 * F))):
    """proj (MatMul + Add, bias first as diffusers exports it) -> a = Slice, gate = Slice -> a * gelu(gate)
    (erf, written out) -> out projection."""
    rng = np.random.default_rng(0)
    inits = {
        "w1": rng.standard_normal((C, 2 * F)) * 0.2, "b1": rng.standard_normal(2 * F) * 0.1,
        "w2": rng.standard_normal((halves[0][1] - halves[0][0], C)) * 0.2,
        "sqrt2": 1.4142135381698608, "one": 1.0, "half": 0.5,
        "ax": np.array([-1], np.int64),
    }  # fmt: skip
    for i, (a, b) in enumerate(halves):
        inits[f"s{i}"], inits[f"e{i}"] = np.array([a], np.int64), np.array([b], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"]),
        helper.make_node("Add", ["b1", "m"], ["p"]),
        helper.make_node("Slice", ["p", "s0", "e0", "ax"], ["a"]),
        helper.make_node("Slice", ["p", "s1", "e1", "ax"], ["g"]),
        helper.make_node("Div", ["g", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["er"]),
        helper.make_node("Add", ["er", "one"], ["t"]),
        helper.make_node("Mul", ["g", "t"], ["gt"]),
        helper.make_node("Mul", ["gt", "half"], ["gelu"]),
        helper.make_node("Mul", ["a", "gelu"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y"]),
    ]
    tensors = [numpy_helper.from_array(v if isinstance(v, np.ndarray) and v.dtype == np.int64
                                       else np.asarray(v, np.float32), k) for k, v in inits.items()]  # fmt: skip
    graph = helper.make_graph(
        nodes, "geglu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, C])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, C])], tensors,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _x():
    return np.random.default_rng(1).standard_normal((1, S, C)).astype(np.float32)


def _run(ex):
    return tvm.relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(_x())).numpy()


def test_geglu_halves_become_two_dense_layers_in_one_npu_region():
    model = geglu_model()
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.strided_slice") == 2
    assert count_ops(rewrite.run(mod), "relax.strided_slice") == 0
    report = tvm_npu.BuildReport()
    got = _run(tvm_npu.build(mod, target="npu", report=report))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": _x()})[0]
    assert np.abs(got - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
    assert all(p.device == "npu" for p in report.placements), report.table()
    assert report.fallback_cost()["regions"] == 1


def test_the_split_matches_tvms_cpu_build_of_the_slices():
    mod = tvm_npu.from_onnx(geglu_model())
    before = _run(tvm.compile(mod, target="llvm"))
    after = _run(tvm.compile(rewrite.split_dense_columns(mod), target="llvm"))
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)  # the same sums, split per column block


@pytest.mark.parametrize("halves", [((0, F), (F - 8, 2 * F - 8)), ((0, F - 8), (F, 2 * F - 8))])  # overlap, gaps
def test_slices_that_do_not_tile_the_columns_are_left_alone(halves):
    mod = tvm_npu.from_onnx(geglu_model(halves))
    assert count_ops(rewrite.split_dense_columns(mod), "relax.strided_slice") == 2
