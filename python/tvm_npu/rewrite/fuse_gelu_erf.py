"""Rewrite the written-out erf GELU, ``0.5 * x * (1 + erf(x / sqrt(2)))``, as one ``relax.nn.gelu(x)``.

torch.onnx's TorchScript exporter writes `F.gelu` (diffusers' GEGLU, BERT-style MLPs) op by op at
opsets before 20 — Div by sqrt(2), Erf, Add 1, Mul x, Mul 0.5 — and TVM imports it so: Erf has no NPU
command, so the chain stays on the CPU and splits the NPU region around it. As `gelu` it is one UNARY
(func 3, the erf form: docs/npu.md section 2), the op ONNX's Gelu imports as. Only the exact function is
fused: the constants must equal sqrt(2) (or 1/sqrt(2) for a multiply), 1 and 0.5 as float32, and every
intermediate must be read by the next step only; anything else is left as it is. Runs in `rewrite.run`,
before pattern matching.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import Chain, rewrite_bindings

HALF, ONE = np.float32(0.5), np.float32(1.0)
SQRT2, INV_SQRT2 = np.float32(math.sqrt(2.0)), np.float32(1 / math.sqrt(2.0))


class _Chain(Chain):
    """The erf GELU's steps (common.Chain reads calls and constants)."""

    what = "gelu constant"

    def one_plus_erf_of(self, expr, consumer, x) -> bool:
        """`expr` is 1 + erf(x / sqrt(2)) or 1 + erf(x * (1 / sqrt(2))), each commutative op either way."""
        args = self.call(expr, "relax.add", consumer)
        for one, e in (args, args[::-1]) if args else ():
            if not self.scalar(one, ONE):
                continue
            inner = self.call(e, "relax.erf", expr)
            if inner is None:
                return False
            div = self.call(inner[0], "relax.divide", e)
            if div is not None:
                return div[0].same_as(x) and self.scalar(div[1], SQRT2)
            mul = self.call(inner[0], "relax.multiply", e)
            return bool(mul) and any(a.same_as(x) and self.scalar(b, INV_SQRT2) for a, b in (mul, mul[::-1]))
        return False


def _gelu(g: rg.Graph, var, e) -> dict | None:
    """The plan writing the final multiply `var` as gelu(x), or None. The final multiply is
    (x * t) * 0.5, 0.5 * (x * t) or (x * 0.5) * t with t = 1 + erf(x / sqrt(2))."""
    if rg.op_name(e) != "relax.multiply" or not rg.is_f32_tensor(var):
        return None
    args = list(e.args)
    for a, b in (args, args[::-1]):
        candidates = []
        c = _Chain(g)
        if c.scalar(b, HALF):  # (x * t) * 0.5
            inner = c.call(a, "relax.multiply", var)
            candidates = [(x, t, a, c) for x, t in (inner, inner[::-1])] if inner else []
        else:  # (x * 0.5) * t
            inner = c.call(a, "relax.multiply", var)
            for x, h in (inner, inner[::-1]) if inner else ():
                if c.scalar(h, HALF):
                    candidates.append((x, b, var, c))
        for x, t, consumer, chain in candidates:
            trial = _Chain(g)
            trial.drop = list(chain.drop)
            if (
                isinstance(x, relax.Var)
                and rg.is_f32_tensor(x)
                and static_shape(x) == static_shape(var)
                and trial.one_plus_erf_of(t, consumer, x)
            ):
                return {**dict.fromkeys(trial.drop, False), var: lambda m, x=x: relax.op.nn.gelu(rg.subst(x, m))}
    return None


def fuse_gelu_erf(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ``0.5 * x * (1 + erf(x / sqrt(2)))`` as ``R.nn.gelu(x)`` (the module doc).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; each such float32 chain in its `main` (plain dataflow) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those chains as `gelu` (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _gelu)
