"""What the GroupNorm recognizers share: the match they return, the grouped view a written-out GroupNorm
normalizes, and the ``(d / sqrt(var + eps))`` tail its two decomposed forms end in.

A written-out GroupNorm reshapes ``x [N, C, *spatial]`` to ``[N, G, L]`` (``L = C / G * prod(spatial)``),
normalizes each of the ``N * G`` rows over its last axis, and reshapes back; the rows' normalization is
a layer_norm without gamma and beta, which is what the NPU runs (NORM, docs/npu.md section 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tvm import relax

from ...ir import graph as rg
from ...ir.values import static_shape
from ..common import const_value


@dataclass(frozen=True)
class GroupNormMatch:
    """One recognized GroupNorm, rooted at the binding it replaces.

    data: the ``[N, G, L]`` grouped view (``source`` is None) or, for the one-op form, the ``[N, C, ...]``
    input itself (``source`` is its shape). gamma / beta: per-channel float32 values the one-op form
    applies after the norm (None: none to apply). drop: the other bindings the match consumes, each read
    only inside it. shape: the root's shape when it is not `source` (the result is viewed as it).
    """

    data: relax.Var
    groups: int
    epsilon: float
    drop: tuple
    source: tuple | None = None
    gamma: np.ndarray | None = None
    beta: np.ndarray | None = None
    shape: tuple | None = None


class Reader:
    """Reads a chain back from its root, collecting the bindings it consumes."""

    def __init__(self, g: rg.Graph):
        self.g, self.drop = g, []

    def call(self, expr, ops: tuple, consumers: list):
        """The call bound to `expr` when it is a var bound to one of `ops` whose readers are exactly
        `consumers` (with repeats, in binding order), else None; the var joins `drop`."""
        value = self.g.value.get(expr) if isinstance(expr, relax.Var) else None
        if rg.op_name(value) not in ops or self.g.uses.get(expr) != consumers:
            return None
        self.drop.append(expr)
        return value

    def scalar(self, expr) -> float | None:
        v = const_value(self.g, expr, "group_norm constant")
        ok = v is not None and v.size == 1 and v.dtype == np.float32 and np.isfinite(v).all()
        return float(v.reshape(())) if ok else None


def row_reduction(call, x) -> bool:
    """True when `call` (a mean or variance) reduces `x` over its last axis alone, keeping it."""
    rank = len(static_shape(x) or ())
    attrs = call.attrs
    axes = [int(a) % rank for a in attrs.axis] if attrs.axis is not None and rank else []
    return call.args[0].same_as(x) and axes == [rank - 1] and bool(attrs.keepdims)


def grouped_view(g: rg.Graph, x) -> int | None:
    """G when `x` is a float32 ``[N, G, L]`` reshape of a ``[N, C, *spatial]`` tensor, C a multiple of G
    and ``L = C / G * prod(spatial)`` (GroupNorm's grouping of whole channels), else None."""
    value = g.value.get(x) if isinstance(x, relax.Var) else None
    if rg.op_name(value) != "relax.reshape" or not rg.is_f32_tensor(x):
        return None
    src, shape = static_shape(value.args[0]), static_shape(x)
    if not src or not shape or len(src) < 2 or len(shape) != 3:
        return None
    n, groups, length = shape
    ok = n == src[0] and groups > 0 and src[1] % groups == 0 and length == src[1] // groups * math.prod(src[2:])
    return groups if ok else None


def normalized(r: Reader, div_var, div, variance) -> tuple | None:
    """(x, eps) when `div` (bound to `div_var`) is ``divide(d, sqrt(v + eps))`` with ``d = x - mean(x)``
    over x's last axis, eps a finite float32 constant >= 0 added under the root, and
    ``variance(r, v, d, x, div_var)`` true: v is the rows' biased variance and d is read only by it and
    the division. Else None."""
    if rg.op_name(div) != "relax.divide":
        return None
    d, s = div.args
    sqrt = r.call(s, ("relax.sqrt",), [div_var])
    added = r.call(sqrt.args[0], ("relax.add",), [s]) if sqrt is not None else None
    for v, e in (added.args, added.args[::-1]) if added is not None else ():
        eps = r.scalar(e)
        sub = r.g.value.get(d) if isinstance(d, relax.Var) else None
        if eps is None or eps < 0 or not isinstance(v, relax.Var) or rg.op_name(sub) != "relax.subtract":
            continue
        x, mean = sub.args
        m = r.call(mean, ("relax.mean",), [d])
        if m is not None and row_reduction(m, x) and variance(r, v, d, x, sqrt.args[0], div_var):
            r.drop.append(d)
            return x, eps
        return None
    return None
