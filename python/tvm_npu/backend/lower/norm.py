"""NORM over a matrix's rows ("layer_norm" and "rms_norm", fp16; "qlayer_norm" and "qrms_norm", int8 codes,
format 1.4; docs/npu.md sections 2 and 6): gamma and beta stay fp32 (the float32 model's values, unrounded)
and travel in the layer's constant block, one row each, loaded like weights."""

from __future__ import annotations

import numpy as np

from ...contract.errors import NPUError
from ...ir.values import constant_value, static_shape
from .composite import Composite
from .graph import Layer
from .registry import lowers
from .softmax import int8_io


def _param(comp: Composite, expr) -> np.ndarray:
    value = constant_value(comp.resolve(expr))
    if value is None:
        value = constant_value(comp.params.get(expr, expr))
    if value is None:  # constraint_norm_params refused this already; here it is a compiler bug
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.region.graph.label}: a norm's gamma or beta is not a constant")
    return np.asarray(value, np.float32).reshape(-1)


@lowers("layer_norm", "rms_norm", "qlayer_norm", "qrms_norm")
def lower_norm(comp: Composite) -> Layer:
    """layer_norm(x, gamma, beta) / rms_norm(x, weight) over the last axis. The constant block holds the
    rows the command reads: gamma, and a layer_norm's beta (`layer.norm_params` names them; the planner
    pads each row to the alignment). constraint_norm_params admits only center = scale = True."""
    layer_norm = comp.base == "layer_norm"
    call = comp.calls[f"nn.{comp.base}"][-1]
    layer = comp.layer("norm", func="layernorm" if layer_norm else "rmsnorm")
    layer.act = "none"
    layer.alpha = float(call.attrs.epsilon)
    names = ("gamma", "beta") if layer_norm else ("gamma",)
    layer.norm_params = names
    layer.const = np.stack([_param(comp, arg) for arg in call.args[1 : 1 + len(names)]])
    shape = static_shape(call)
    layout, view = comp.layout_view(comp.out_var, shape)  # rows (layouts.py)
    if comp.int8:  # format 1.4: the codes' scales and zero points
        int8_io(comp, layer)
    return comp.connect(layer, call.args[0], view, layout, shape, view)
