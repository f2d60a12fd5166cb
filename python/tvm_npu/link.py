"""Several entry functions in one Relax VM executable: each built through the NPU flow on its own, then
merged and lowered for the CPU once, so one `tvm_npu.export_library` writes one library.

A workload that runs more than one graph on the device keeps them together: an LLM's prefill and decode
steps (llm/one_library.py), a diffusion pipeline's text encoder and UNet (diffusion/pipeline.py). Each
entry's NPU regions often carry the same symbols as another's (the partitioner names a region after its
ops), and one library resolves a symbol to one module, so each region is renamed `<entry>_<symbol>`.
Regions whose weight bytes are the same (an LLM's prefill and decode dense layers) are held once: the
runtime keeps one copy in memory, and the library writes the later ones by reference. A metadata
function, a Relax string constant, carries what the loader needs (it survives export and load like any
constant of the VM).
"""

from __future__ import annotations

import json

import tvm
from tvm import relax

from . import runtime
from .build import BuildContext, cpu_pipeline, run_stages
from .contract.errors import NPUError
from .ir.graph import BLOCK_BUILDER_LOCK
from .partition.report import BuildReport
from .rewrite.check_indices import CHECK_PREFIX


def prefix(entry: str) -> str:
    """The prefix of an entry's NPU region symbols in the one library."""
    return f"{entry}_"


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


def namespaced(entry: str, mod: tvm.IRModule, report: BuildReport) -> tuple:
    """(`main` as the entry function, the entry's runtime modules, its CPU kernels {GlobalVar:
    PrimFunc}) with every NPU region symbol and kernel name prefixed by the entry; the report's regions
    follow. The kernels are the index checks of rewrite/check_indices.py, the only functions besides
    main that an entry has after codegen."""
    pre = prefix(entry)
    ext = list(mod.attrs["external_mods"]) if mod.attrs is not None and "external_mods" in mod.attrs else []
    names, modules = {}, []
    for m in ext:
        if m.kind != "npu":
            raise NPUError("ERR_INVALID_MODEL", f"the {entry} graph holds a runtime module of kind {m.kind}, not npu")
        symbol = str(m["get_symbol"]())
        names[symbol] = pre + symbol
        modules.append(runtime.create_module(pre + symbol, bytes(m["get_stream"]())))
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
                raise NPUError("ERR_INVALID_MODEL", f"the {entry} graph has a function {gv.name_hint} besides main")
            renamed[gv.name_hint] = new = kb.add_func(func, pre + gv.name_hint)
            kernels[new] = func
    main = _Rename(mod, names, renamed).visit_expr(mod["main"]).with_attr("global_symbol", entry)
    report.regions = {names.get(s, s): r for s, r in report.regions.items()}
    if report.kv_cache.get("regions"):
        report.kv_cache["regions"] = [names.get(s, s) for s in report.kv_cache["regions"]]
    return main, modules, kernels


def build_entries(pairs: list, cfg, kv: dict | None = None) -> tuple[dict, dict]:
    """Run the NPU flow through codegen on each (entry, module, info) of `pairs`: ({entry: (entry
    function, runtime modules, kernels)}, {entry: BuildReport}). `kv` is {"state_space": k} for an LLM's
    resident cache (each entry's `info` is added as its step metadata), None otherwise."""
    out, reports = {}, {}
    for entry, mod, info in pairs:
        report = BuildReport()
        ctx = BuildContext(cfg, report, kv_cache=None if kv is None else {"step": info, **kv})
        with tvm.target.Target("npu"):
            lowered = run_stages(mod, ctx, last="codegen")
        out[entry] = namespaced(entry, lowered, report)
        reports[entry] = report
    return out, reports


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


def link(built: dict, order: tuple, meta_function: str, meta: dict, aliases: dict | None = None):
    """One executable from build_entries's entries (their modules in `order`), a function
    `meta_function() -> str` returning `meta` as JSON, and for each {alias: entry} of `aliases` a
    function `alias` that calls `entry` (an LLM whose one step model serves prefill and decode)."""
    modules = [m for entry in order if entry in built for m in built[entry][1]]
    _weights_by_reference(modules)
    with BLOCK_BUILDER_LOCK:
        bb = relax.BlockBuilder()
        gvs = {entry: bb.add_func(main, entry) for entry, (main, _, _) in built.items()}
        for alias, entry in (aliases or {}).items():
            params = [relax.Var(p.name, p.ty) for p in built[entry][0].params]
            with bb.function(alias, params, attrs={"num_input": len(params)}):
                bb.emit_func_output(bb.emit(relax.Call(gvs[entry], params)))
        with bb.function(meta_function, []):
            bb.emit_func_output(tvm.ir.StringImm(json.dumps(meta, sort_keys=True)))
        mod = bb.get()
    kernels = {gv: f for _, _, entry_kernels in built.values() for gv, f in entry_kernels.items()}
    mod = tvm.IRModule({**dict(mod.functions.items()), **kernels}, attrs=mod.attrs).with_attr("external_mods", modules)
    return tvm.compile(mod, target="npu", relax_pipeline=cpu_pipeline())
