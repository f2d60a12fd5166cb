"""rewrite/tokens_view.py (a map's view as tokens and back as the NPU's pixels-as-rows permute and a
reshape) and rewrite/identity_casts.py: TVM's llvm build of the module before and after is bit-identical;
a near miss is left alone; on the NPU the block is one region within bounds of onnxruntime."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu.rewrite import identity_casts, tokens_view

N, C, H, W = 1, 64, 4, 8
RNG = np.random.default_rng(5)
X = RNG.standard_normal((N, C, H, W)).astype(np.float32)


def model(flat=(N, C, H * W), back=(N, C, H, W), cast=False):
    """x -> reshape to `flat` -> transpose [0, 2, 1] -> matmul [-> cast to float] -> transpose -> reshape
    to `back` -> + x."""
    nodes = [
        helper.make_node("Reshape", ["x", "s0"], ["f"]),
        helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "proj"], ["p0"]),
        helper.make_node("Cast", ["p0"], ["p"], to=TensorProto.FLOAT)
        if cast
        else helper.make_node("Relu", ["p0"], ["p"]),
        helper.make_node("Transpose", ["p"], ["u"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["u", "s1"], ["b"]),
        helper.make_node("Add", ["b", "x"], ["y"]),
    ]
    inits = {
        "s0": np.array(flat, np.int64),
        "s1": np.array(back, np.int64),
        "proj": (np.random.default_rng(1).standard_normal((flat[1],) * 2) / 8).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (N, C, H, W))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (N, C, H, W))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _permutes(mod) -> list:
    return [
        [int(a) for a in b.value.attrs.axes]
        for b in mod["main"].body.blocks[0].bindings
        if "permute_dims" in str(getattr(b.value, "op", ""))
    ]


def test_to_tokens_and_back_is_the_pixels_as_rows_view_bit_identical():
    before = tvm_npu.from_onnx(model())
    after = tokens_view(before)
    assert _permutes(before) == [[0, 2, 1], [0, 2, 1]]
    assert _permutes(after) == [[0, 2, 3, 1], [0, 3, 1, 2]]
    assert count_ops(after, "relax.reshape") == 2
    assert np.array_equal(run_cpu(after, X), run_cpu(before, X))  # only the order of two exact moves changed
    ref = ort.InferenceSession(model().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(model()), report=report), X)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
    assert report.fallback_cost()["regions"] == 1 and report.npu_ops == len(report.placements), report.table()


def test_a_reshape_that_is_not_a_maps_pixels_is_left_alone():
    """[N, C, H, W] -> [N, C * H, W]: the rows are not the map's pixels; the transpose back then reshapes
    to [N, C, H, W] from [N, C * H, W], not from [N, C, H * W]."""
    before = tvm_npu.from_onnx(model(flat=(N, C * H, W)))
    assert tokens_view(before) is before


def test_a_cast_to_the_same_dtype_is_dropped_bit_identical():
    from tvm.relax.frontend.onnx import from_onnx as tvm_from_onnx

    # TVM's importer itself: tvm_npu.from_onnx already bypasses same-type Casts (frontend/static_fold.py)
    before = tvm_from_onnx(model(cast=True), keep_params_in_input=False)
    assert count_ops(before, "relax.astype") == 1
    after = identity_casts(before)
    assert count_ops(after, "relax.astype") == 0
    assert np.array_equal(run_cpu(after, X), run_cpu(before, X))
