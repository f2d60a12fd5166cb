"""Form (c): the one op ``relax.nn.group_norm``, what TVM 0.27's ONNX frontend imports
GroupNormalization as (opset 21: per-channel scale and bias; opset 18: per-group ones, which it
repeats to per-channel before the op, so both arrive per channel).

TVM imports opset 21 as ``group_norm(x, ones, zeros, center=False, scale=False)`` followed by the
per-channel Mul / Add, and opset 18 with gamma and beta in the op. Matched when the channel axis is 1,
the axes are all the spatial ones, x float32 with a static shape, gamma and beta float32 constants of C
values (ones and zeros when center or scale is False: TVM's kernel applies them whatever the flags say,
so another value has no single meaning) and epsilon finite and >= 0. The fused rewrite applies gamma and
beta per channel after the norm; anything else is left alone.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...ir import graph as rg
from ...ir.values import static_shape
from ..common import const_value
from .common import GroupNormMatch


def _value(g: rg.Graph, expr, channels: int) -> np.ndarray | None:
    """The float32 [C] value of a constant gamma / beta (also ones_like / zeros_like of one), or None."""
    bound = g.value.get(expr) if isinstance(expr, relax.Var) else expr
    fill = {"relax.ones_like": 1.0, "relax.zeros_like": 0.0}.get(rg.op_name(bound))
    if fill is not None and rg.is_f32_tensor(expr) and static_shape(expr) == (channels,):
        return np.full(channels, fill, np.float32)
    v = const_value(g, expr, "group_norm gamma or beta")
    return v if v is not None and v.dtype == np.float32 and v.shape == (channels,) else None


def match(g: rg.Graph, var, value) -> GroupNormMatch | None:
    """The GroupNorm `var` binds as one relax.nn.group_norm, or None."""
    if rg.op_name(value) != "relax.nn.group_norm" or not rg.is_f32_tensor(var):
        return None
    x, a = value.args[0], value.attrs
    shape = static_shape(x)
    if not shape or len(shape) < 2 or int(a.channel_axis) % len(shape) != 1:
        return None
    if sorted(int(i) % len(shape) for i in a.axes) != list(range(2, len(shape))):
        return None
    channels, groups, eps = shape[1], int(a.num_groups), float(a.epsilon)
    gamma, beta = _value(g, value.args[1], channels), _value(g, value.args[2], channels)
    if gamma is None or beta is None or groups <= 0 or channels % groups or not np.isfinite(eps) or eps < 0:
        return None
    if not (bool(a.scale) or (gamma == 1).all()) or not (bool(a.center) or (beta == 0).all()):
        return None
    return GroupNormMatch(data=x, groups=groups, epsilon=eps, drop=(), source=shape, gamma=gamma, beta=beta)
