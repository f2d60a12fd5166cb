"""Stage 3c — un-partition: NPU regions the backend could not compile go back to the CPU.

The backend compiles every region before TVM's RunCodegen (backend/fallback.py). When one fails
unexpectedly (a compiler bug, not a coded refusal the user must act on), the build does not: that
region's composite calls are inlined back into `main`, op by op, exactly as the ops were before the
patterns matched, and every op is recorded with NPU_E_INTERNAL and the error's first line. The other
regions stay on the NPU. Unlike regions.apply this works on any `main` (match_cast bindings, several
blocks), since it rewrites the calls where they are instead of rebuilding the dataflow graph.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..ir.graph import fresh_names
from .internal import constraint_internal_error
from .regions import inline_region


def unpartition(mod: tvm.IRModule, failed: dict, rejections: list) -> tvm.IRModule:
    """`mod` with the NPU regions in `failed` inlined back into `main` and removed.

    Parameters
    ----------
    mod : tvm.IRModule
        A partitioned module (partition_for_npu), before RunCodegen.
    failed : dict
        GlobalVar of an NPU region -> the detail to record (constraint_internal_error(err)).
    rejections : list
        Receives a Rejection with NPU_E_INTERNAL for every op of those regions.

    Returns
    -------
    tvm.IRModule
        The module without those region functions; `main` computes their ops on the CPU.
    """
    fresh = fresh_names({v.name for v in _all_vars(mod["main"])})

    @mutator
    class Inline(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.GlobalVar) and call.op in failed):
                return call
            return inline_region(
                self.builder_,
                mod[call.op],
                list(call.args),
                fresh,
                rejections,
                failed[call.op],
                constraint_internal_error,
            )

    main_gv = mod.get_global_var("main")
    new_main = Inline(mod).visit_expr(mod["main"])
    return tvm.IRModule(
        {gv: (new_main if gv.same_as(main_gv) else f) for gv, f in mod.functions.items() if gv not in failed},
        attrs=mod.attrs,
    )


def _all_vars(func: relax.Function) -> list:
    out = list(func.params)
    for block in func.body.blocks:
        out += [b.var for b in block.bindings]
    return out
