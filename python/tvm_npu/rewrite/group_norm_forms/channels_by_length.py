"""Form (d): GroupNorm of a 3-D ``[N, C, L]`` tensor, as diffusers' ``Attention`` writes it for a map:
``hidden_states.view(N, C, H * W)`` then ``group_norm`` (exported written out, or as an instance norm):
Reshape [N, G, -1] -> normalization (form a or b) -> Reshape back to [N, C, L] -> Mul gamma [C, 1] ->
Add beta [C, 1].

GroupNorm of ``[N, C, L]`` is GroupNorm of the map ``[N, C, L, 1]`` exactly (the same groups of whole
channels, the same L values per channel), and when x is itself the view ``[N, C, H, W] -> [N, C, H * W]``
of a map (compose_reshapes has then folded the two views into one) it is GroupNorm of that map, then the
view. Matched at the Add, the whole chain with its affine: the match normalizes the map (x's source, or
``[N, C, L, 1]``), applies gamma and beta per channel of the map and views the result as ``[N, C, L]``,
so the NPU's GroupNorm (GN_STATS / GN_APPLY, partition/group_norm_check.py) sees the 4-D chain it runs
instead of a 3-D affine whose ``[C, 1]`` operands no elementwise command takes. Tried before forms (a)
and (b) (fuse_group_norm runs the forms in order over the whole graph): they would otherwise take the
normalization alone and leave the 3-D affine behind. A chain with an intermediate read elsewhere, gamma
or beta not a float32 constant per channel, or another inner normalization is left to the other forms.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax

from ...ir import graph as rg
from ...ir.values import static_shape
from ..common import const_value
from .common import GroupNormMatch
from .instance_norm import match as instance_norm
from .written_out import match as written_out


def _per_channel(g: rg.Graph, expr, channels: int) -> np.ndarray | None:
    """The [C] float32 values of a constant that broadcasts along axis 1 of ``[N, C, L]`` alone."""
    v = const_value(g, expr, "group_norm affine")
    if v is None or v.dtype != np.float32 or v.ndim > 3:
        return None
    padded = (1,) * (3 - v.ndim) + v.shape
    return v.reshape(channels) if padded[1:] == (channels, 1) and padded[0] == 1 else None


def _sole(g: rg.Graph, expr, op: str, reader):
    """The call bound to `expr` when it is a var bound to `op` that only `reader` reads, else None."""
    value = g.value.get(expr) if isinstance(expr, relax.Var) else None
    return value if rg.op_name(value) == op and g.uses.get(expr) == [reader] else None


def match(g: rg.Graph, var, value) -> GroupNormMatch | None:
    """The GroupNorm of a 3-D ``[N, C, L]`` tensor whose beta add is `var`, as one of the map it views,
    or None."""
    if rg.op_name(value) != "relax.add" or not rg.is_f32_tensor(var):
        return None
    shape = static_shape(var)
    if not shape or len(shape) != 3:
        return None
    n, c, length = shape
    mul_var, bias = value.args
    mul = _sole(g, mul_var, "relax.multiply", var)
    back = _sole(g, mul.args[0], "relax.reshape", mul_var) if mul is not None else None
    norm_var = back.args[0] if back is not None else None
    if back is None or not isinstance(norm_var, relax.Var) or g.uses.get(norm_var) != [mul.args[0]]:
        return None
    inner = next((got for form in (written_out, instance_norm) if (got := form(g, norm_var, g.value[norm_var]))), None)
    gamma, beta = _per_channel(g, mul.args[1], c), _per_channel(g, bias, c)
    if inner is None or inner.source is not None or gamma is None or beta is None:
        return None
    rows = inner.data
    src = g.value[rows].args[0]  # grouped_view: rows is a reshape of x [N, C, *spatial]
    src_shape = static_shape(src) or ()
    if len(src_shape) == 4 and src_shape[:2] == (n, c) and src_shape[2] * src_shape[3] == length:
        source = tuple(src_shape)  # x is the view of this map
    elif tuple(src_shape) == (n, c, length):
        source = (n, c, length, 1)
    else:
        return None
    if math.prod(source) != math.prod(static_shape(rows)):
        return None
    drop = (*inner.drop, norm_var, mul.args[0], mul_var)
    if all(u in drop for u in g.uses.get(rows, [])):
        drop = (*drop, rows)  # the match views x itself
    return GroupNormMatch(src, inner.groups, inner.epsilon, drop, source, gamma, beta, shape)
