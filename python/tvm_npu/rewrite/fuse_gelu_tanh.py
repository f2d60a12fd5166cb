"""Rewrite the decomposed tanh GELU, ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))``, as one
``relax.nn.gelu_tanh(x)``.

torch exports Hugging Face GPT-2's activation (`NewGELUActivation`) op by op — Pow, Mul, Add, Mul, Tanh,
Add, Mul, Mul — and TVM imports it so: eight CPU ops or eight NPU commands, each rounding to fp16. As
`gelu_tanh` it is one UNARY (func 6, docs/npu.md section 2), the same op ONNX Gelu approximate="tanh"
imports as. Only the exact function is fused: every constant must equal its value (0.5, 1, 3,
0.044715, sqrt(2/pi)) as float32, and every intermediate must have no other use; anything else is left as
it is. Runs in `rewrite.run`, before pattern matching.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import Chain, rewrite_bindings

# The constants of the decomposed form, compared as float32 (what an ONNX export stores).
HALF, ONE, THREE, CUBIC, SQRT_2_PI = (np.float32(v) for v in (0.5, 1.0, 3.0, 0.044715, math.sqrt(2 / math.pi)))


class _Chain(Chain):
    """The tanh GELU's steps (common.Chain reads calls and constants)."""

    what = "gelu_tanh constant"

    def one_plus_tanh(self, expr, consumer):
        """(z, the tanh binding) when `expr` is 1 + tanh(z) (either order), else None."""
        args = self.call(expr, "relax.add", consumer)
        pair = self.split(args, lambda a: self.scalar(a, ONE))
        t = self.call(pair[1], "relax.tanh", expr) if pair else None
        return (t[0], pair[1]) if t else None

    def cube_of(self, expr, consumer, x) -> bool:
        """`expr` is x^3: power(x, 3), x * (x * x) or (x * x) * x."""
        value = self.g.value.get(expr) if isinstance(expr, relax.Var) else None
        if rg.op_name(value) == "relax.power":
            args = self.call(expr, "relax.power", consumer)
            return bool(args) and args[0].same_as(x) and self.scalar(args[1], THREE)
        args = self.call(expr, "relax.multiply", consumer)
        pair = self.split(args, lambda a: a.same_as(x))
        sq = self.call(pair[1], "relax.multiply", expr) if pair else None
        return bool(sq) and sq[0].same_as(x) and sq[1].same_as(x)

    def inner_is(self, z, consumer, x) -> bool:
        """`z` is sqrt(2/pi) * (x + 0.044715 * x^3), each product and the sum in either order."""
        pair = self.split(self.call(z, "relax.multiply", consumer), lambda a: self.scalar(a, SQRT_2_PI))
        args = self.call(pair[1], "relax.add", z) if pair else None
        pair2 = self.split(args, lambda a: a.same_as(x))
        w = self.call(pair2[1], "relax.multiply", pair[1]) if pair2 else None
        pair3 = self.split(w, lambda a: self.scalar(a, CUBIC))
        return bool(pair3) and self.cube_of(pair3[1], pair2[1], x)


def _candidates(g: rg.Graph, var, args) -> list:
    """(x, the 1 + tanh term, the binding that reads that term, bindings consumed so far) for each way
    the final multiply `var` can be 0.5 * (x * t) or (x * 0.5) * t, its operands in any order."""
    out = []
    for a, b in (args, args[::-1]):
        c = _Chain(g)
        if c.scalar(a, HALF):  # 0.5 * (x * t)
            inner = c.call(b, "relax.multiply", var)
            out += [(x, t, b, [b]) for x, t in (inner, inner[::-1])] if inner else []
            continue
        pair = c.split(c.call(a, "relax.multiply", var), lambda v, c=c: c.scalar(v, HALF))  # (x * 0.5) * t
        out += [(pair[1], b, var, [a])] if pair else []
    return out


def _gelu_tanh(g: rg.Graph, var, e) -> dict | None:
    """The plan writing the final multiply `var` as gelu_tanh(x), dropping the chain's other bindings
    (each read only by the next one, so no two plans name one binding), or None."""
    if rg.op_name(e) != "relax.multiply" or not rg.is_f32_tensor(var):
        return None
    for x, t, t_consumer, consumed in _candidates(g, var, list(e.args)):
        chain = _Chain(g)
        chain.drop = list(consumed)
        z_tanh = chain.one_plus_tanh(t, t_consumer)
        if (
            isinstance(x, relax.Var)
            and rg.is_f32_tensor(x)
            and static_shape(x) == static_shape(var)  # no constant's broadcast widened the result
            and z_tanh is not None
            and chain.inner_is(*z_tanh, x)
        ):
            return {**dict.fromkeys(chain.drop, False), var: lambda m, x=x: relax.op.nn.gelu_tanh(rg.subst(x, m))}
    return None


def fuse_gelu_tanh(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` as ``R.nn.gelu_tanh(x)``.

    Matches the final float32 `multiply` of the decomposed tanh GELU as torch exports it (x^3 as
    ``power(x, 3)`` or two multiplies; each commutative op with its operands in either order; the 0.5
    applied to x or to the product) when every constant is a one-element float32 equal to its value
    and every intermediate binding is read only by the next step; those bindings are dropped.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; each such chain in its `main` (plain dataflow, as frontends emit) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those chains as `gelu_tanh` (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _gelu_tanh)
