"""Relax graph helpers for quantization and the accuracy tool: read a function's bindings, re-emit them
with QDQ pairs inserted, and build "probe" modules whose main returns chosen intermediate tensors.

Re-emitting with the BlockBuilder (rather than mutating) keeps every var's name, so a tensor of the
float model and its dequantized counterpart in the QDQ model can be found again by name.
"""

from __future__ import annotations

import threading

import numpy as np
import tvm
from tvm import relax

# The one lock of tvm_npu, for the one part of TVM that is not thread-safe: relax.BlockBuilder keeps the
# builders inside a function scope (`with bb.function(...)`) on a single class-level stack per process,
# and a builder leaving its scope asserts that it is on top. Two threads in function scopes at once
# fail that assertion or emit into each other's function. Every function scope tvm_npu opens (`rebuild`)
# or has TVM open (the ONNX import, frontend/onnx.py) holds this lock, and nothing else does: the rest of
# a build (TVM's C++ passes, the planner) runs in parallel. Reentrant, so an ONNX converter may rebuild.
BLOCK_BUILDER_LOCK = threading.RLock()


def region_calls(func) -> dict:
    """{external symbol: call sites in `func`}: the NPU regions a built function calls, each as often as
    it does. Regions the partitioner found identical (a transformer's attention blocks) are one
    function, so one symbol, called once per block: costs summed per region must count each call."""
    counts: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.args and isinstance(expr.args[0], relax.ExternFunc):
            symbol = str(expr.args[0].global_symbol)
            counts[symbol] = counts.get(symbol, 0) + 1

    relax.analysis.post_order_visit(func, visit)
    return counts


def free_vars(expr) -> list:
    """The vars an (normalized) binding value reads, in order, with repeats."""
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for f in expr.fields for v in free_vars(f)]
    if isinstance(expr, relax.Call):
        return [v for a in expr.args for v in free_vars(a)]
    if isinstance(expr, relax.TupleGetItem):
        return free_vars(expr.tuple_value)
    return []


