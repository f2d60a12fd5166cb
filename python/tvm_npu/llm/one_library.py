"""Both steps of an LLM in one Relax VM executable: entry functions "prefill" and "decode", and "llm_meta".

Each step runs the NPU flow through codegen on its own (build.run_stages: its kv_cache stage needs the
step's metadata, its report is its own), then the two are merged into one module and lowered for the
CPU once, so one `tvm_npu.export_library` writes one library:

- `prefill(input_ids [1, S], position [1], ...)` and `decode(input_ids [1, 1], position [1], ...)`: the
  two steps' `main`s. When one step model at seq_len 1 serves both, `prefill` calls `decode`.
- `llm_meta() -> str`: the LLM's metadata as JSON (what `tvm_npu.llm.load` and the C++ host app need:
  the step info, prefill bucket, NPU configuration, placements, region layers). A Relax string
  constant survives export and load like any constant of the VM.

The two steps' NPU regions often carry the same symbol (the partitioner names a region after its ops),
and one library resolves a symbol to one module, so each region is renamed `<step>_<symbol>`. Their
weight regions are usually the same bytes ([N][K] weights do not depend on the row count): the runtime
keeps one copy of each in memory, and the library holds them once: a decode region whose weights a
prefill region carries is written with its weights by reference (docs/llm.md, "The artifact").
"""

from __future__ import annotations

import json

import tvm
from tvm import relax

from .. import runtime
from ..build import BuildContext, cpu_pipeline, run_stages
from ..contract.errors import NPUError
from ..ir.graph import BLOCK_BUILDER_LOCK
from ..partition.report import BuildReport
from ..rewrite.check_indices import CHECK_PREFIX

META_FUNCTION = "llm_meta"
FORMAT = 2  # of the LLM artifact (llm/bundle.py); 1 was a tar of two libraries
STEPS = ("prefill", "decode")


def step_prefix(step: str) -> str:
    """The prefix of a step's NPU region symbols in the one library."""
    return f"{step}_"


@relax.expr_functor.mutator
class _Rename(relax.PyExprMutator):
    def __init__(self, mod, names: dict, kernels: dict):
        super().__init__(mod)
        self.names, self.kernels = names, kernels

    def visit_call_(self, call):
        call = super().visit_call_(call)
        target = call.args[0] if call.args else None
        if isinstance(target, relax.ExternFunc) and target.global_symbol in self.names:
            args = [relax.ExternFunc(self.names[target.global_symbol]), *call.args[1:]]
            return relax.Call(call.op, args, call.attrs, call.ty_args)
        if isinstance(target, tvm.ir.GlobalVar) and target.name_hint in self.kernels:
            return relax.Call(call.op, [self.kernels[target.name_hint], *call.args[1:]], call.attrs, call.ty_args)
        return call


def _namespaced(step: str, mod: tvm.IRModule, report: BuildReport) -> tuple:
    """(`main` as the step's entry function, the step's runtime modules, its CPU kernels {GlobalVar:
    PrimFunc}) with every NPU region symbol and kernel name prefixed by the step; the report's regions
    follow. The kernels are the index checks of rewrite/check_indices.py, the only functions besides
    main that a step has after codegen."""
    prefix = step_prefix(step)
    ext = list(mod.attrs["external_mods"]) if mod.attrs is not None and "external_mods" in mod.attrs else []
    names, modules = {}, []
    for m in ext:
        if m.kind != "npu":
            raise NPUError("ERR_INVALID_MODEL", f"the {step} step holds a runtime module of kind {m.kind}, not npu")
        symbol = str(m["get_symbol"]())
        names[symbol] = prefix + symbol
        modules.append(runtime.create_module(prefix + symbol, bytes(m["get_stream"]())))
    # Not carried over: the codegen's `const_name_to_constant` (RunCodegen's copy of each region's float
    # constants, `<symbol>_npu_const_<i>`). An NPU module bakes its weights into its stream and asks for
    # none (its get_const_vars is empty), so the library's const_loader would only store them unused.
    kernels, renamed = {}, {}
    with BLOCK_BUILDER_LOCK:
        kb = relax.BlockBuilder()  # typed GlobalVars under the prefixed names (call_tir needs the type)
        for gv, func in mod.functions.items():
            if gv.name_hint == "main":
                continue
            if not gv.name_hint.startswith(CHECK_PREFIX):  # anything else would need renaming as well
                raise NPUError("ERR_INVALID_MODEL", f"the {step} step has a function {gv.name_hint} besides main")
            renamed[gv.name_hint] = new = kb.add_func(func, prefix + gv.name_hint)
            kernels[new] = func
    main = _Rename(mod, names, renamed).visit_expr(mod["main"]).with_attr("global_symbol", step)
    report.regions = {names.get(s, s): r for s, r in report.regions.items()}
    if report.kv_cache.get("regions"):
        report.kv_cache["regions"] = [names.get(s, s) for s in report.kv_cache["regions"]]
    return main, modules, kernels


def _entry_module(built: dict, meta: dict) -> tvm.IRModule:
    """The steps' entry functions, `prefill` calling `decode` when one step model serves both, and
    `llm_meta`."""
    with BLOCK_BUILDER_LOCK:
        bb = relax.BlockBuilder()
        gvs = {step: bb.add_func(main, step) for step, (main, _, _) in built.items()}
        if "prefill" not in gvs:
            params = [relax.Var(p.name, p.ty) for p in built["decode"][0].params]
            with bb.function("prefill", params, attrs={"num_input": len(params)}):
                bb.emit_func_output(bb.emit(relax.Call(gvs["decode"], params)))
        with bb.function(META_FUNCTION, []):
            bb.emit_func_output(tvm.ir.StringImm(json.dumps(meta, sort_keys=True)))
        mod = bb.get()
    kernels = {gv: f for _, _, step_kernels in built.values() for gv, f in step_kernels.items()}
    return tvm.IRModule({**dict(mod.functions.items()), **kernels}, attrs=mod.attrs)


def _weights_by_reference(modules: list) -> None:
    """Mark each module whose weight region an earlier module of `modules` holds (the runtime's pool
    gave them one copy) to be written with its weights by reference: the library holds those bytes
    once. Loaded, such a module finds its weights at its first use, whatever order TVM loads the
    library's modules in (src/runtime/npu_module.cc)."""
    seen = set()
    for m in modules:
        w = runtime.weights_memory(m)
        if w["bytes"] and w["id"] in seen:
            m["set_weights_by_reference"](True)
        seen.add(w["id"])


def build_steps(pairs: list, cfg, kv: dict | None) -> tuple[dict, dict]:
    """Run the NPU flow through codegen on each (step, module, info) of `pairs`: ({step: (entry
    function, runtime modules)}, {step: BuildReport}). `kv` is {"state_space": k} for a resident cache
    (each step's metadata is added), None for a host-held one."""
    out, reports = {}, {}
    for step, mod, info in pairs:
        report = BuildReport()
        ctx = BuildContext(cfg, report, kv_cache=None if kv is None else {"step": info, **kv})
        with tvm.target.Target("npu"):
            lowered = run_stages(mod, ctx, last="codegen")
        out[step] = _namespaced(step, lowered, report)
        reports[step] = report
    return out, reports


def link(built: dict, meta: dict):
    """One executable from build_steps's entry functions and the metadata (see the module docstring)."""
    modules = [m for step in STEPS if step in built for m in built[step][1]]
    _weights_by_reference(modules)
    mod = _entry_module(built, meta).with_attr("external_mods", modules)
    return tvm.compile(mod, target="npu", relax_pipeline=cpu_pipeline())
