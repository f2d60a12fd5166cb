"""Rewrite squeeze, expand_dims, flatten and the stack of one tensor as the reshape each one is.

ONNX exports are full of these shape ops (an LSTM's final state is ``stack([h])``, a classifier after it
reads ``squeeze(Y_h)``). Left as they are they run on the CPU and split the NPU region in two, with a
host round trip between; as reshapes the reshape pattern places them on the NPU as free views. Runs in
`rewrite.run` (from `partition.prepare` and the quantizer), before pattern matching.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import rewrite_bindings

VIEWS = ("relax.squeeze", "relax.expand_dims", "relax.flatten")


def _sole_stacked(g: rg.Graph, e):
    """The one tensor a `stack` stacks, or None when it stacks several (or an unknown tuple)."""
    tup = e.args[0]
    tup = g.value.get(tup, tup) if isinstance(tup, relax.Var) else tup
    return tup.fields[0] if isinstance(tup, relax.Tuple) and len(tup.fields) == 1 else None


def _as_reshape(g: rg.Graph, var, e) -> dict | None:
    """The rebuild plan writing view binding `var` as a reshape (of a constant: the reshaped constant),
    or None. Each plan names `var` alone."""
    name = rg.op_name(e)
    x = _sole_stacked(g, e) if name == "relax.stack" else e.args[0] if name in VIEWS else None
    shape = static_shape(e) if x is not None else None
    if shape is None or static_shape(x) is None:
        return None
    if isinstance(x, tvm.ir.Constant):  # e.g. an LSTM's zero initial state: fold it here
        return {var: lambda m: relax.const(x.data.numpy().reshape(shape))}
    return {var: lambda m: relax.op.reshape(rg.subst(x, m), shape)}


def views_as_reshape(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite squeeze, expand_dims, flatten and the stack of a single tensor as the `reshape` each
    one is.

    They only insert or drop unit dimensions (a stack of one tensor inserts one), so on static shapes
    each is ``reshape(x, shape of the result)``, which the reshape pattern places on the NPU as a free
    view when it keeps the stored rows. ONNX exports are full of them: an LSTM's final state ``Y_h`` is
    ``stack([h])`` and a classifier after it reads ``squeeze(Y_h)``; left as CPU ops they split the NPU
    region in two, with a host round trip between.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; the views in its `main` (plain dataflow, as frontends emit) are rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those ops as reshapes (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _as_reshape)
