"""The block an AWQ scale is measured on (awq.py): the part of a model's graph from an input that several
dense layers share to the output of the first dense layer all of theirs reach, compiled once on the host
(TVM llvm) with those layers' weights as parameters, and run for each candidate scale on the calibration
batches.

The block's other inputs (what it reads that does not depend on the shared input and is not a constant:
a model input, rotary tables computed from the position, the cache, the mask) are the float model's
values on each batch, probed in the calibration run; constant subexpressions are recomputed inside.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg


def block_output(g: rg.Graph, members: list, dense: set):
    """The var of the first dense layer (binding order; `dense` the model's dense layer vars, `members`
    excluded) that the output of every one of `members` (weight_only.DenseWeight) reaches through no other
    dense layer, or None."""
    reach = []
    for d in members:
        seen, stack = set(), [d.var]
        while stack:
            for u in g.uses.get(stack.pop(), []):
                if u is not None and u not in seen:
                    seen.add(u)
                    if u not in dense:
                        stack.append(u)
        reach.append(seen)
    own = {d.var for d in members}
    common = [v for v in set.intersection(*reach) if v in dense and v not in own]
    ordered = g.ordered(common)
    return ordered[0] if ordered else None


def _depending(g: rg.Graph, roots: list) -> set:
    """The vars whose value depends on any of `roots` (roots included)."""
    out = set(roots)
    for v, e in g.bindings:
        if any(u in out for u in rg.free_vars(e)):
            out.add(v)
    return out


class Block:
    """The graph from `members`' shared input to `out` (a var) as a function ``main(x, w_1.., inputs..)``,
    the members' weights [K, N_i] as parameters. `inputs`: the vars whose float values each batch gives."""

    def __init__(self, mod: tvm.IRModule, g: rg.Graph, members: list, out):
        x, self.out = members[0].x, out
        own = {d.var: i for i, d in enumerate(members)}
        on_x, on_params = _depending(g, [x]), _depending(g, list(g.params))
        needed, self.inputs, stack = set(), [], [out]
        while stack:
            v = stack.pop()
            if v in needed or not isinstance(v, relax.Var):
                continue
            needed.add(v)
            if v.same_as(x):
                continue
            if v in on_params and v not in on_x:  # computed from the model's inputs, not from x
                self.inputs.append(v)
                continue
            e = g.value[v]
            stack.extend([e.args[0]] if v in own else rg.free_vars(e))
        self.inputs = g.ordered(self.inputs)
        px = relax.Var("x", x.ty)
        pw = [
            relax.Var(f"w{i}", relax.TensorType([int(n) for n in d.weight.shape], "float32"))
            for i, d in enumerate(members)
        ]
        pi = [relax.Var(v.name, v.ty) for v in self.inputs]
        m = {x: px, **dict(zip(self.inputs, pi))}
        bb = relax.BlockBuilder()
        with rg.BLOCK_BUILDER_LOCK, bb.function("main", [px, *pw, *pi]):
            with bb.dataflow():
                for v, e in g.bindings:
                    if v not in needed or v in m:
                        continue
                    if v in own:
                        e = relax.Call(e.op, [e.args[0], pw[own[v]]], e.attrs, e.ty_args)
                    m[v] = (bb.emit_output if v.same_as(out) else bb.emit)(rg.subst(e, m), name_hint=v.name)
            bb.emit_func_output(m[out])
        ex = tvm.compile(rg.with_main(mod, bb.get()["main"]), target="llvm")
        self.vm = relax.VirtualMachine(ex, tvm.cpu())
        self.weights = [d.weight for d in members]
        self.batches, self.ref = [], []

    def feed(self, x: np.ndarray, inputs: list) -> None:
        """One calibration batch: the shared input's value and `inputs`' (the float model's)."""
        args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in [x, *inputs]]
        self.batches.append(args)
        self.ref.append(self._run(self.weights, args))

    def _run(self, weights: list, args: list) -> np.ndarray:
        ws = [tvm.runtime.tensor(np.ascontiguousarray(w, np.float32)) for w in weights]
        return self.vm["main"](args[0], *ws, *args[1:]).numpy().astype(np.float64)

    def loss(self, quantize):
        """``loss(s)``: the block output's mean squared error over the fed batches with every member's
        weight quantized as ``quantize(w [N, K]) -> dequantized w`` after the scale, ``Q(W s) / s``."""

        def run(s):
            weights = [quantize((w * s[:, None]).T.astype(np.float32)).T / s[:, None] for w in self.weights]
            err = sum(float(np.sum((self._run(weights, b) - r) ** 2)) for b, r in zip(self.batches, self.ref))
            return err / sum(r.size for r in self.ref)

        return run
