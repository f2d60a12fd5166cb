"""Move a multiply by a scalar constant from below attention's head split to above it:
``multiply(permute_dims(reshape(x, s), p), c)`` as ``permute_dims(reshape(multiply(x, c), s), p)``.

The torch exporter's scaled-dot-product attention scales Q and K by sqrt(scale) after their head split
(Reshape -> Transpose -> Mul). Multiplying every element by one scalar commutes exactly with moving the
elements, so the result is bit-identical; with the scale above the split the head split sits right on
the matmul, where the head-split MATMUL patterns (partition/patterns.py) address it in place, and the
scale becomes an ELTWISE of its own on the rows. Only a chain used by the multiply alone moves (else
the unscaled split would still be computed), and only a one-element constant of x's dtype (no
broadcast, no type promotion).
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import const_value

PERMUTE, RESHAPE, MULTIPLY = "relax.permute_dims", "relax.reshape", "relax.multiply"


def _match(g: rg.Graph, var, e):
    """(x, reshape call, permute call, scalar constant expr, reshape var, permute var) or None."""
    if rg.op_name(e) != MULTIPLY:
        return None
    a, b = e.args
    for p_var, c in ((a, b), (b, a)):
        if not isinstance(p_var, relax.Var) or rg.op_name(g.value.get(p_var)) != PERMUTE:
            continue
        perm = g.value[p_var]
        r_var = perm.args[0]
        if not isinstance(r_var, relax.Var) or rg.op_name(g.value.get(r_var)) != RESHAPE:
            continue
        value = const_value(g, c, "scale")
        x = g.value[r_var].args[0]
        if value is None or value.size != 1:
            continue
        if not (_same(g.sole_use(p_var), var) and _same(g.sole_use(r_var), p_var)):
            continue
        if static_shape(e) != static_shape(p_var) or _dtype(c) != _dtype(x) or _dtype(x) is None:
            continue
        return x, g.value[r_var], perm, c, r_var, p_var
    return None


def _same(a, b) -> bool:
    return a is not None and a.same_as(b)


def _dtype(expr):
    ty = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    return getattr(ty, "dtype", None)


def scale_before_heads(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite each ``multiply(permute_dims(reshape(x)), c)`` of `main` (c a scalar constant) as
    ``permute_dims(reshape(multiply(x, c)))``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; `main` plain dataflow.

    Returns
    -------
    tvm.IRModule
        `mod` with those multiplies moved (`mod` itself when it has none).
    """
    g = rg.Graph(mod["main"])
    plan: dict = {}
    for var, value in g.bindings:
        hit = _match(g, var, value)
        if hit is None:
            continue
        x, reshape, perm, c, r_var, p_var = hit
        plan[r_var] = plan[p_var] = False
        plan[var] = (x, reshape, perm, c, var)
    if not plan:
        return mod

    def rewrite(bb, var, value, m, fresh):
        step = plan.get(var)
        if step is None or step is False:
            return step
        x, reshape, perm, c, _ = step
        scaled = bb.emit(relax.op.multiply(rg.subst(x, m), rg.subst(c, m)), name_hint=fresh(f"{var.name}_scaled"))
        heads = bb.emit(relax.op.reshape(scaled, reshape.args[1]), name_hint=fresh(f"{var.name}_heads"))
        return relax.op.permute_dims(heads, perm.attrs.axes)

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0])
