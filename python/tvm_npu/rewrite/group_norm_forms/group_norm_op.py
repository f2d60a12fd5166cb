"""Form (c): the one op ``relax.nn.group_norm``, what TVM 0.27's ONNX frontend imports
GroupNormalization as: opset 21 (scale and bias per channel) as ``group_norm(x, ones, zeros,
center=False, scale=False)`` followed by the per-channel Mul / Add; opset 18 (scale and bias per group)
with them repeated to per channel inside the op, which is exact (onnx 1.23's checker refuses opset 18's
op as deprecated, so from_onnx stops before this with ERR_INVALID_MODEL); com.microsoft GroupNorm
(frontend/contrib/group_norm.py) with gamma and beta in the op.

The Mul / Add after opset 21's import multiply by constants reshaped to [C, 1, 1], an operand shape the
NPU's elementwise check does not take as a per-channel vector: they are absorbed into the match
(matched at the Add) and applied as [1, C, 1, 1] constants. Matched when the channel axis is 1, the
axes are all the spatial ones, x float32 with a static shape, gamma and beta float32 constants of C
values (ones and zeros when center or scale is False: TVM's kernel applies them whatever the flags say,
so another value has no single meaning) and epsilon finite and >= 0; anything else is left alone.
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


def _per_channel(g: rg.Graph, expr, shape) -> np.ndarray | None:
    """The [C] float32 values of a constant that broadcasts along axis 1 of `shape` alone, or None."""
    v = const_value(g, expr, "group_norm affine")
    if v is None or v.dtype != np.float32 or v.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - v.ndim) + v.shape
    want = tuple(shape[1] if i == 1 else 1 for i in range(len(shape)))
    return v.reshape(shape[1]) if padded == want else None


def _affine_after(g: rg.Graph, norm_var):
    """(mul_var, gamma, add_var, beta) when the sole reader of `norm_var` is a multiply by a per-channel
    constant whose sole reader adds one, else None."""
    shape = static_shape(norm_var)
    mul_var = g.sole_use(norm_var)
    mul = g.value.get(mul_var)
    if rg.op_name(mul) != "relax.multiply" or not shape:
        return None
    other = mul.args[1] if mul.args[0].same_as(norm_var) else mul.args[0]
    gamma = _per_channel(g, other, shape)
    add_var = g.sole_use(mul_var)
    add = g.value.get(add_var)
    if gamma is None or rg.op_name(add) != "relax.add" or not add.args[0].same_as(mul_var):
        return None
    beta = _per_channel(g, add.args[1], shape)
    return None if beta is None else (mul_var, gamma, add_var, beta)


def match(g: rg.Graph, var, value) -> GroupNormMatch | None:
    """The GroupNorm `var` binds as one relax.nn.group_norm (with gamma 1 and beta 0, the per-channel
    Mul / Add after it: matched at that Add), or None."""
    if rg.op_name(value) == "relax.add":
        norm_var = value.args[0]
        mul = g.value.get(norm_var) if isinstance(norm_var, relax.Var) else None
        norm_var = mul.args[0] if rg.op_name(mul) == "relax.multiply" else None
        got = _norm(g, norm_var, g.value.get(norm_var)) if isinstance(norm_var, relax.Var) else None
        affine = _affine_after(g, norm_var) if got is not None else None
        if affine is None or not affine[2].same_as(var) or not ((got.gamma == 1).all() and (got.beta == 0).all()):
            return None
        mul_var, gamma, _, beta = affine
        return GroupNormMatch(got.data, got.groups, got.epsilon, (norm_var, mul_var), got.source, gamma, beta)
    got = _norm(g, var, value)
    if got is not None and (got.gamma == 1).all() and (got.beta == 0).all() and _affine_after(g, var):
        return None  # matched with its affine at the add
    return got


def _norm(g: rg.Graph, var, value) -> GroupNormMatch | None:
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
