"""Seeded models built in code (no downloads), used by the demo, tutorials, benchmarks and tests.

Real weights would come from a trained checkpoint (e.g. torchvision's MobileNetV2 exported to ONNX);
these have the same structure and shapes with seeded He-initialised weights.
"""

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
        nodes.append(
            helper.make_node(
                "Conv", [x, w, b], [f"{out}_c"], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4
            )
        )
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
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, image, image])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class GraphBuilder:
    """A few lines per layer; seeded He-initialised weights."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def _name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value, prefix="c"):
        name = self._name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, op, inputs, **attrs):
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k=3, stride=1, group=1, act="Relu", gain=1.0):
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in) * gain
        b = self.rng.standard_normal(cout) * 0.1
        y = self.node(
            "Conv",
            [x, self.const(w, "w"), self.const(b, "b")],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[k // 2] * 4,
            group=group,
        )
        if act == "Relu":
            y = self.node("Relu", [y])
        elif act == "Relu6":
            y = self.node("Clip", [y, self.const(0.0), self.const(6.0)])
        return y

    def gemm(self, x, k, n):
        w = self.rng.standard_normal((n, k)) * np.sqrt(1.0 / k)
        return self.node("Gemm", [x, self.const(w, "w"), self.const(self.rng.standard_normal(n) * 0.1, "b")], transB=1)

    def model(self, x_shape, out, out_shape) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
            self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def op_zoo(seed=0, size=17) -> onnx.ModelProto:
    """conv, depthwise, pointwise, residual add, average pool, relu, clip, global pool, gemm."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 16, 3, stride=2)  # conv + relu
    d = g.conv(x, 16, 16, 3, group=16, act="Relu6")  # depthwise + clip (relu6)
    p = g.conv(d, 16, 16, 1, act=None)  # pointwise, no activation
    r = g.node("Add", [x, p])  # residual add
    a = g.node("AveragePool", [r], kernel_shape=[3, 3], strides=[2, 2])
    c = g.conv(a, 16, 24, 3, act="Relu")
    gp = g.node("GlobalAveragePool", [c])
    f = g.node("Flatten", [gp])
    y = g.gemm(f, 24, 10)
    return g.model([1, 3, size, size], y, [1, 10])


def mobilenet_v2_shaped(seed=0, size=64, width=0.5, classes=100) -> onnx.ModelProto:
    """MobileNetV2's structure (inverted residuals, relu6, depthwise 3x3) at a smaller width/resolution."""
    g = GraphBuilder(seed)

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)

    x = g.conv("input", 3, ch(32), 3, stride=2, act="Relu6")
    cin = ch(32)
    settings = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    for t, c, n, s in settings:
        cout = ch(c)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = g.conv(x, cin, hidden, 1, act="Relu6") if t != 1 else x
            y = g.conv(y, hidden, hidden, 3, stride=stride, group=hidden, act="Relu6")
            # Trained networks keep residual branches small (batch-norm scales well below 1); plain He
            # initialisation without them makes a 1-LSB difference anywhere grow layer after layer.
            y = g.conv(y, hidden, cout, 1, act=None, gain=0.3 if stride == 1 and cin == cout else 1.0)
            x = g.node("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    x = g.conv(x, cin, ch(1280), 1, act="Relu6")
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x])
    y = g.gemm(x, ch(1280), classes)
    return g.model([1, 3, size, size], y, [1, classes])


def lstm(
    T=5, B=2, I=3, H=4, direction="forward", layout=0, bias=True, init=True, seed=0, extra_inputs=(), **attrs
) -> onnx.ModelProto:
    """An ONNX LSTM node as a whole model (opset 14): X [T, B, I] (layout 0) or [B, T, I] (layout 1), the
    initial h0 / c0 as inputs when `init`, outputs Y, Y_h, Y_c; seeded weights, `bias` adds B.
    `extra_inputs` are (input position, initializer) pairs (e.g. sequence_lens at 4); `attrs` go on the
    node."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    inits = [
        numpy_helper.from_array((rng.standard_normal((D, 4 * H, I)) * 0.5).astype(np.float32), "W"),
        numpy_helper.from_array((rng.standard_normal((D, 4 * H, H)) * 0.5).astype(np.float32), "R"),
    ]
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal((D, 8 * H)) * 0.1).astype(np.float32), "B"))
    names = ["X", "W", "R", "B" if bias else "", "", "h0" if init else "", "c0" if init else ""]
    for index, value in extra_inputs:  # (input position, initializer) pairs
        names += [""] * (index + 1 - len(names))
        names[index] = f"in{index}"
        inits.append(numpy_helper.from_array(value, f"in{index}"))
    while names[-1] == "":
        names.pop()
    xs, hs = ([T, B, I], [D, B, H]) if layout == 0 else ([B, T, I], [B, D, H])
    graph_in = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xs)]
    if init:
        graph_in += [helper.make_tensor_value_info(n, TensorProto.FLOAT, hs) for n in ("h0", "c0")]
    node = helper.make_node(
        "LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=H, direction=direction, layout=layout, **attrs
    )
    ys = [T, D, B, H] if layout == 0 else [B, T, D, H]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ys)] + [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, hs) for n in ("Y_h", "Y_c")
    ]
    graph = helper.make_graph([node], "lstm", graph_in, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def gqa_attention(heads: int = 4, kv_heads: int = 2, s: int = 3, t: int = 8, d: int = 16) -> onnx.ModelProto:
    """softmax(q x k^T) x v over `heads` query heads and `kv_heads` key / value heads (grouped-query
    attention; 1 KV head per query head when equal), the KV heads repeated as torch exports Hugging Face's
    repeat_kv (Unsqueeze -> Expand -> Reshape). Inputs q [1, heads, s, d], k and v [1, kv_heads, t, d]."""
    g = heads // kv_heads
    consts = {
        "axes": np.array([2], np.int64),
        "expand": np.array([1, kv_heads, g, t, d], np.int64),
        "merge": np.array([1, heads, t, d], np.int64),
    }
    nodes = []
    for x in ("k", "v"):
        nodes += [
            helper.make_node("Unsqueeze", [x, "axes"], [f"{x}5"]),
            helper.make_node("Expand", [f"{x}5", "expand"], [f"{x}e"]),
            helper.make_node("Reshape", [f"{x}e", "merge"], [f"{x}r"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vr"], ["out"]),
    ]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "gqa_attention",
        [
            helper.make_tensor_value_info("q", f32, [1, heads, s, d]),
            helper.make_tensor_value_info("k", f32, [1, kv_heads, t, d]),
            helper.make_tensor_value_info("v", f32, [1, kv_heads, t, d]),
        ],
        [helper.make_tensor_value_info("out", f32, [1, heads, s, d])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
