"""Form (a): GroupNorm written out op by op, as diffusers / torch export it in some versions:
Reshape [N, G, -1] -> ReduceMean -> Sub -> Pow 2 (or Mul d*d) -> ReduceMean -> Add eps -> Sqrt -> Div ->
Reshape back (then Mul gamma, Add beta per channel, which stay as they are).

Matched at the Div: ``d / sqrt(mean(d^2) + eps)`` with ``d = x - mean(x)``, both means over the last
axis of the grouped view x, kept. That is the biased variance and eps under the root, exactly
layer_norm's; another placement of eps, another axis, or an intermediate read elsewhere is left alone.
"""

from __future__ import annotations

from ...ir import graph as rg
from .common import GroupNormMatch, Reader, grouped_view, normalized, row_reduction


def _mean_of_squares(r: Reader, v, d, x, added, div_var) -> bool:
    """v is mean(d * d) or mean(d ^ 2) over the last axis, and d is read only by the square and the
    division."""
    mean = r.call(v, ("relax.mean",), [added])
    if mean is None or not row_reduction(mean, mean.args[0]) or rg.op_name(r.g.value.get(mean.args[0])) == "":
        return False
    sq_var = mean.args[0]
    sq = r.g.value[sq_var]
    if rg.op_name(sq) == "relax.power":
        ok = sq.args[0].same_as(d) and r.scalar(sq.args[1]) == 2.0
        readers = [sq_var, div_var]
    elif rg.op_name(sq) == "relax.multiply":
        ok = sq.args[0].same_as(d) and sq.args[1].same_as(d)
        readers = [sq_var, sq_var, div_var]
    else:
        return False
    if not ok or r.g.uses.get(sq_var) != [v] or r.g.uses.get(d) != readers:
        return False
    r.drop.append(sq_var)
    return True


def match(g: rg.Graph, var, value) -> GroupNormMatch | None:
    """The GroupNorm whose written-out normalization ends at `var`, or None."""
    r = Reader(g)
    got = normalized(r, var, value, _mean_of_squares)
    groups = grouped_view(g, got[0]) if got else None
    if groups is None:
        return None
    return GroupNormMatch(data=got[0], groups=groups, epsilon=got[1], drop=tuple(r.drop))
