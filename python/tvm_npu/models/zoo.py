"""Published CNN architectures built in code with seeded weights (no downloads), as ONNX models.

Each builder keeps its architecture's structure (the operators and how they connect: bottlenecks,
fire modules, channel shuffle, dense blocks, parallel branches) with a `width` multiplier and an input
`size`, so the tests can run small versions quickly and the same code builds the full-size network.
Weights are He-initialised (models.GraphBuilder); residual branches end in a damped convolution
(gain 0.3), as trained networks keep them small, so activations stay in range through deep stacks.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .builders import GraphBuilder, mobilenet_v2_shaped  # noqa: F401  (part of the zoo)


class ZooBuilder(GraphBuilder):
    """GraphBuilder plus the layers these architectures need beyond conv / gemm."""

    def ints(self, values) -> str:
        name = self._name("i")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def max_pool(self, x, k=3, stride=2, pad=1):
        return self.node("MaxPool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def concat(self, xs):
        return self.node("Concat", list(xs), axis=1)

    def split2(self, x, c):
        """Two channel halves of `x` ([1, c, H, W])."""
        outs = [self._name("split"), self._name("split")]
        self.nodes.append(helper.make_node("Split", [x, self.ints([c // 2, c // 2])], outs, axis=1))
        return outs

    def shuffle(self, x, c, hw, groups=2):
        """Channel shuffle: reshape [1, g, c/g, H, W] -> transpose -> reshape back."""
        y = self.node("Reshape", [x, self.ints([1, groups, c // groups, hw, hw])])
        y = self.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return self.node("Reshape", [y, self.ints([1, c, hw, hw])])

    def head(self, x, c, classes):
        """Global average pool, flatten, fully connected."""
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])])
        return self.gemm(x, c, classes)


def _half(n):
    """Output size of a stride-2 3x3 convolution or pool with padding 1."""
    return (n + 1) // 2


def _ch(c, width, minimum=8):
    return max(minimum, int(c * width + 4) // 8 * 8)


def resnet50_shaped(seed=0, size=224, width=1.0, classes=1000, blocks=(3, 4, 6, 3)) -> onnx.ModelProto:
    """ResNet-50: 7x7/2 stem, 3x3/2 max pool, four stages of bottlenecks (1x1 -> 3x3 -> 1x1 x4, add,
    relu; the first block of a stage projects the shortcut with a strided 1x1)."""
    g = ZooBuilder(seed)
    stem = _ch(64, width)
    x = g.max_pool(g.conv("input", 3, stem, 7, stride=2))
    cin = stem
    for stage, n in enumerate(blocks):
        mid = _ch(64 * 2**stage, width)
        for i in range(n):
            stride = 2 if i == 0 and stage > 0 else 1
            y = g.conv(x, cin, mid, 1)
            y = g.conv(y, mid, mid, 3, stride=stride)
            y = g.conv(y, mid, 4 * mid, 1, act=None, gain=0.3)
            short = g.conv(x, cin, 4 * mid, 1, stride=stride, act=None) if i == 0 else x
            x = g.node("Relu", [g.node("Add", [short, y])])
            cin = 4 * mid
    return g.model([1, 3, size, size], g.head(x, cin, classes), [1, classes])


def squeezenet1_1(seed=0, size=224, width=1.0, classes=1000) -> onnx.ModelProto:
    """SqueezeNet 1.1: fire modules (1x1 squeeze -> 1x1 and 3x3 expand, concatenated), max pools,
    a 1x1 classifier convolution and a global average pool."""
    g = ZooBuilder(seed)
    x = g.max_pool(g.conv("input", 3, _ch(64, width), 3, stride=2), pad=0)
    cin = _ch(64, width)
    for i, (s, e) in enumerate([(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256)]):
        if i in (2, 4):
            x = g.max_pool(x, pad=0)
        sq = g.conv(x, cin, _ch(s, width), 1)
        e1, e3 = g.conv(sq, _ch(s, width), _ch(e, width), 1), g.conv(sq, _ch(s, width), _ch(e, width), 3)
        x, cin = g.concat([e1, e3]), 2 * _ch(e, width)
    x = g.node("GlobalAveragePool", [g.conv(x, cin, classes, 1)])
    return g.model([1, 3, size, size], g.node("Flatten", [x]), [1, classes])


def shufflenet_v2(seed=0, size=224, width=1.0, classes=1000, repeats=(4, 8, 4)) -> onnx.ModelProto:
    """ShuffleNetV2: stride-1 units split the channels, transform one half (1x1, depthwise 3x3, 1x1),
    concatenate and shuffle; stride-2 units transform both branches and double the channels."""
    g = ZooBuilder(seed)
    x = g.max_pool(g.conv("input", 3, 24, 3, stride=2))
    cin, hw = 24, _half(_half(size))
    for stage, n in enumerate(repeats):
        cout = _ch((116, 232, 464)[stage] * width, 1.0, 16) // 2 * 2
        half = cout // 2
        for i in range(n):
            if i == 0:
                hw = _half(hw)
                b1 = g.conv(g.conv(x, cin, cin, 3, stride=2, group=cin, act=None), cin, half, 1)
                b2 = g.conv(x, cin, half, 1)
            else:
                b1, b2 = g.split2(x, cout)
            b2 = g.conv(b2, half, half, 3, stride=2 if i == 0 else 1, group=half, act=None)
            x = g.shuffle(g.concat([b1, g.conv(b2, half, half, 1)]), cout, hw)
            cin = cout
    x = g.conv(x, cin, _ch(1024, width), 1)
    return g.model([1, 3, size, size], g.head(x, _ch(1024, width), classes), [1, classes])


def densenet_shaped(seed=0, size=224, growth=32, blocks=(6, 12, 24, 16), classes=1000) -> onnx.ModelProto:
    """DenseNet (121 by default): dense blocks where every layer (1x1 bottleneck -> 3x3, growth
    channels) sees the concatenation of all earlier outputs; 1x1 + 2x2 average-pool transitions.
    Convolutions are post-activation (conv + relu) here, which the NPU fuses."""
    g = ZooBuilder(seed)
    c = 2 * growth
    x = g.max_pool(g.conv("input", 3, c, 7, stride=2))
    for b, n in enumerate(blocks):
        feats = [x]
        for _ in range(n):
            y = g.conv(g.conv(x, c, 4 * growth, 1), 4 * growth, growth, 3)
            feats.append(y)
            x, c = g.concat(feats), c + growth
        if b + 1 < len(blocks):
            x = g.node("AveragePool", [g.conv(x, c, c // 2, 1)], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    return g.model([1, 3, size, size], g.head(x, c, classes), [1, classes])


def inception_shaped(seed=0, size=224, width=1.0, classes=1000, modules=3) -> onnx.ModelProto:
    """GoogLeNet-style Inception modules: parallel 1x1, 1x1 -> 3x3, 1x1 -> 3x3 -> 3x3 and
    3x3 max pool -> 1x1 branches concatenated, with strided max pools between pairs of modules."""
    g = ZooBuilder(seed)
    cin = _ch(64, width)
    x = g.max_pool(g.conv(g.max_pool(g.conv("input", 3, cin, 7, stride=2)), cin, _ch(192, width), 3))
    cin = _ch(192, width)
    for m in range(modules):
        if m and m % 2 == 0:
            x = g.max_pool(x)
        a, r3, c3, r5, c5, p = (_ch(v * (1 + m / 4), width) for v in (64, 96, 128, 16, 32, 32))
        b1 = g.conv(x, cin, a, 1)
        b2 = g.conv(g.conv(x, cin, r3, 1), r3, c3, 3)
        b3 = g.conv(g.conv(g.conv(x, cin, r5, 1), r5, c5, 3), c5, c5, 3)
        b4 = g.conv(g.max_pool(x, stride=1), cin, p, 1)
        x, cin = g.concat([b1, b2, b3, b4]), a + c3 + c5 + p
    return g.model([1, 3, size, size], g.head(x, cin, classes), [1, classes])


def vgg_shaped(seed=0, size=224, width=1.0, classes=1000, cfg=(1, 1, 2, 2, 2), fc=4096) -> onnx.ModelProto:
    """VGG (11 by default): stacks of 3x3 convolutions + relu, 2x2 max pools, three fully connected
    layers. At size 32 the last pool leaves 1x1, so the flatten moves no data."""
    g = ZooBuilder(seed)
    x, cin = "input", 3
    for stage, n in enumerate(cfg):
        c = _ch(64 * 2 ** min(stage, 3), width)
        for _ in range(n):
            x, cin = g.conv(x, cin, c, 3), c
        x = g.max_pool(x, k=2, stride=2, pad=0)
    side = size // 2 ** len(cfg)
    x = g.node("Flatten", [x])
    hidden = _ch(fc, width)
    x = g.node("Relu", [g.gemm(x, cin * side * side, hidden)])
    x = g.node("Relu", [g.gemm(x, hidden, hidden)])
    return g.model([1, 3, size, size], g.gemm(x, hidden, classes), [1, classes])
