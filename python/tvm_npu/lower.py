"""Stage 4a — lower: an NPU-partitioned Relax function becomes a list of NPU layers.

Reads the composite functions (names from patterns.py) inside one function marked Codegen="npu" and
produces `Layer` records with their weights already in the NPU's order ([OC][KH][KW][IC], fp16) and
biases as fp32 — the layout work happens here, at compile time, never at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from .constraints import constant_value, static_shape
from .errors import NPUError


@dataclass
class TensorInfo:
    """A tensor of the region: its host form and its device view [N, H, W, C]."""

    name: str
    host_shape: tuple
    host_layout: str  # NCHW, NHWC or ROWS (docs/npu.md section 6)
    view: tuple


@dataclass
class Layer:
    """One NPU compute op: a CONV2D (dense is a 1x1 conv over the [1, M, 1, K] view)."""

    name: str
    composite: str
    inp: str
    out: str
    weight: np.ndarray  # fp16 [OC, KH, KW, IC]
    bias: np.ndarray | None  # fp32 [OC]
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)  # top, left, bottom, right
    act: str = "none"
    clip: tuple = (0.0, 0.0)

    @property
    def macs(self) -> int:
        return int(np.prod(self.weight.shape)) * self.out_pixels

    out_pixels: int = 0


@dataclass
class Graph:
    """A lowered NPU region."""

    symbol: str
    inputs: list = field(default_factory=list)  # tensor names, in argument order
    outputs: list = field(default_factory=list)
    tensors: dict = field(default_factory=dict)  # name -> TensorInfo
    layers: list = field(default_factory=list)
    var_names: dict = field(default_factory=dict)  # relax.Var -> tensor name


def _conv_view(shape, layout):
    n, h, w, c = (shape[layout.index(d)] for d in "NHWC")
    return (n, h, w, c)


def _rows_view(shape):
    return (1, int(np.prod(shape[:-1])), 1, shape[-1])


def _weight_ohwi(weight: np.ndarray, layout: str) -> np.ndarray:
    return weight.transpose([layout.index(d) for d in "OHWI"])


def _composite_parts(func: relax.Function) -> dict:
    """The calls inside a composite, by op name, plus the constants they use."""
    parts = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                parts[value.op.name.removeprefix("relax.")] = value
    return parts


def _clip_bounds(call) -> tuple:
    return tuple(float(b.value) for b in call.args[1:])


def _const(expr, what: str, symbol: str) -> np.ndarray:
    if isinstance(expr, relax.Call) and expr.op.name == "relax.permute_dims":
        value = _const(expr.args[0], what, symbol)
        axes = expr.attrs.axes
        return value.transpose(None if axes is None else [int(a) for a in axes])
    value = constant_value(expr)
    if value is None:
        raise NPUError("ERR_OP_NOT_SUPPORTED",
                       f"{symbol}: the {what} is not a compile-time constant; bind weights with params=")
    return value


def _lower_composite(graph: Graph, name: str, composite: relax.Function, args, out_var) -> Layer:
    kind = str(composite.attrs["Composite"])
    parts = _composite_parts(composite)
    params = {p: a for p, a in zip(composite.params, args)}
    act, clip = "none", (0.0, 0.0)
    if "nn.relu" in parts:
        act = "relu"
    elif "clip" in parts:
        act, clip = "clip", _clip_bounds(parts["clip"])
    bias = None
    if "add" in parts:
        bias = _const(parts["add"].args[1], "bias", graph.symbol).astype(np.float32).reshape(-1)
    if "nn.conv2d" in parts:
        call = parts["nn.conv2d"]
        layout = str(call.attrs.data_layout)
        weight = _weight_ohwi(_const(call.args[1], "weight", graph.symbol), str(call.attrs.kernel_layout))
        in_view = _conv_view(static_shape(call.args[0]), layout)
        out_shape = static_shape(call)
        out_view = _conv_view(out_shape, layout)
        pad = [int(p) for p in call.attrs.padding]  # top, left, bottom, right
        layer = Layer(name, kind, "", "", weight.astype(np.float16), bias,
                      stride=tuple(int(s) for s in call.attrs.strides),
                      dilation=tuple(int(d) for d in call.attrs.dilation),
                      padding=tuple(pad), act=act, clip=clip)
        host_layout = layout
        data = call.args[0]
    else:
        call = parts["matmul"]
        weight = _const(call.args[1], "weight", graph.symbol)  # [K, N]
        in_view = _rows_view(static_shape(call.args[0]))
        out_shape = static_shape(call)
        out_view = _rows_view(out_shape)
        layer = Layer(name, kind, "", "", weight.T[:, None, None, :].astype(np.float16), bias,
                      act=act, clip=clip)
        host_layout = "ROWS"
        data = call.args[0]
    layer.out_pixels = out_view[0] * out_view[1] * out_view[2]
    # The composite's data parameter is bound to a region tensor (a param or an earlier output).
    region_in = params.get(data, data)
    layer.inp = _tensor(graph, region_in, static_shape(call.args[0]), host_layout, in_view)
    layer.out = _tensor(graph, out_var, out_shape, host_layout, out_view)
    return layer


def _tensor(graph: Graph, var, shape, layout: str, view: tuple) -> str:
    """Name of the region tensor bound to `var` (Relax name hints are not unique: key by the Var)."""
    known = graph.var_names.get(var)
    if known is None:
        known = graph.var_names[var] = f"{var.name}:{len(graph.var_names)}"
        graph.tensors[known] = TensorInfo(known, tuple(shape), layout, view)
    elif graph.tensors[known].view != view:
        raise NPUError("ERR_OP_NOT_SUPPORTED",
                       f"{graph.symbol}: tensor {var.name} is used with two layouts "
                       f"({graph.tensors[known].view} and {view}); a reshape between them must run on the CPU")
    return known


def lower_function(func: relax.Function) -> Graph:
    """Lower one function with attribute Codegen="npu" to a Graph of NPU layers."""
    symbol = str(func.attrs["global_symbol"])
    graph = Graph(symbol)
    composites = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                name = f"{symbol}.{len(graph.layers)}"
                graph.layers.append(_lower_composite(graph, name, composites[value.op],
                                                     value.args, binding.var))
            else:
                raise NPUError("ERR_OP_NOT_SUPPORTED",
                               f"{symbol}: unexpected binding {binding.var.name} in an NPU region")
    body = func.body.body
    outs = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    missing = [v.name for v in list(func.params) + outs if v not in graph.var_names]
    if missing:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{symbol}: region tensors {missing} are not NPU tensors")
    graph.inputs = [graph.var_names[p] for p in func.params]
    graph.outputs = [graph.var_names[o] for o in outs]
    return graph