def subst(expr, m: dict):
    """`expr` with its vars replaced through `m` (bindings are normalized: args are leaves or tuples)."""
    if isinstance(expr, relax.Var):
        return m.get(expr, expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([subst(f, m) for f in expr.fields])
    if isinstance(expr, relax.Call):
        return relax.Call(expr.op, [subst(a, m) for a in expr.args], expr.attrs, expr.ty_args)
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(subst(expr.tuple_value, m), expr.index)
    return expr


def op_name(expr) -> str:
    """ "relax.nn.conv2d" for a call of that op; "" for anything else."""
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def is_f32_tensor(expr) -> bool:
    ty = expr.ty
    return isinstance(ty, relax.TensorType) and str(ty.dtype) == "float32" and ty.ndim >= 1


class Graph:
    """The bindings of a function's dataflow blocks, with who uses each var."""

    def __init__(self, func: relax.Function):
        self.func, self.params, self.bindings = func, list(func.params), []
        for block in func.body.blocks:
            if not isinstance(block, relax.DataflowBlock):
                raise ValueError("quantize: `main` must consist of dataflow blocks (as frontends emit)")
            for b in block.bindings:
                if not isinstance(b, relax.VarBinding):
                    raise ValueError(f"quantize: unsupported binding {type(b).__name__} of {b.var.name}")
                self.bindings.append((b.var, b.value))
        self.value = dict(self.bindings)
        self.uses: dict = {}
        for v, e in self.bindings:
            for u in free_vars(e):
                self.uses.setdefault(u, []).append(v)
        self.outputs = free_vars(func.body.body)
        for u in self.outputs:
            self.uses.setdefault(u, []).append(None)  # None: the function's result

    def sole_use(self, var):
        """The one binding that uses `var` (not the function's result), or None."""
        uses = self.uses.get(var, [])
        return uses[0] if len(uses) == 1 and uses[0] is not None else None

    def ordered(self, vars_) -> list:
        """`vars_` in definition order (params, then bindings): a topological order."""
        vars_ = set(vars_)
        return [v for v in self.params + [b for b, _ in self.bindings] if v in vars_]

    def find(self, names) -> list:
        """The vars (params or bindings) called `names`; each name must be unique in the function."""
        allv = self.params + [v for v, _ in self.bindings]
        out = []
        for n in names:
            hits = [v for v in allv if v.name == n]
            if len(hits) != 1:
                raise KeyError(f"{len(hits)} vars named {n!r} in main (expected exactly one)")
            out.append(hits[0])
        return out


def fresh_names(taken: set):
    """A function base -> a name not in `taken` (base, base1, base2, ...), which it then takes."""

    def fresh(base):
        name, i = base, 1
        while name in taken:
            name, i = f"{base}{i}", i + 1
        taken.add(name)
        return name

    return fresh


def rebuild(g: Graph, qparams=None, rewrite=None, probes=None, narrow=None):
    """Re-emit `g`'s function with a QDQ pair after each var of `qparams` ({var: (scale, zp)}, or
    (scale, zp, "int16") for a 16-bit tensor).

    `narrow` ({var: ((scale, zp), readers)}) gives a 16-bit var a second, int8 QDQ pair read by the
    bindings in `readers` (ops that take int8 only); every other use reads the 16-bit one.

    ``rewrite(bb, var, value, m, fresh)`` may return a replacement value for a binding (emitting helpers
    through ``bb``, names from ``fresh``), ``False`` to drop it, or None to keep it. With `probes`
    (a list of vars) main returns their tuple instead of its result.
    Returns (function, {var: name of its dequantized var}).
    """
    qparams, narrow = qparams or {}, narrow or {}
    narrowed = {}  # reader binding -> {var: its int8 dequantized var}
    fresh = fresh_names({v.name for v in g.params} | {v.name for v, _ in g.bindings})

    outs = set() if probes is not None else set(g.outputs)
    bb, dq_names = relax.BlockBuilder(), {}
    params = [relax.Var(p.name, p.ty) for p in g.params]
    m = dict(zip(g.params, params))

    def emit(var, expr):
        if var not in m:  # params are bound already
            last = var in outs and var not in qparams
            m[var] = (bb.emit_output if last else bb.emit)(expr, name_hint=var.name)
        if var in qparams:
            s, z, *wide = qparams[var]
            m[var] = qdq(m[var], s, z, wide[0] if wide else "int8", var, var in outs)
            dq_names[var] = m[var].name
            if var in narrow:
                (s8, z8), readers = narrow[var]
                dq8 = qdq(m[var], s8, z8, "int8", var, False)
                for r in readers:
                    narrowed.setdefault(r, {})[var] = dq8

    def qdq(x, s, z, dtype, var, last):
        sc, zc = relax.const(s, "float32"), relax.const(z, dtype)
        axis = 1 if var.ty.ndim >= 2 else 0  # the frontend's axis=1 (ignored for per-tensor scales)
        q = bb.emit(relax.op.quantize(x, sc, zc, axis=axis, out_dtype=dtype), fresh(f"{var.name}_q"))
        dq = relax.op.dequantize(q, sc, zc, axis=axis, out_dtype="float32")
        return (bb.emit_output if last else bb.emit)(dq, name_hint=fresh(f"{var.name}_dq"))

    with BLOCK_BUILDER_LOCK, bb.function("main", params, attrs=dict(g.func.attrs) if g.func.attrs else None):
        with bb.dataflow():
            for p in g.params:
                if p in qparams:
                    emit(p, None)
            for v, e in g.bindings:
                new = rewrite(bb, v, e, m, fresh) if rewrite is not None else None
                if new is not False:
                    emit(v, subst(e, {**m, **narrowed.get(v, {})}) if new is None else new)
            if probes is not None:
                result = bb.emit_output(relax.Tuple([m[p] for p in probes]))
        bb.emit_func_output(result if probes is not None else subst(g.func.body.body, m))
    return bb.get()["main"], dq_names


def with_main(mod: tvm.IRModule, func) -> tvm.IRModule:
    """A copy of `mod` whose main is `func` (other functions, e.g. call_tir kernels, kept)."""
    return tvm.IRModule(
        {gv: (func if gv.name_hint == "main" else f) for gv, f in mod.functions.items()}, attrs=mod.attrs
    )


def probe_module(mod: tvm.IRModule, names) -> tvm.IRModule:
    """`mod` whose main returns the tuple of the tensors called `names` (params or bindings)."""
    g = Graph(mod["main"])
    return with_main(mod, rebuild(g, probes=g.find(names))[0])


def as_args(batch, params) -> list:
    """A batch (tuple/list of arrays, dict by input name, or one array) -> VM arguments."""
    if isinstance(batch, dict):
        missing = [p.name for p in params if p.name not in batch]
        if missing:
            _bad_batch(f"batch has no value for inputs {missing}")
        batch = [batch[p.name] for p in params]
    elif not isinstance(batch, (tuple, list)):
        batch = [batch]
    if len(batch) != len(params):
        _bad_batch(f"batch has {len(batch)} arrays; main takes {len(params)}")
    return [_arg(a, p) for a, p in zip(batch, params)]


def _bad_batch(message: str):
    from ..contract.errors import NPUError  # pylint: disable=import-outside-toplevel

    raise NPUError("ERR_SHAPE_MISMATCH", message)


def _arg(value, param) -> tvm.runtime.Tensor:
    """One calibration array as the VM argument of `param`: its shape checked against the static dims of
    the parameter (TVM's own check says "Check failed ... match_cast"), its values finite (a NaN or inf
    range gives every scale after it NaN)."""
    arr = np.ascontiguousarray(value, dtype=str(param.ty.dtype))
    shape = getattr(param.ty, "shape", None)
    values = getattr(shape, "values", None)  # None: a rank TVM does not know, not checked here
    dims = [getattr(d, "value", None) for d in values or []]  # None: a symbolic size
    if values is not None and (arr.ndim != len(dims) or any(d is not None and d != n for d, n in zip(dims, arr.shape))):
        want = [d if d is not None else "?" for d in dims]
        _bad_batch(f"calibration input '{param.name}' has shape {list(arr.shape)}, the model takes {want}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        _bad_batch(f"calibration input '{param.name}' holds NaN or inf: give batches of real inputs")
    return tvm.runtime.tensor(arr)


def run_probe(vm: relax.VirtualMachine, params, batch) -> list:
    """Run a probe module's VM (see `probe_module`) on one batch; numpy arrays in probe order."""
    return [t.numpy() for t in vm["main"](*as_args(batch, params))]


def brief(name: str, keep: int = 60) -> str:
    """`name` for a message: TVM names a merged region after every op in it, over a thousand characters
    for a deep network, which buried the message after it; a long name keeps its start and its length."""
    return name if len(name) <= keep + 24 else f"{name[:keep]}...({len(name)} characters)"
