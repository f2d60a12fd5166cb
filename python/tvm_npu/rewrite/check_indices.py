"""Check the run-time indices of every ``relax.take`` (ONNX Gather, an embedding lookup) before it reads.

TVM's CPU kernel of `take` (mode "fast", what the ONNX frontend emits) reads `data[index]` without a
bound check: an index outside the table returns another tensor's bytes or ends the process with
SIGSEGV, where onnxruntime refuses it. An LLM library's raw `decode` entry did this on token id 1e6.
So each `take` whose indices are computed at run time (a graph input, or anything derived from one)
reads them through a small TIR kernel that copies them and asserts ``0 <= index < n`` first. A TIR
assert compiles into the library itself with the tvm-ffi error kind "NPUError" (no Python at run
time: the C++ host app gets the same error), so a bad index is a coded `NPUError` before the gather:

- an index computed from an input named `input_ids` alone (an LLM step's token ids, docs/llm.md):
  ERR_LLM_TOKEN, a token id outside the vocabulary (a negative id in [-n, 0) is ONNX's count from the
  end, as in onnxruntime; `tvm_npu.llm` refuses those in Python first);
- from an input named `position` or `position_ids` alone: ERR_POSITION_RANGE;
- any other gather: ERR_INVALID_ADDR, naming the input the index comes from.

The ONNX frontend has already turned a negative index in [-n, 0) into index + n, so the range the
kernel checks is [0, n) and the message says [-n, n). Constant indices are checked at compile time by
the take itself and are left alone, as is a take whose table has a symbolic extent along the axis.
Runs in `rewrite.run`, last, so the other rewrites see the frontend's graph; a second run recognises
its own checks and adds none.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import tirx as T

from ..ir import graph as rg
from .common import const_value, rebuild_main

CHECK_PREFIX = "tvm_npu_check_index"
TOKENS, POSITIONS = ("input_ids",), ("position", "position_ids")  # the step models' input names (docs/llm.md)


def _kernel(dtype: str, n: int, message: str):
    """A TIR function ``(a: dtype[m]) -> b: dtype[m]``, b = a, raising NPUError(`message`) on the first
    element outside [0, n)."""

    @T.prim_func(private=True, s_tir=True)
    def check(a: T.handle, b: T.handle):
        T.func_attr({"tirx.noalias": True})
        m = T.int64()
        A = T.match_buffer(a, (m,), dtype)
        B = T.match_buffer(b, (m,), dtype)
        for i in range(m):
            with T.sblock("check"):
                vi = T.axis.spatial(m, i)
                T.reads(A[vi])
                T.writes(B[vi])
                with T.Assert(
                    tvm.tirx.all(A[vi] >= T.Cast(dtype, 0), A[vi] < T.Cast(dtype, n)), message, error_kind="NPUError"
                ):
                    B[vi] = A[vi]

    return check


def _roots(g: rg.Graph, var) -> list:
    """The parameters of main that `var`'s value is computed from."""
    params, seen, todo, out = set(g.params), set(), [var], []
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in params:
            out.append(v)
        elif v in g.value:
            todo.extend(rg.free_vars(g.value[v]))
    return sorted(out, key=g.params.index)


def _message(g: rg.Graph, var, idx, n: int, axis: int) -> str:
    roots = _roots(g, idx)
    names = [r.name for r in roots]
    if len(names) == 1 and names[0] in TOKENS:
        return (
            f"ERR_LLM_TOKEN: a token id of input '{roots[0].name}' is outside the vocabulary of {n}: pass ids "
            f"in [0, {n}) (as an ONNX Gather, the graph also reads [-{n}, 0) counted back from the end)"
        )
    if len(names) == 1 and names[0] in POSITIONS:
        return (
            f"ERR_POSITION_RANGE: input '{roots[0].name}' selects row outside [0, {n}) of the table gathered by "
            f"'{var.name}': pass a position below {n}"
        )
    source = ", ".join(f"'{r.name}'" for r in roots) or "a run-time value"
    return (
        f"ERR_INVALID_ADDR: Gather '{var.name}' (from {source}): an index is outside the {n} rows of axis {axis} "
        f"of its table; pass indices in range ([-{n}, {n}) for an ONNX Gather, which counts negatives back)"
    )


def _is_check(g: rg.Graph, idx) -> bool:
    """`idx` is already read through one of this pass's kernels (reshaped back)."""
    value = g.value.get(idx)
    if rg.op_name(value) == "relax.reshape":
        value = g.value.get(value.args[0])
    if isinstance(value, relax.Call) and rg.op_name(value) == "relax.call_tir":
        return value.args[0].name_hint.startswith(CHECK_PREFIX)
    return False


def check_indices(mod: tvm.IRModule) -> tvm.IRModule:
    """Read the run-time indices of every `take` of `mod`'s `main` through a range check (see the
    module docstring). Returns `mod` itself when no take needs one."""
    g = rg.Graph(mod["main"])
    plan, kernels = {}, {}
    taken = {gv.name_hint for gv in mod.get_global_vars()}
    fresh = rg.fresh_names(taken)
    with rg.BLOCK_BUILDER_LOCK:
        kb = relax.BlockBuilder()  # gives each kernel's GlobalVar its function type, which call_tir needs
    for var, e in g.bindings:
        if rg.op_name(e) != "relax.take" or not isinstance(e.args[1], relax.Var):
            continue
        data, idx = e.args
        ty, ity = data.ty, idx.ty
        if not isinstance(ty, relax.TensorType) or not isinstance(ity, relax.TensorType) or ty.shape is None:
            continue
        axis = int(e.attrs.axis) if e.attrs.axis is not None else 0
        axis = axis + ty.ndim if axis < 0 else axis
        extent = ty.shape[axis] if ty.ndim > 0 and ity.shape is not None else None
        dtype = str(ity.dtype)
        if not isinstance(extent, tvm.tirx.IntImm) or dtype not in ("int32", "int64") or _is_check(g, idx):
            continue
        if const_value(g, idx, "index") is not None:
            continue
        kernel = _kernel(dtype, int(extent), _message(g, var, idx, int(extent), axis))
        with rg.BLOCK_BUILDER_LOCK:
            gv = kb.add_func(kernel, fresh(CHECK_PREFIX))
        kernels[gv] = kernel
        plan[var] = lambda m, e=e, gv=gv: _checked_take(e, gv, m)
    if not plan:
        return mod
    out = rebuild_main(mod, g, plan)
    return tvm.IRModule({**dict(out.functions.items()), **kernels}, attrs=out.attrs)


def _checked_take(e, gv, m):
    data, idx = rg.subst(e.args[0], m), rg.subst(e.args[1], m)
    ity = idx.ty
    size = 1
    for d in ity.shape:
        size = size * d
    flat = relax.op.reshape(idx, [size])
    checked = relax.call_tir(gv, [flat], relax.TensorType([size], ity.dtype))
    return relax.Call(e.op, [data, relax.op.reshape(checked, ity.shape)], e.attrs, e.ty_args)
