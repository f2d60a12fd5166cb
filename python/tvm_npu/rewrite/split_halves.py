"""Rewrite a split of the last axis into two halves as the two strided slices it is.

Hugging Face Llama's rotate_half takes x[..., :D/2] and x[..., D/2:]; torch exports those as two Slices,
but an exporter (or tvm_npu.models.decoder.llama_step) may write one Split, which TVM imports as
`split` + two tuple items. The rope pattern (partition/patterns.py) matches the slices; as a split, RoPE's
products and sum would run as separate elementwise ops, and with a table of several rows (prefill) on
the CPU. Runs in `rewrite.run`, after split_dense_columns (which pushes a dense's column split into its
weights instead).
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import rewrite_bindings


def _halves(g: rg.Graph, var, e) -> dict | None:
    """The plan writing split binding `var` (two equal halves of the last axis, read only by its tuple
    items) as one strided_slice per item, or None."""
    if rg.op_name(e) != "relax.split":
        return None
    shape = static_shape(e.args[0])
    if not shape or shape[-1] % 2 or int(e.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    uses = g.uses.get(var, [])
    if len(getattr(e.ty, "fields", [])) != 2 or not uses:
        return None
    half = (*shape[:-1], shape[-1] // 2)
    if any(
        u is None or not isinstance(g.value[u], relax.TupleGetItem) or tuple(static_shape(u) or ()) != half
        for u in uses
    ):
        return None
    x, h, axis = e.args[0], shape[-1] // 2, len(shape) - 1
    plan: dict = {var: False}
    for u in uses:
        begin = h * int(g.value[u].index)
        plan[u] = lambda m, b=begin: relax.op.strided_slice(rg.subst(x, m), [axis], [b], [b + h])
    return plan


def split_halves(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite `split(x, 2, axis=-1)` (two equal halves, each read through a tuple item) as
    ``strided_slice(x, [-1], [0], [D/2])`` and ``strided_slice(x, [-1], [D/2], [D])``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; the splits in its `main` (plain dataflow) are rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those splits as slices (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _halves)
