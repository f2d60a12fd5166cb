"""partition constraint_permute_view: a transformer block of a UNet (diffusers' Transformer2DModel with
1x1 conv projections) turns its NCHW map into tokens with Transpose [0, 2, 3, 1] + Reshape and back
with Reshape + Transpose [0, 3, 1, 2]. When a pixel's channels fill whole aligned rows (C x 2 bytes a
multiple of 128 in fp16) the map's rows and the tokens' rows are the same bytes: the permutes are views
and conv -> tokens -> LayerNorm -> dense -> map -> conv is one NPU region, within 1e-2 of onnxruntime.
Narrower pixels are copies (test_permute_restride.py); pixels below POOL's 16-byte pixel stride stay on the
CPU with their reason, still right."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_npu


def block_model(c: int, n: int = 1, h: int = 4, w: int = 6):
    rng = np.random.default_rng(0)
    inits = {
        "w_in": rng.standard_normal((c, c, 1, 1)) * 0.1, "w_out": rng.standard_normal((c, c, 1, 1)) * 0.1,
        "g": 1 + rng.standard_normal(c) * 0.1, "b": rng.standard_normal(c) * 0.1,
        "wd": rng.standard_normal((c, c)) * 0.1,
    }  # fmt: skip
    shapes = {"tok": np.array([n, h * w, c], np.int64), "map": np.array([n, h, w, c], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "w_in"], ["p"]),
        helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["t", "tok"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["ln"], axis=-1),
        helper.make_node("MatMul", ["ln", "wd"], ["d"]),
        helper.make_node("Add", ["d", "s"], ["r"]),
        helper.make_node("Reshape", ["r", "map"], ["m"]),
        helper.make_node("Transpose", ["m"], ["back"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["back", "w_out"], ["y"]),
    ]
    tensors = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()]
    tensors += [numpy_helper.from_array(v, k) for k, v in shapes.items()]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, h, w])], tensors,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _build_and_compare(model, shape):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), target="npu", report=report)
    got = tvm.relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
    return report


@pytest.mark.parametrize("c, n", [(64, 1), (128, 1), (64, 2)])
def test_map_to_tokens_and_back_are_views_in_one_region(c, n):
    report = _build_and_compare(block_model(c, n), (n, c, 4, 6))
    assert all(p.device == "npu" for p in report.placements), report.table()
    assert {p.composite for p in report.placements if p.op == "relax.permute_dims"} == {"npu.permute_view"}
    assert report.fallback_cost()["regions"] == 1


def test_too_narrow_pixels_keep_their_permutes_on_the_cpu_with_the_reason():
    report = _build_and_compare(block_model(4), (1, 4, 4, 6))
    permutes = [p for p in report.placements if p.op == "relax.permute_dims"]
    assert len(permutes) == 2 and all(p.device == "cpu" for p in permutes)
    assert all(p.code == "NPU_E_LAYOUT" and "8 bytes a pixel" in p.reason for p in permutes), report.table()
