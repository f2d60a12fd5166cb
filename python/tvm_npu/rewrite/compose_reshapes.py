"""Compose a reshape of a reshape into one reshape of the first one's input.

ONNX exporters write `x[:, :, None, None]` as two Unsqueezes (diffusers' ResNet block adds its time
embedding [N, C] to a map that way), which import as two reshapes: [N, C] -> [N, C, 1] -> [N, C, 1, 1].
The middle shape stores the C values as C rows of one element, so the first reshape moves data on the NPU
(NPU_E_LAYOUT) and ran on the CPU in every ResNet block, splitting the region there; [N, C] ->
[N, C, 1, 1] directly is a free view. A reshape only reinterprets its input's row-major elements, so the
composition is exact. Runs in `rewrite.run` after `views_as_reshape` (which turns the Unsqueezes'
squeeze / expand_dims forms into reshapes first).
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import rewrite_bindings

RESHAPE = "relax.reshape"


def _reshape_of(g: rg.Graph, expr):
    """The input of the reshape `expr` is bound to, or None when `expr` is not a var bound to one."""
    value = g.value.get(expr) if isinstance(expr, relax.Var) else None
    return value.args[0] if rg.op_name(value) == RESHAPE else None


def _compose(g: rg.Graph, var, e) -> dict | None:
    """The plan writing the last static reshape `var` of a chain as one reshape of the chain's input.
    Only the chain's last reshape (one no other reshape reads) is planned, so no binding is planned
    twice; an inner reshape is dropped while every reshape above it is and it has no other reader."""
    shape = static_shape(e) if rg.op_name(e) == RESHAPE else None
    if shape is None or _reshape_of(g, e.args[0]) is None:
        return None
    if any(_reshape_of(g, u) is not None for u in g.uses.get(var, [])):
        return None  # not the last reshape of its chain
    plan: dict = {}
    above, src, dropping = var, e.args[0], True
    while (below := _reshape_of(g, src)) is not None:
        dropping = dropping and g.uses.get(src) == [above]
        if dropping:
            plan[src] = False
        above, src = src, below
    plan[var] = lambda m: relax.op.reshape(rg.subst(src, m), shape)
    return plan


def compose_reshapes(mod: tvm.IRModule) -> tvm.IRModule:
    """Write every chain reshape(reshape(... x)) of `main` as reshape(x) to the chain's last shape.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose `main` is plain dataflow.

    Returns
    -------
    tvm.IRModule
        `mod` with each chain one reshape (`mod` itself when it has none); an inner reshape that other
        bindings also read stays for them.
    """
    return rewrite_bindings(mod, _compose)
