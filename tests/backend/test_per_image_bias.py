"""One channel vector per image (issue 34): the time embedding a diffusers ResNet block adds to its conv,
`temb[:, :, None, None]`, is an [N, C, 1, 1] tensor at batch N. ELTWISE's per-channel b is one row
(docs/npu.md section 6) and a row tile never spans two images, so each tile's command reads b at its image's
row (plan/emit.broadcast_row): no new command. Before, every such add at N > 1 stayed on the CPU
(NPU_E_BROADCAST) and cut the UNet at batch 2 into 10 NPU regions.

Checked against onnxruntime on the same hand-built ONNX file within 1e-2 x max(1, max|ref|) (fp16), the int8
form against the numpy model of the documented integer arithmetic (tests/npu_ref) exactly; the broadcasts
the command does not take stay on the CPU with their reason."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import assert_fp16_close, run_vm
from npu_ref import QDQInterpreter

C_IN, C, D, H, W = 4, 8, 16, 5, 6


def _model(n, temb_input: bool, rng):
    """x [n, 4, 5, 6] -> 3x3 Conv (+ bias) -> Add e: e = Unsqueeze(MatMul(t, w), [2, 3]) computed from the
    input t [n, 16] (the time embedding's projection), or (`temb_input`) the model input e [n, 8, 1, 1]."""
    inits = {
        "w": (0.3 * rng.standard_normal((C, C_IN, 3, 3))).astype(np.float32),
        "bias": rng.standard_normal(C).astype(np.float32),
        "proj": (0.5 * rng.standard_normal((D, C))).astype(np.float32),
        "axes": np.array([2, 3], np.int64),
    }
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["y0"], pads=[1, 1, 1, 1])]
    if temb_input:
        second = helper.make_tensor_value_info("e", TensorProto.FLOAT, [n, C, 1, 1])
        del inits["proj"], inits["axes"]
    else:
        second = helper.make_tensor_value_info("t", TensorProto.FLOAT, [n, D])
        nodes += [helper.make_node("MatMul", ["t", "proj"], ["p"]), helper.make_node("Unsqueeze", ["p", "axes"], ["e"])]
    nodes.append(helper.make_node("Add", ["y0", "e"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "per_image_bias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, C_IN, H, W]), second],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, C, H, W])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("temb_input", [False, True], ids=["computed", "model_input"])
@pytest.mark.parametrize("n", [2, 3])
def test_per_image_channel_add_is_one_npu_region_and_matches_onnxruntime(n, temb_input):
    rng = np.random.default_rng(34 + n)
    model = _model(n, temb_input, rng)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert all(p.device == "npu" for p in report.placements), report.table()
    assert report.fallback_cost()["regions"] == 1, report.table()
    x = rng.standard_normal((n, C_IN, H, W)).astype(np.float32)
    # Images whose vectors differ by far more than the tolerance: reading image 0's vector for image 1 fails.
    second = (rng.standard_normal((n, C, 1, 1)) * 4 if temb_input else rng.standard_normal((n, D)) * 2).astype(
        np.float32
    )
    feeds = {"x": x, "e" if temb_input else "t": second}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert_fp16_close(run_vm(ex, x, second), ref)


def _refused(b_shape, const: bool):
    """x [2, 8, 4, 4] - b: the op placement of the subtract and the build's result on a seeded input."""
    rng = np.random.default_rng(7)
    shape = [2, C, 4, 4]
    value = rng.standard_normal(b_shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = [numpy_helper.from_array(value, "b")] if const else []
    if not const:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "b"], ["y"])],
        "refused",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    x = rng.standard_normal(shape).astype(np.float32)
    got = run_vm(ex, x) if const else run_vm(ex, x, value)
    np.testing.assert_allclose(got, x - value, rtol=1e-6)
    return [p for p in report.placements if p.op == "relax.subtract"]


@pytest.mark.parametrize(
    "b_shape,const",
    [
        ((2, 1, 4, 4), False),  # one map per image: varies along H and W, not one row of channels
        ((2, C, 1, 4), False),  # per image and per column
        ((2, C, 1, 1), True),  # a per-image constant: its one weight-slot row would serve every image
    ],
    ids=["per_image_map", "per_image_columns", "per_image_constant"],
)
def test_per_image_broadcasts_the_command_does_not_take_stay_on_the_cpu_with_reason(b_shape, const):
    (row,) = _refused(b_shape, const)
    assert (row.device, row.code) == ("cpu", "NPU_E_BROADCAST")
    assert f"{list(b_shape)} -> [2, {C}, 4, 4]" in row.reason


def _qdq_per_image_sub(n):
    """input -> Q -> DQ -> x - GlobalAveragePool(x) (each image's channel means, QDQ) -> Q -> DQ, scales
    picked by hand (onnxruntime's quantizer does not quantize Sub)."""
    inits, nodes = [], []

    def q_dq(src, scale, zp, tag):
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), f"s_{tag}"))
        inits.append(numpy_helper.from_array(np.array(zp, np.int8), f"z_{tag}"))
        nodes.append(helper.make_node("QuantizeLinear", [src, f"s_{tag}", f"z_{tag}"], [f"q_{tag}"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"q_{tag}", f"s_{tag}", f"z_{tag}"], [f"dq_{tag}"]))
        return f"dq_{tag}"

    x = q_dq("input", 0.03, 5, "in")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Sub", [x, q_dq("gap", 0.01, 0, "gap")], ["y"]))
    out = q_dq("y", 0.05, -7, "out")
    shape = [n, C, 6, 5]
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), shape


def test_int8_per_image_channel_tensor_matches_the_integer_model_exactly():
    """The int8 form follows: b's codes are one row per image like its fp16 values, one scale for all."""
    model, shape = _qdq_per_image_sub(2)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    npu = [p for p in report.placements if p.device == "npu"]
    assert "npu.qeltwise_subtract" in {p.composite for p in npu}, report.table()
    assert all(p.precision == "int8" for p in npu) and report.fallback_cost()["regions"] == 1, report.table()
    rng = np.random.default_rng(11)
    # Images of different means: image 1 read with image 0's vector would be off by many steps.
    x = (rng.standard_normal(shape) + np.array([-1.5, 1.5]).reshape(2, 1, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, x), QDQInterpreter(model).run(x))
