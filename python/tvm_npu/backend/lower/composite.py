"""One composite call of an NPU region, as a lowering function sees it: the ops in its body by name,
its bindings, its parameters' region arguments, and the helpers every family shares (a new Layer, the
region tensor of a var, the output's quantization)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...ir.values import constant_value
from ...partition.patterns import PREFIX
from . import quant_params as qp
from .graph import Layer
from .region import Region


def qparams(call) -> tuple[float, int]:
    """Per-tensor (scale, zero point) of a quantize/dequantize call."""
    scale, zp = (constant_value(a) for a in call.args[1:3])
    return float(np.asarray(scale).reshape(-1)[0]), int(np.asarray(zp).reshape(-1)[0])


def _calls(func: relax.Function) -> dict:
    """The op calls inside a composite, by op name (without "relax."), in binding order."""
    calls: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                calls.setdefault(value.op.name.removeprefix("relax."), []).append(value)
    return calls


def _activation(calls: dict) -> tuple[str, tuple]:
    if "nn.relu" in calls:
        return "relu", (0.0, 0.0)
    if "clip" in calls:
        return "clip", tuple(float(b.value) for b in calls["clip"][0].args[1:])
    return "none", (0.0, 0.0)


class Composite:
    """The call of composite function `func` with region-level `args`, binding `out_var`."""

    def __init__(self, region: Region, func: relax.Function, args, out_var):
        self.region = region
        self.name = str(func.attrs["Composite"])  # "npu.qconv2d_bias_relu"
        self.int8 = self.name.startswith(f"{PREFIX}.q")
        self.base = self.name.removeprefix(f"{PREFIX}.q" if self.int8 else f"{PREFIX}.")  # "conv2d_bias_relu"
        self.calls = _calls(func)
        self.env = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        self.params = dict(zip(func.params, args))
        self.args = list(args)
        self.out_var = out_var
        # (device, host) dtype of the region tensors (an int8 op's 16-bit tensors: Region.tensor)
        self.dtypes = ("int8", "int8") if self.int8 else ("float16", "float32")

    def layer(self, kind: str, **fields) -> Layer:
        """A new Layer of this composite (named by its place in the region), with the fused activation."""
        graph = self.region.graph
        act, clip = _activation(self.calls)
        return Layer(
            f"{graph.symbol}.{len(graph.layers)}",
            self.name,
            kind,
            "int8" if self.int8 else "float16",
            act=act,
            clip=clip,
            **fields,
        )

    def resolve(self, expr):
        """The value bound to a dataflow variable of the composite."""
        while isinstance(expr, relax.Var) and expr in self.env:
            expr = self.env[expr]
        return expr

    def data_dq(self):
        """The dequantize of an activation (its input is not a constant)."""
        for dq in self.calls.get("dequantize", []):
            if constant_value(dq.args[0]) is None:
                return dq
        return None

    def tensor(self, var, view, layout, shape=None) -> str:
        """The region tensor of `var` (a parameter of the composite: the region value passed to it)."""
        return self.region.tensor(self.params.get(var, var), view, layout, *self.dtypes, shape)

    def layout_view(self, var, shape=None) -> tuple:
        """(layout, device view) of the region tensor of `var` (a parameter of the composite, or its result)."""
        return self.region.layout_view(self.params.get(var, var), shape)

    def connect(self, layer: Layer, data, in_view, layout, out_shape, out_view) -> Layer:
        """`layer` with its one input (`data`; in int8 the region tensor under its dequantize) and its
        output tensor: the tail of every single-input family."""
        if self.int8:
            data = self.data_dq().args[0]
        layer.inputs = [self.tensor(data, in_view, layout)]
        layer.out = self.tensor(self.out_var, out_view, layout, out_shape)
        layer.out_elems = int(np.prod(out_view))
        return layer

    def output_quantization(self, layer: Layer) -> tuple[float, int]:
        """The output's (scale, zero point); sets the layer's output zero point and the clamp of its
        fused activation (docs/npu.md section 2)."""
        s_y, z_y = qparams(self.calls["quantize"][-1])
        layer.out_zp = z_y
        layer.clamp = qp.clamp_bounds(layer.act, layer.clip, s_y, z_y)
        return s_y, z_y
