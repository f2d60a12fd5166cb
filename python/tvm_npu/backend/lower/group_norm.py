"""GroupNorm of an NCHW map ("group_norm", "group_norm_silu"; fp16, format 1.7, docs/npu.md sections 2 and 6):
the chain rewrite/fuse_group_norm.py writes, reshape(x, [N, G, L]) -> layer_norm(gamma 1, beta 0) -> reshape
back -> x * gamma + beta per channel [-> silu], as one layer of kind "group_norm" that the planner emits as
GN_STATS over all row tiles, then GN_APPLY over them (plan/group_norm_plan.py). gamma and beta stay fp32
(the model's values) and travel in the layer's constant block; the SiLU is GN_APPLY's fused one."""

from __future__ import annotations

import numpy as np

from ...contract.errors import NPUError
from ...ir.values import constant_value, static_shape
from .composite import Composite
from .graph import Layer
from .registry import lowers


def _channel_constant(comp: Composite, call, channels: int) -> tuple:
    """(the tensor operand, the constant's C fp32 values) of the per-channel multiply or add; DPL matches
    either operand order."""
    for k in (0, 1):
        expr = call.args[k]
        value = constant_value(comp.resolve(expr))
        if value is None:
            value = constant_value(comp.params.get(expr, expr))
        if value is not None and np.asarray(value).size == channels:
            return call.args[1 - k], np.asarray(value, np.float32).reshape(-1)
    # check_group_norm refused this already; reaching here is a compiler bug
    raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.region.graph.label}: a GroupNorm's gamma or beta is not constant")


@lowers("group_norm", "group_norm_silu")
def lower_group_norm(comp: Composite) -> Layer:
    """The chain's input map, its G (the grouped view's rows per image), eps, gamma and beta."""
    rows = comp.calls["reshape"][0]
    data = rows.args[0]
    shape = static_shape(data)
    channels = shape[1]
    norm = comp.calls["nn.layer_norm"][0]
    layer = comp.layer("group_norm", groups=int(static_shape(rows)[1]))
    layer.func = "silu" if "nn.silu" in comp.calls else "none"
    layer.alpha = float(norm.attrs.epsilon)
    _, gamma = _channel_constant(comp, comp.calls["multiply"][0], channels)
    _, beta = _channel_constant(comp, comp.calls["add"][0], channels)
    layer.norm_params = ("gamma", "beta")
    layer.const = np.stack([gamma, beta])
    layout, view = comp.layout_view(comp.out_var, shape)  # an NCHW map (partition/layouts.py)
    return comp.connect(layer, data, view, layout, shape, view)
