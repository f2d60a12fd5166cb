"""Single-operator ONNX models at the edges of what an op's NPU form implements (issue 19): an attribute,
input or value range the NPU does not compute exactly must fall back to the CPU with a reason code, and
the build must give the numbers TVM's own llvm build (or onnxruntime) gives."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm


def onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    """A one-graph ONNX model; `inputs` and `outputs` are (name, shape[, elem_type]) tuples."""

    def info(spec):
        name, shape, *elem = spec
        return helper.make_tensor_value_info(name, elem[0] if elem else TensorProto.FLOAT, shape)

    graph = helper.make_graph(
        nodes,
        "g",
        [info(i) for i in inputs],
        [info(o) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in dict(inits).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_run(model, *xs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def build(model):
    mod = tvm_npu.from_onnx(model)
    report = tvm_npu.BuildReport()
    return mod, tvm_npu.build(mod, report=report), report


def placement(report, op):
    (row,) = [p for p in report.placements if p.op == op]
    return row


def test_dilated_max_pool_falls_back(rng):
    """POOL has no dilation operand (docs/npu.md section 6): a dilated MaxPool used to run undilated."""
    model = onnx_model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], dilations=[2, 2])],
        [("x", [1, 8, 16, 16])],
        [("y", [1, 8, 12, 12])],
    )
    mod, ex, report = build(model)
    row = placement(report, "relax.nn.max_pool2d")
    assert row.device == "cpu" and row.code == "NPU_E_POOL" and "dilation" in row.reason, report.table()
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    (want,) = onnxruntime_run(model, x)
    np.testing.assert_array_equal(run_vm(ex, x), want)
    np.testing.assert_array_equal(run_cpu(mod, x), want)


def test_onnx_clip_with_min_above_max_gives_max(rng):
    """ONNX Clip is min(max(x, min), max): every output is max when min > max. The importer's single
    R.clip (which TVM computes as lo there) used to turn it into min, on the NPU and on the CPU."""
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    model = onnx_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
        ],
        [("x", [1, 8, 8, 8])],
        [("y", [1, 8, 8, 8])],
        {"w": w, "lo": np.float32(1), "hi": np.float32(-1)},
    )
    mod, ex, report = build(model)
    assert placement(report, "relax.nn.conv2d").device == "npu", report.table()
    x = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
    (want,) = onnxruntime_run(model, x)
    assert (want == -1).all()
    np.testing.assert_array_equal(run_vm(ex, x), want)
    np.testing.assert_array_equal(run_cpu(mod, x), want)


def test_relax_clip_with_lo_above_hi_falls_back(rng):
    """R.clip(x, lo, hi) with lo > hi is lo in TVM; the NPU's clip (min(max(x, lo), hi)) gives hi: the
    clip stays on the CPU with NPU_E_ACTIVATION, the convolution runs on the NPU without it."""
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1))
            out = bb.emit_output(relax.op.clip(c, 1, -1))
        bb.emit_func_output(out)
    mod = bb.get()
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    assert placement(report, "relax.nn.conv2d").device == "npu", report.table()
    row = placement(report, "relax.clip")
    assert row.device == "cpu" and row.code == "NPU_E_ACTIVATION" and "1 > -1" in row.reason, report.table()
    xv = rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, xv), run_cpu(mod, xv))


def test_training_batch_norm_uses_the_batch_statistics(rng):
    """BatchNormalization with training_mode=1 normalizes by the batch's mean and variance; the
    decomposition for inference used to replace them with the running statistics."""
    c = 8
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
    stats = {
        "s": rng.standard_normal(c),
        "b": rng.standard_normal(c),
        "m": rng.standard_normal(c),
        "v": rng.random(c) + 0.5,
    }
    model = onnx_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1),
        ],
        [("x", [2, c, 8, 8])],
        [("y", [2, c, 8, 8]), ("rm", [c]), ("rv", [c])],
        dict({k: v.astype(np.float32) for k, v in stats.items()}, w=w),
        opset=15,
    )
    mod, ex, report = build(model)
    assert placement(report, "relax.nn.conv2d").device == "npu", report.table()
    x = rng.standard_normal((2, c, 8, 8)).astype(np.float32)
    got, want = run_vm(ex, x), run_cpu(mod, x)
    for g, w_ in zip(got, want):  # the fp16 convolution, normalized: within a few fp16 ulps
        np.testing.assert_allclose(g, w_, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[0], onnxruntime_run(model, x)[0], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "x_shape, c_shape, axis", [((4, 16), (3, 16), 0), ((1, 8, 4, 4), (1, 8, 4, 4), 1)], ids=["rows", "channels"]
)
def test_concat_with_a_constant_falls_back(rng, x_shape, c_shape, axis):
    """A Concat of a tensor and an initializer used to reach lowering, which has no tensor for a
    constant (AttributeError): it stays on the CPU with NPU_E_CONCAT."""
    out_shape = list(x_shape)
    out_shape[axis] += c_shape[axis]
    model = onnx_model(
        [helper.make_node("Concat", ["x", "c"], ["y"], axis=axis)],
        [("x", list(x_shape))],
        [("y", out_shape)],
        {"c": rng.standard_normal(c_shape).astype(np.float32)},
    )
    mod, ex, report = build(model)
    row = placement(report, "relax.concat")
    assert row.device == "cpu" and row.code == "NPU_E_CONCAT" and "constant" in row.reason, report.table()
    x = rng.standard_normal(x_shape).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, x), onnxruntime_run(model, x)[0])


def test_shape_computed_at_run_time_partitions(rng):
    """Expand to a shape given at run time: TVM's importer binds the shape with a match_cast, which TVM
    0.27's MergeCompositeFunctions refuses (TypeError); the NPU ops around it still run on the NPU."""
    w = rng.standard_normal((16, 16)).astype(np.float32)
    model = onnx_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Expand", ["r", "s"], ["y"]),
        ],
        [("x", [4, 16]), ("s", [3], TensorProto.INT64)],
        [("y", ["a", "b", "c"])],
        {"w": w},
    )
    mod, ex, report = build(model)
    assert placement(report, "relax.matmul").device == "npu", report.table()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    s = np.array([2, 4, 16], np.int64)
    got, want = run_vm(ex, x, s), onnxruntime_run(model, x, s)[0]
    assert got.shape == want.shape == (2, 4, 16)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)  # the dense in fp16
    np.testing.assert_allclose(got, run_cpu(mod, x, s), rtol=1e-2, atol=1e-2)


