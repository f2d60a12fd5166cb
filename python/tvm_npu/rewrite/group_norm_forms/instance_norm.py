"""Form (b): GroupNorm as torch.onnx.export writes F.group_norm below opset 18: Reshape [N, G, -1] ->
InstanceNormalization(scale = 1, bias = 0) -> Reshape back (then Mul gamma, Add beta per channel, which
stay as they are).

TVM imports the InstanceNormalization as ``(x - mean(x)) / sqrt(variance(x) + eps) * scale + bias``
over the last axis of the grouped view, scale and bias reshaped to ``[G, 1]``. Matched at that final add
when scale is all ones and bias all zeros (torch's export: the affine is the per-channel Mul / Add that
follows); an instance norm with a real per-group affine, over other axes, or with an intermediate read
elsewhere is left alone.
"""

from __future__ import annotations

import numpy as np

from ...ir import graph as rg
from ..common import const_value
from .common import GroupNormMatch, Reader, grouped_view, normalized, row_reduction


def _variance(r: Reader, v, d, x, added, div_var) -> bool:
    """v is variance(x) over the last axis (relax.variance is the biased one), d read only by the division."""
    var = r.call(v, ("relax.variance",), [added])
    return var is not None and row_reduction(var, x) and r.g.uses.get(d) == [div_var]


def _is(g: rg.Graph, expr, fill: float, groups: int) -> bool:
    v = const_value(g, expr, "instance norm scale or bias")
    return v is not None and v.dtype == np.float32 and v.shape == (groups, 1) and bool((v == fill).all())


def match(g: rg.Graph, var, value) -> GroupNormMatch | None:
    """The GroupNorm whose instance norm of the grouped view ends at `var` (the bias add), or None."""
    r = Reader(g)
    if rg.op_name(value) != "relax.add":
        return None
    mul_var, bias = value.args
    mul = r.call(mul_var, ("relax.multiply",), [var])
    div_var, scale = mul.args if mul is not None else (None, None)
    div = r.call(div_var, ("relax.divide",), [mul_var])
    got = normalized(r, div_var, div, _variance) if div is not None else None
    groups = grouped_view(g, got[0]) if got else None
    if groups is None or not (_is(g, scale, 1.0, groups) and _is(g, bias, 0.0, groups)):
        return None
    return GroupNormMatch(data=got[0], groups=groups, epsilon=got[1], drop=tuple(r.drop))
