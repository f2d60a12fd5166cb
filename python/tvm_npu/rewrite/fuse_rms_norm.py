"""Rewrite the written-out RMSNorm, ``gamma * (x * rsqrt(mean(x^2, last axis) + eps))``, as one
``relax.nn.rms_norm(x, gamma, axes=-1, epsilon=eps)``.

ONNX has no RMSNormalization before opset 23, so torch exports Hugging Face Llama's `LlamaRMSNorm` op by
op — Pow, ReduceMean, Add, Sqrt, Div (or Reciprocal), Mul, Mul — and TVM imports it so: six CPU ops
between the NPU's dense layers, each splitting the NPU region. As `rms_norm` it is one NORM command
(docs/npu.md section 2), the op RMSNormalization imports as. Only the exact function is fused: the mean
over the last axis alone with keepdims, eps a positive one-element float32 constant, gamma a float32
constant of the last axis's length, and every intermediate read only by the next step; anything else
is left as it is. Runs in `rewrite.run`, before pattern matching.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import const_value, rewrite_bindings


class _Chain:
    """Reads one candidate chain back from its final multiply, collecting the bindings it consumes."""

    def __init__(self, g: rg.Graph):
        self.g, self.drop = g, []

    def call(self, expr, ops: tuple, consumer):
        """(op name, args) of `expr` when it is a var bound to a call of one of `ops` that only `consumer`
        reads, else None."""
        value = self.g.value.get(expr) if isinstance(expr, relax.Var) else None
        if rg.op_name(value) not in ops or self.g.uses.get(expr) != [consumer]:
            return None
        self.drop.append(expr)
        return rg.op_name(value), list(value.args)

    def scalar(self, expr) -> float | None:
        v = const_value(self.g, expr, "rms_norm constant")
        ok = v is not None and v.size == 1 and v.dtype == np.float32 and np.isfinite(v).all()
        return float(v.reshape(())) if ok else None

    def inverse_rms(self, expr, consumer, x) -> float | None:
        """eps when `expr` is 1 / sqrt(mean(x^2) + eps) (as divide(1, sqrt(.)) or rsqrt(.)), else None."""
        got = self.call(expr, ("relax.divide", "relax.rsqrt"), consumer)
        if got is None:
            return None
        op, args = got
        if op == "relax.rsqrt":
            return self.mean_square_plus_eps(args[0], expr, x)
        if self.scalar(args[0]) != 1.0:
            return None
        sq = self.call(args[1], ("relax.sqrt",), expr)
        return self.mean_square_plus_eps(sq[1][0], args[1], x) if sq else None

    def mean_square_plus_eps(self, expr, consumer, x) -> float | None:
        """eps when `expr` is mean(x^2, last axis, keepdims) + eps (either order), eps > 0, else None."""
        got = self.call(expr, ("relax.add",), consumer)
        for m, e in (got[1], got[1][::-1]) if got else ():
            eps = self.scalar(e)
            mean = self.call(m, ("relax.mean",), expr) if eps is not None and eps > 0 else None
            if mean is not None:
                return eps if self.mean_of_square(m, mean[1][0], x) else None
        return None

    def mean_of_square(self, m, sq, x) -> bool:
        attrs = self.g.value[m].attrs
        rank = len(static_shape(x) or ())
        axes = [int(a) % rank for a in attrs.axis] if attrs.axis is not None and rank else []
        if axes != [rank - 1] or not bool(attrs.keepdims):
            return False
        got = self.call(sq, ("relax.power", "relax.multiply"), m)
        if got is None:
            return False
        op, (a, b) = got
        return a.same_as(x) and (b.same_as(x) if op == "relax.multiply" else self.scalar(b) == 2.0)


def _rms_norm(g: rg.Graph, var, e) -> dict | None:
    """The plan writing the final multiply `var` (gamma times the normalized x) as rms_norm(x, gamma),
    dropping the chain's other bindings (each read only by the next one, so no two plans name one
    binding), or None."""
    shape = static_shape(var)
    if rg.op_name(e) != "relax.multiply" or not rg.is_f32_tensor(var) or not shape:
        return None
    for w, n in (e.args, e.args[::-1]):
        gamma = const_value(g, w, "rms_norm weight")
        if gamma is None or gamma.dtype != np.float32 or gamma.shape != (shape[-1],):
            continue
        chain = _Chain(g)
        got = chain.call(n, ("relax.multiply",), var)
        for x, r in (got[1], got[1][::-1]) if got else ():
            if not (isinstance(x, relax.Var) and rg.is_f32_tensor(x) and static_shape(x) == shape):
                continue
            trial = _Chain(g)
            trial.drop = list(chain.drop)
            eps = trial.inverse_rms(r, n, x)
            if eps is not None:
                return {**dict.fromkeys(trial.drop, False), var: _fused(x, relax.const(gamma), eps)}
    return None


def _fused(x, weight, eps: float):
    return lambda m: relax.op.nn.rms_norm(rg.subst(x, m), weight, axes=-1, epsilon=eps)


def fuse_rms_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ``gamma * (x * rsqrt(mean(x^2, axis=-1, keepdims) + eps))`` as ``R.nn.rms_norm(x, gamma)``.

    Matches the final float32 `multiply` of the written-out RMSNorm as torch exports it (x^2 as
    ``power(x, 2)`` or ``x * x``; the inverse root as ``1 / sqrt(.)`` or ``rsqrt(.)``; each commutative
    op with its operands in either order) when gamma is a float32 constant [d] of the last axis, eps a
    positive one-element float32 constant, and every intermediate binding is read only by the next step;
    those bindings are dropped. Returns `mod` with each such chain of its `main` (plain dataflow, as
    frontends emit) as `rms_norm`, or `mod` itself when it has none.
    """
    return rewrite_bindings(mod, _rms_norm)
