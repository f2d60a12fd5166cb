"""Small seeded models built in code (no downloads), used by the demo, tutorials and tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(seed: int = 0, image: int = 32, classes: int = 10) -> onnx.ModelProto:
    """A small image classifier in ONNX: four convolutions, a global average pool, Gemm, softmax.

    The pool and softmax are not NPU ops yet, so the model shows two NPU regions and CPU islands.
    """
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, shape):
        fan_in = int(np.prod(shape[1:]))
        value = rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(x, out, cin, cout, k, stride, act="Relu"):
        w, b = weight(f"{out}_w", (cout, cin, k, k)), f"{out}_b"
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), b))
        nodes.append(helper.make_node("Conv", [x, w, b], [f"{out}_c"], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        nodes.append(helper.make_node(act, [f"{out}_c"], [out]))
        return out

    x = conv("input", "c1", 3, 16, 3, 2)
    x = conv(x, "c2", 16, 32, 3, 2)
    x = conv(x, "c3", 32, 32, 3, 1)
    x = conv(x, "c4", 32, 64, 1, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    weight("fc_w", (classes, 64))
    inits.append(numpy_helper.from_array(np.zeros(classes, np.float32) + 0.01, "fc_b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1))
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, image, image])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
