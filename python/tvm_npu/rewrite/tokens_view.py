"""Write a map's view as tokens the way the NPU stores it: ``permute_dims(reshape(x, [N, C, H * W]),
[0, 2, 1])`` as ``reshape(permute_dims(x, [0, 2, 3, 1]), [N, H * W, C])``, and the way back,
``reshape(permute_dims(t, [0, 2, 1]), [N, C, H, W])`` as ``permute_dims(reshape(t, [N, H, W, C]),
[0, 3, 1, 2])``.

diffusers' attention over a map (the VAE's mid block: ``hidden_states.view(N, C, H * W).transpose(1, 2)``
and back) exports the first forms: a 4-D map reshaped to 3-D (NPU_E_LAYOUT: the NPU stores the map a row
per pixel, the 3-D tensor a row per channel) and a rank-3 transpose, both on the CPU, each splitting the
NPU region. Both orders compute the same values (element ``[n, p, c]`` is ``x[n, c, p // W, p % W]``
either way; only the order of two exact moves changes), and the second is the NPU's free map-to-pixels
view (npu.permute_view, partition/constraints.py) followed by a reshape that keeps its rows. The
intermediate reshape (or transpose) is dropped when the pair was its only reader. Runs in `rewrite.run`
after fuse_group_norm (whose 3-D form ends in such a reshape), before compose_permutes.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import rewrite_bindings


def _bound(g: rg.Graph, expr, op: str):
    value = g.value.get(expr) if isinstance(expr, relax.Var) else None
    return value if rg.op_name(value) == op else None


def _swaps_last_two(call) -> bool:
    """`call` is a permute_dims of a rank-3 tensor by [0, 2, 1]."""
    axes = call.attrs.axes
    return len(static_shape(call.args[0]) or ()) == 3 and axes is not None and [int(a) for a in axes] == [0, 2, 1]


def _to_tokens(g: rg.Graph, var, e) -> dict | None:
    """permute_dims(reshape(x [N, C, H, W], [N, C, H * W]), [0, 2, 1]) at `var`."""
    if rg.op_name(e) != "relax.permute_dims" or not _swaps_last_two(e):
        return None
    flat = _bound(g, e.args[0], "relax.reshape")
    x = flat.args[0] if flat is not None else None
    src, mid = static_shape(x) if x is not None else None, static_shape(e.args[0])
    if not src or len(src) != 4 or mid != (src[0], src[1], src[2] * src[3]):
        return None
    n, c, h, w = src
    plan = {var: lambda m: relax.op.reshape(relax.op.permute_dims(rg.subst(x, m), [0, 2, 3, 1]), [n, h * w, c])}
    if g.sole_use(e.args[0]) is not None and g.sole_use(e.args[0]).same_as(var):
        plan[e.args[0]] = False
    return plan


def _from_tokens(g: rg.Graph, var, e) -> dict | None:
    """reshape(permute_dims(t [N, H * W, C], [0, 2, 1]), [N, C, H, W]) at `var`."""
    dst = static_shape(e) if rg.op_name(e) == "relax.reshape" else None
    perm = _bound(g, e.args[0], "relax.permute_dims") if dst else None
    if perm is None or len(dst) != 4 or not _swaps_last_two(perm) or _to_tokens(g, e.args[0], perm):
        return None  # (a transpose _to_tokens rewrites is planned there)
    t = perm.args[0]
    n, c, h, w = dst
    if static_shape(e.args[0]) != (n, c, h * w):
        return None
    plan = {var: lambda m: relax.op.permute_dims(relax.op.reshape(rg.subst(t, m), [n, h, w, c]), [0, 3, 1, 2])}
    if g.sole_use(e.args[0]) is not None and g.sole_use(e.args[0]).same_as(var):
        plan[e.args[0]] = False
    return plan


def tokens_view(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite each map-to-tokens view (reshape to [N, C, H * W], transpose [0, 2, 1]) of `main` as the
    map's pixels-as-rows permute then a reshape to [N, H * W, C], and each tokens-to-map view (transpose
    [0, 2, 1], reshape to [N, C, H, W]) as a reshape to [N, H, W, C] then the permute back.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; `main` plain dataflow with static shapes where rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those views rewritten (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, lambda g, var, e: _to_tokens(g, var, e) or _from_tokens(g, var, e))
