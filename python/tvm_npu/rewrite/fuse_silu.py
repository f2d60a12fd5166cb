"""Rewrite ``x * sigmoid(x)`` as one ``relax.nn.silu(x)``.

ONNX has no SiLU before opset 24's Swish (which TVM 0.27 does not import), so torch exports
``nn.SiLU`` — the activation of Llama's gated MLP — as Sigmoid then Mul. Left as two ops they are two
NPU commands (UNARY sigmoid, ELTWISE multiply) with an fp16 rounding and an SRAM round trip between;
as `silu` they are one UNARY (func 5, docs/npu.md section 2), and the quantizer sees one activation.
A rewrite rather than a second pattern: the CPU fallback, the quantizer and the patterns then all see
the one op TVM itself has (its legalization is the same ``x * sigmoid(x)``). Runs in `rewrite.run`,
before pattern matching.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from .common import rewrite_bindings


def _silu(g: rg.Graph, var, e) -> dict | None:
    """The plan writing multiply binding `var` as silu of the x it multiplies by sigmoid(x), or None.

    The sigmoid is dropped, so it must have no use but this multiply; each plan names its multiply
    and the sigmoid only that multiply reads, so no two plans name one binding. sigmoid(x) has x's
    shape, so the multiply broadcasts nothing."""
    if rg.op_name(e) != "relax.multiply" or not rg.is_f32_tensor(var):
        return None
    for x, s in (e.args, e.args[::-1]):  # both operand orders
        sig = g.value.get(s) if isinstance(s, relax.Var) else None
        if (
            rg.op_name(sig) == "relax.sigmoid"
            and sig.args[0].same_as(x)
            and g.uses.get(s) == [var]
            and not x.same_as(s)
        ):
            return {s: False, var: lambda m, x=x: relax.op.nn.silu(rg.subst(x, m))}
    return None


def fuse_silu(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ``y = x * sigmoid(x)`` (either operand order) in `mod`'s `main` as ``y = R.nn.silu(x)``:
    a float32 `multiply` of a tensor `x` by ``sigmoid(x)`` of that same var, where the sigmoid has no
    other use (its binding is dropped). A sigmoid that something else also reads is left alone, and
    both ops run as they are. Returns `mod` itself when nothing matched."""
    return rewrite_bindings(mod, _silu)
