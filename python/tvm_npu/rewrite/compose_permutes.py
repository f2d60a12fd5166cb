"""Compose two consecutive permute_dims into one: ``permute_dims(permute_dims(x, p), q)`` as
``permute_dims(x, [p[i] for i in q])`` (identity composed away to ``x`` itself).

A transpose only moves elements, so the composition is exact. Builders that split attention's heads and
then transpose K (ours, models/decoder.py: Transpose [0, 2, 1, 3] then [0, 1, 3, 2]) leave two permutes
between the reshape and the matmul; as one ([0, 2, 3, 1], what the torch exporter writes for K^T) the
head-split matmul patterns (partition/patterns.py) see the form they address in place. The inner
permute is dropped when this was its only use, so no CPU transpose is left behind.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import rewrite_bindings

PERMUTE = "relax.permute_dims"


def _axes(call) -> list | None:
    """The permutation of a permute_dims (None axes: reversed), or None for an unknown rank."""
    shape = static_shape(call.args[0])
    if shape is None:
        return None
    axes = call.attrs.axes
    return list(reversed(range(len(shape)))) if axes is None else [int(a) for a in axes]


def _compose(g: rg.Graph, var, e) -> dict | None:
    if rg.op_name(e) != PERMUTE or not isinstance(e.args[0], relax.Var):
        return None
    inner_var = e.args[0]
    inner = g.value.get(inner_var)
    if inner is None or rg.op_name(inner) != PERMUTE:
        return None
    p, q = _axes(inner), _axes(e)
    if p is None or q is None:
        return None
    axes = [p[i] for i in q]
    x = inner.args[0]
    if rg.op_name(g.value.get(x)) == PERMUTE:
        return None  # a longer chain: its first pair composes first (compose_permutes repeats)
    plan: dict = {}
    use = g.sole_use(inner_var)
    if use is not None and use.same_as(var):
        plan[inner_var] = False  # its only reader now reads x: no CPU transpose left behind
    if axes == list(range(len(axes))):
        plan[var] = lambda m, x=x: rg.subst(x, m)
    else:
        plan[var] = lambda m, x=x, axes=axes: relax.op.permute_dims(rg.subst(x, m), axes)
    return plan


def compose_permutes(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite each permute_dims of a permute_dims in `main` as one permute_dims of the inner one's input.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; `main` plain dataflow.

    Returns
    -------
    tvm.IRModule
        `mod` with those pairs composed (`mod` itself when it has none).
    """
    while True:  # a chain of three or more: one pair per round
        rewritten = rewrite_bindings(mod, _compose)
        if rewritten is mod:
            return mod
        mod = rewritten
