"""Drop every astype to the dtype its input has already: ``astype(x, x.dtype)`` is x.

Exporters write a Cast wherever the source casts to a dtype it does not know statically (diffusers'
attention casts its output ``.to(query.dtype)``); on a float32 graph it casts float32 to float32, which
imports as an astype that changes no bit but has no NPU pattern (NPU_E_UNSUPPORTED_OP): a CPU op between
attention's last matmul and its output projection that split the VAE decoder's NPU region. Runs in
`rewrite.run` before the fusions, so their recognizers see the chain without it.

Not in `PASSES`: a group-wise int4 weight's float32 scale tables lose their astype here. The int4
recognizers of ir/group_quant.py and partition/patterns.py take the table with or without it, but with
the pass in PASSES GPT-2's int4 build still has a dense layer without int4 codes
(tests/llm/test_int8_weights.py): another reader of the chain (likely rewrite/split_dense_columns.py's
QKV split) still needs the astype. ONNX imports get the same bypass from frontend/static_fold.py.
"""

from __future__ import annotations

import tvm

from ..ir import graph as rg
from .common import rewrite_bindings


def _same_dtype(g: rg.Graph, var, e) -> dict | None:
    if rg.op_name(e) != "relax.astype":
        return None
    x = e.args[0]
    dtype = getattr(x.ty, "dtype", None)
    if dtype is None or str(dtype) == "" or str(dtype) != str(e.attrs.dtype):
        return None
    return {var: lambda m: rg.subst(x, m)}


def identity_casts(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite each astype of `main` whose input already has the target dtype as that input.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; `main` plain dataflow.

    Returns
    -------
    tvm.IRModule
        `mod` with those casts bound to their input (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _same_dtype)
