"""Single-operator ONNX models at the edges of what an op's NPU form implements (issue 19): an attribute,
input or value range the NPU does not compute exactly must fall back to the CPU with a reason code, and
the build must give the numbers TVM's own llvm build (or onnxruntime) gives."""

import numpy as np
import onnx
import onnxruntime as ort
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import run_cpu, run_vm


def onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    """A one-graph ONNX model; `inputs` and `outputs` are (name, shape[, elem_type]) tuples."""
    def info(spec):
        name, shape, *elem = spec
        return helper.make_tensor_value_info(name, elem[0] if elem else TensorProto.FLOAT, shape)
    graph = helper.make_graph(nodes, "g", [info(i) for i in inputs], [info(o) for o in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
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
    model = onnx_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], dilations=[2, 2])],
                       [("x", [1, 8, 16, 16])], [("y", [1, 8, 12, 12])])
    mod, ex, report = build(model)
    row = placement(report, "relax.nn.max_pool2d")
    assert row.device == "cpu" and row.code == "NPU_E_POOL" and "dilation" in row.reason, report.table()
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    (want,) = onnxruntime_run(model, x)
    np.testing.assert_array_equal(run_vm(ex, x), want)
    np.testing.assert_array_equal(run_cpu(mod, x), want)
