"""The files the probes of issue 32 start from: a one-conv ONNX model, its sealed library and an input,
with onnxruntime's output for it (the independent reference)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import tvm_npu


def conv_onnx() -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> a 3x3 conv without bias -> y [1, 4, 6, 6], seeded weights."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def conv_files(folder, library: str = "lib.so"):
    """model.onnx, `library` (tvm_npu.export_library) and x.npy in `folder`: (executable, x, onnxruntime's y)."""
    model = conv_onnx()
    onnx.save(model, str(folder / "model.onnx"))
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    tvm_npu.export_library(ex, folder / library)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(folder / "x.npy", x)
    return ex, x, ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
