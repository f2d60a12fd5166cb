"""Split `main` at the inputs that do not change between its calls: `prompt(invariant inputs) -> the
values that depend on nothing else` and `main(other inputs, those values)`.

A function called many times with some inputs held fixed recomputes, at every call, all that depends
on them alone: a diffusion UNet's cross-attention K and V of the prompt's embedding (the `to_k` /
`to_v` dense layers of every transformer block, and the K scale), once per denoising step for one
prompt per image. `split_invariant(mod, ["encoder_hidden_states"])`
moves that work into a function of its own, called once, whose results the caller keeps (as the KV
cache of an LLM is kept) and hands to each call of the new `main`.

What moves: every binding whose inputs are the invariant inputs and constants, and that reads an
invariant input at all (a binding on constants alone is constant work; it stays where it is read). Of
those, the ones `main` still reads (the frontier) become `prompt`'s results and `main`'s parameters.
A frontier value whose whole computation from the invariant inputs is reshapes (the same bytes in
another shape: nothing computed) is not worth a tensor of the interface: its reshapes stay in `main`,
which then still takes that invariant input. Likewise the layout ops (reshapes, permutes) that end
a hoisted chain stay in `main`, on the computed value before them: an attention's head split is a
view on the NPU (docs/npu.md, "Head slices"), while its [B*H, S, D] result as an interface tensor
would cost one DDR burst per D-element row at every step. Nor is a value of tuple type (a VM function
would take it as an array, which the NPU flow's regions do not): its computation stays in `main` too. Everything
else is moved as it is, the same ops on the same operands in the same order, so the two functions
together compute `main`'s result bit for bit (tests/diffusion/test_prompt_hoist.py on TVM's llvm
build).
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..contract.errors import NPUError
from .graph import BLOCK_BUILDER_LOCK, fresh_names, op_name, subst

# Ops that give the same bytes another shape: a chain of them computes nothing worth hoisting.
RESHAPES = frozenset({"relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"})
# ... and ops that only move elements: at the end of a hoisted chain these stay in main (module doc).
LAYOUT = RESHAPES | {"relax.permute_dims"}
# Binding values the split re-emits as they are (their operands substituted); anything else (control
# flow, closures) is refused rather than guessed at. (TVM 0.27's prim values are Constants.)
_VALUES = (relax.Call, relax.Tuple, relax.TupleGetItem, relax.Var, tvm.ir.Constant, relax.ShapeExpr, tvm.ir.StringImm)


def _bindings(func: relax.Function) -> list:
    """[(var, value)] of `func`'s blocks, refused with ERR_OP_NOT_SUPPORTED where the split does not
    implement a form exactly."""
    out = []
    for block in func.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                "split_invariant: main has a block outside dataflow (impure or control flow); only plain "
                "dataflow is split: build the model unsplit",
            )
        for b in block.bindings:
            ok = isinstance(b, relax.VarBinding) and isinstance(b.value, _VALUES)
            if ok and isinstance(b.value, relax.Call):
                ok = isinstance(b.value.op, tvm.ir.Op | relax.ExternFunc | tvm.ir.GlobalVar)
            if not ok:
                raise NPUError(
                    "ERR_OP_NOT_SUPPORTED",
                    f"split_invariant: binding {b.var.name} is a {type(b).__name__} of {type(b.value).__name__}; "
                    "only plain dataflow (calls, tuples, constants) is split: build the model unsplit",
                )
            out.append((b.var, b.value))
    return out


def _reads(expr) -> list:
    return list(relax.analysis.free_vars(expr))


def split_invariant(mod: tvm.IRModule, invariant, name: str = "prompt") -> tuple[tvm.IRModule, list]:
    """Split `mod`'s main at the inputs named `invariant` (the module doc).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose main is plain dataflow (as the frontends emit).
    invariant : list of str
        The names of main's inputs that stay the same across calls.
    name : str
        The name of the new function of the invariant inputs.

    Returns
    -------
    (tvm.IRModule, list of str)
        The module with `name(invariant inputs, in main's order) -> tuple of the hoisted values` and
        `main(main's other inputs, the invariant inputs it still reads, then the hoisted values in the
        order of that tuple)`, its other functions kept; and the names of main's hoisted parameters. When
        nothing is worth hoisting, `name` returns an empty tuple and main is unchanged in meaning.

    Raises
    ------
    NPUError
        ERR_INVALID_CONFIG for a name that is not an input of main (or a function `name` that exists
        already); ERR_OP_NOT_SUPPORTED for a main that is not plain dataflow.
    """
    func = mod["main"]
    params = list(func.params)
    names = [p.name for p in params]
    invariant = list(invariant)
    missing = [n for n in invariant if n not in names]
    if missing or not invariant:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"split_invariant: invariant inputs {missing or invariant} are not inputs of main; its inputs are {names}",
        )
    if any(gv.name_hint == name for gv in mod.functions):
        raise NPUError("ERR_INVALID_CONFIG", f"split_invariant: the module has a function {name!r} already")
    bindings = _bindings(func)
    value = dict(bindings)
    inv = {p: p.name in invariant for p in params}  # depends on invariant inputs and constants only
    touches = {p: inv[p] for p in params}  # ... and reads an invariant input
    worth = dict.fromkeys(params, False)  # ... through something other than reshapes
    for var, val in bindings:
        reads = _reads(val)
        inv[var] = all(inv[r] for r in reads)
        touches[var] = inv[var] and any(touches[r] for r in reads)
        computes = isinstance(val, relax.Call) and op_name(val) not in RESHAPES  # tuples, aliases: no
        worth[var] = touches[var] and (computes or any(worth[r] for r in reads))
    # Layout ops (reshapes, permutes) at the end of a hoisted chain stay in main: the interface
    # tensor is the computed value before them (an attention's K before its head split).
    users = {}
    for var, val in bindings:
        for r in _reads(val):
            users.setdefault(r, []).append(var)
    for var, val in reversed(bindings):  # users first: a chain of them ends in main together
        layout = isinstance(val, relax.Call) and op_name(val) in LAYOUT
        if worth[var] and layout and not any(worth[u] for u in users.get(var, [])):
            worth[var] = inv[var] = False
    # The frontier: hoisted values main reads (a binding of the rest or main's result).
    used_by_rest = set(_reads(func.body.body))
    for var, val in bindings:
        if not inv[var]:
            used_by_rest.update(_reads(val))
    hoisted = [v for v, _ in bindings if worth[v] and v in used_by_rest and isinstance(v.ty, relax.TensorType)]
    hoisted_set = set(hoisted)

    def closure(roots, stop) -> set:
        seen, todo = set(), list(roots)
        while todo:
            v = todo.pop()
            if v in seen or v in stop:
                continue
            seen.add(v)
            if v in value:
                todo.extend(_reads(value[v]))
        return seen

    in_prompt = closure(hoisted, set())
    main_reads = set(_reads(func.body.body))
    for var, val in bindings:
        if not inv[var]:
            main_reads.update(_reads(val))
    in_main = {v for v, _ in bindings if not inv[v]} | closure(main_reads - hoisted_set, hoisted_set)

    fresh = fresh_names(set(names) | {v.name for v, _ in bindings})
    inv_params = [p for p in params if inv[p]]
    main_params = [p for p in params if not inv[p] or p in in_main]
    with BLOCK_BUILDER_LOCK:
        bb = relax.BlockBuilder()
        # prompt: the invariant inputs -> the hoisted values
        p_params = [relax.Var(p.name, p.ty) for p in inv_params]
        m = dict(zip(inv_params, p_params))
        with bb.function(name, p_params, attrs={"num_input": len(p_params)}, private=False):
            with bb.dataflow():
                for var, val in bindings:
                    if var in in_prompt:
                        m[var] = bb.emit(subst(val, m), name_hint=var.name)
                out = bb.emit_output(relax.Tuple([m[v] for v in hoisted]))
            bb.emit_func_output(out)
        # main: its other inputs and the hoisted values -> its result
        new_params = [relax.Var(p.name, p.ty) for p in main_params]
        new_params += [relax.Var(fresh(f"{name}_{v.name}"), v.ty) for v in hoisted]
        m = dict(zip(main_params + hoisted, new_params))
        attrs = dict(func.attrs) if func.attrs is not None else {}
        if "num_input" in attrs:
            attrs["num_input"] = len(new_params)
        result_vars = set(_reads(func.body.body))
        with bb.function("main", new_params, attrs=attrs or None, private=False):
            with bb.dataflow():
                for var, val in bindings:
                    if var in in_main:
                        emit = bb.emit_output if var in result_vars else bb.emit
                        m[var] = emit(subst(val, m), name_hint=var.name)
            bb.emit_func_output(subst(func.body.body, m))
        built = bb.get()
    functions = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
    functions.update(dict(built.functions.items()))
    out_mod = tvm.IRModule(functions, attrs=mod.attrs)
    return out_mod, [p.name for p in new_params[len(main_params) :]]


def entry(mod: tvm.IRModule, name: str) -> tvm.IRModule:
    """`mod` with its Relax function `name` as main and no other Relax function (its kernels, TIR
    PrimFuncs, kept): an entry the NPU flow builds on its own (link.build_entries)."""
    func = mod[name].with_attr("global_symbol", "main")
    functions = {gv: f for gv, f in mod.functions.items() if not isinstance(f, relax.Function)}
    return tvm.IRModule({**functions, tvm.ir.GlobalVar("main"): func}, attrs=mod.attrs)