def test_reshape_allowzero_partitions(rng):
    """Reshape with allowzero=1 and a 0 in its shape: the importer binds that shape with a match_cast."""
    model = onnx_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"], allowzero=1)],
        [("x", [2, 0, 3])],
        [("y", [0, 6])],
        {"shape": np.array([0, 6], np.int64)},
        opset=14,
    )
    mod, ex, report = build(model)
    x = np.zeros((2, 0, 3), np.float32)
    got, want = run_vm(ex, x), onnxruntime_run(model, x)[0]
    assert got.shape == want.shape == (0, 6)


def integer_build(model, op, *xs):
    """Build `model`, check `op` placed on the CPU, and compare with onnxruntime bit for bit."""
    mod, ex, report = build(model)
    assert placement(report, op).device == "cpu", report.table()
    got, want = run_vm(ex, *xs), onnxruntime_run(model, *xs)[0]
    assert got.dtype == want.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_runs_on_the_cpu(rng):
    """MatMulInteger used to be refused at import; TVM imports it as an int32 matmul of the operands
    minus their zero points (b's per column)."""
    b = rng.integers(0, 256, (16, 8)).astype(np.uint8)
    model = onnx_model(
        [helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["y"])],
        [("a", [4, 16], TensorProto.UINT8)],
        [("y", [4, 8], TensorProto.INT32)],
        {"b": b, "a_zp": np.uint8(128), "b_zp": rng.integers(0, 256, 8).astype(np.uint8)},
    )
    integer_build(model, "relax.matmul", rng.integers(0, 256, (4, 16)).astype(np.uint8))


@pytest.mark.parametrize(
    "attrs, out",
    [(dict(pads=[1, 1, 1, 1], strides=[2, 1]), [1, 4, 4, 7]), (dict(auto_pad="SAME_UPPER"), [1, 4, 7, 7])],
    ids=["pads_strides", "same_upper"],
)
def test_conv_integer_runs_on_the_cpu(rng, attrs, out):
    """ConvInteger (no TVM converter) imports as an int32 conv2d of the operands minus their zero points;
    the padding holds x's zero point, as ONNX defines it."""
    w = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    model = onnx_model(
        [helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], **attrs)],
        [("x", [1, 3, 7, 7], TensorProto.UINT8)],
        [("y", out, TensorProto.INT32)],
        {"w": w, "x_zp": np.uint8(100), "w_zp": np.uint8(131)},
        opset=10,
    )
    integer_build(model, "relax.nn.conv2d", rng.integers(0, 256, (1, 3, 7, 7)).astype(np.uint8))
