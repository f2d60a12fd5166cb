"""Helpers the rewrites of this folder share: reading a constant through `main`'s bindings, copying a
conv2d onto new operands, and the skeleton of a binding-by-binding rewrite.

Every rewrite here re-emits `main` through `ir.graph.rebuild`, so every binding it does not touch
keeps its name.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..contract.errors import NPUError
from ..ir import graph as rg
from ..ir.values import eval_const

CONV = "relax.nn.conv2d"


def const_value(g: rg.Graph, expr, what: str):
    """Numpy value of a constant expression of `g` (through its bindings), or None."""
    try:
        return eval_const(expr, "rewrite", what, env=g.value)
    except (NPUError, ValueError, TypeError):  # not a compile-time constant
        return None


def copy_conv2d(call, data, weight, padding=None):
    """A copy of conv2d `call` on new operands (and padding), every other attribute kept."""
    a = call.attrs
    kept = ("strides", "dilation", "groups", "data_layout", "kernel_layout", "out_layout", "out_dtype")
    padding = a.padding if padding is None else padding
    return relax.op.nn.conv2d(data, weight, padding=padding, **{k: getattr(a, k) for k in kept})


def rebuild_main(mod: tvm.IRModule, g: rg.Graph, plan: dict) -> tvm.IRModule:
    """Re-emit `main` with the bindings of `plan` ({var: callback(m) -> new value, or False to drop})."""

    def rewrite(bb, var, value, m, fresh):
        return plan[var](m) if callable(plan.get(var)) else plan.get(var)

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0]) if plan else mod


def rewrite_bindings(mod: tvm.IRModule, match) -> tvm.IRModule:
    """Rewrite `main` by the plans `match(g, var, value)` returns for its bindings, in order.

    `match` returns None where a binding does not match, else a rebuild plan ({var: callback(m) -> new
    value, or False to drop}, see `rebuild_main`) that may also name other bindings (the conv a pad
    feeds). Two matches must not plan the same binding; each pass says why its matches cannot.
    `mod` itself comes back when nothing matched.
    """
    g = rg.Graph(mod["main"])
    plan: dict = {}
    for var, value in g.bindings:
        plan.update(match(g, var, value) or {})
    return rebuild_main(mod, g, plan)


class Chain:
    """Reads one candidate chain of a written-out function back from its last binding, collecting the
    bindings it consumes (`drop`); the fusions of rewrite/ subclass it with their function's steps."""

    what = "constant"  # the constants' name in eval_const's messages

    def __init__(self, g: rg.Graph):
        self.g, self.drop = g, []

    def call(self, expr, op: str, consumer):
        """The args of `expr` when it is a var bound to a call of `op` that only `consumer` reads."""
        value = self.g.value.get(expr) if isinstance(expr, relax.Var) else None
        if rg.op_name(value) != op or self.g.uses.get(expr) != [consumer]:
            return None
        self.drop.append(expr)
        return list(value.args)

    def scalar(self, expr, want) -> bool:
        """`expr` is a one-element float32 constant equal to `want`."""
        v = const_value(self.g, expr, self.what)
        return v is not None and v.size == 1 and v.dtype == np.float32 and v.reshape(()) == want

    def split(self, args, is_first):
        """(a, b) of a commutative call's args with is_first(a), trying both orders; or None."""
        for a, b in (args, args[::-1]) if args else ():
            if is_first(a):
                return a, b
        return None
