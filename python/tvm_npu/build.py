"""The driver: every stage of the NPU flow, in order, as data (`STAGES`) that one loop walks.

    bind_params -> partition (patterns, constraints, region limits) -> codegen (lower, plan, verify,
    encode: one runtime module per NPU region; a region that fails unexpectedly back to the CPU) ->
    source_map (each command's layer, for `tvm-npu disasm`) -> cpu_lowering (TVM's pipeline for the rest)

A build is one `BuildContext` (its NPUConfig, report, params and what its stages collect) that every
stage takes as its argument; no stage keeps state in a module, so builds in several threads never see
each other's configuration. Quantization (tvm_npu.quantize) runs before a build, on the Relax module.

`npu_pipeline` is the Relax pipeline registered as "npu", so a plain TVM script can call
`tvm.compile(mod, target="npu", relax_pipeline="npu")`; `build` is the one-call form with params,
an NPU configuration and a report.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from .backend import codegen, fallback, host_code, kv_cache, source_map
from .contract.config import NPUConfig, get_config
from .contract.errors import NPUError
from .partition import partitioner as partition
from .partition import report as report_mod

log = logging.getLogger(__name__)


@dataclass
class BuildContext:
    """One build: what it compiles for, what it fills in, and what its stages hand to each other."""

    config: NPUConfig
    report: report_mod.BuildReport | None = None
    params: dict | None = None  # weights bind_params binds into main
    dump_after: str | None = None  # print the module after this stage (a name in STAGES)
    rejections: list = field(default_factory=list)  # partition -> report: every refused match
    streams: dict = field(default_factory=dict)  # codegen: symbol -> planned Stream
    layers: dict = field(default_factory=dict)  # codegen: symbol -> report.region_layers(...)
    # An LLM step model whose KV cache stays on the NPU: {"step": metadata, "state_space": k} (kv_cache),
    # and "kv_scales" [L][2][H_kv] for an int8 cache.
    kv_cache: dict | None = None
    kv_regions: dict = field(default_factory=dict)  # kv_cache: symbol -> (stream, placements, call var)
    # kv_cache in SRAM: the SRAM state area's bytes, the top of SRAM no other region may plan into.
    sram_reserved: int = 0

    @property
    def plan_config(self) -> NPUConfig:
        """The configuration the partition and the planners see: SRAM below the SRAM state area."""
        if not self.sram_reserved:
            return self.config
        return self.config.replace(sram_bytes=self.config.sram_bytes - self.sram_reserved)


def cpu_pipeline() -> tvm.transform.Pass:
    """TVM's own lowering of what stays on the CPU: its operator fusion (the "zero" pipeline: legalize,
    fuse) and then its VM lowering ("default", all that tvm.compile(target="llvm") runs). A module left
    without a PrimFunc (every op on the NPU) gets a no-op one, so that its host library is LLVM code
    TVM can run as it is (backend/host_code.py: otherwise every VM of it loads a copy kept for good).

    TVM 0.27's fusion can fuse ops whose shapes come from a tensor's values (a match_cast of
    tensor_to_shape) into a function whose storage size VMShapeLower then cannot compute
    ("PrimExpr ... has not been computed"), on a graph tvm.compile builds. Such a module is lowered
    without the fusion, as tvm.compile lowers it."""

    @tvm.transform.module_pass(opt_level=0, name="NpuCpuLowering")
    def lower(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        try:
            mod = tvm.transform.Sequential([relax.get_pipeline("zero"), relax.get_pipeline("default")])(mod)
        except tvm.error.InternalError as err:
            log.info("TVM's fused lowering failed (%s); lowering the CPU part unfused", str(err).splitlines()[-1])
            mod = relax.get_pipeline("default")(mod)
        return host_code.ensure_host_code(mod)

    return lower


def _bind_params(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:
    return bind_params(mod, ctx.params)


def _kv_cache(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:
    if ctx.kv_cache is None:
        return mod
    mod, ctx.kv_regions = kv_cache.make_resident(
        mod,
        ctx.config,
        ctx.kv_cache["step"],
        ctx.kv_cache["state_space"],
        ctx.rejections,
        ctx.kv_cache.get("kv_scales"),
        ctx.kv_cache.get("sram_area", 0),
    )
    ctx.sram_reserved = ctx.kv_cache.get("sram_area", 0) if ctx.kv_regions else 0
    ctx.streams.update({s: planned for s, (planned, _, _) in ctx.kv_regions.items()})
    ctx.layers.update({s: kv_cache.region_layers(planned) for s, (planned, _, _) in ctx.kv_regions.items()})
    if ctx.report is not None:
        ctx.report.kv_placements = {var: rows for _, rows, var in ctx.kv_regions.values()}
        ctx.report.kv_cache = {
            "resident": bool(ctx.kv_regions),
            "state_space": ctx.kv_cache["state_space"] if ctx.kv_regions else 0,
            "placement": ("sram" if ctx.sram_reserved else "ddr") if ctx.kv_regions else None,
            "sram_state_bytes": ctx.sram_reserved,
            "regions": sorted(ctx.kv_regions),
            "refused": [
                {"code": r.code, "reason": r.reason, "detail": r.detail}
                for r in ctx.rejections
                if r.pattern == "npu.kv_attention"
            ],
        }
    return mod


def _partition(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:
    mod = partition.partition_for_npu(mod, ctx.plan_config, ctx.rejections)
    mod = kv_cache.link(mod, ctx.kv_regions)
    if ctx.report is not None:
        ctx.report.config = ctx.config.to_dict()
        ctx.report.record_partition(mod, ctx.rejections)
    return mod


def _codegen(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:
    # Each region compiled on its own first: one that fails unexpectedly runs on the CPU (NPU_E_INTERNAL).
    compiled: dict = {}
    partitioned = mod
    mod = fallback.compile_regions(mod, ctx.plan_config, ctx.rejections, compiled)
    if ctx.report is not None and mod is not partitioned:  # placements of the ops that fell back
        ctx.report.record_partition(mod, ctx.rejections)
    mod = codegen.run_codegen(mod, ctx.plan_config, ctx.streams, ctx.layers, compiled)
    if ctx.report is not None:
        ctx.report.regions = {s: _region_summary(ctx.config, st, ctx.layers.get(s)) for s, st in ctx.streams.items()}
    return mod


def _source_map(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:
    # After codegen, so a build that stops there (an LLM's steps, which keep their own map) has none.
    return source_map.attach(mod, ctx.layers)


def _cpu_lowering(mod: tvm.IRModule, ctx: BuildContext) -> tvm.IRModule:  # noqa: ARG001 - a stage
    return cpu_pipeline()(mod)


# The stages of a build, in order: (name for dump_after and the log, function(mod, ctx) -> mod).
STAGES = (
    ("bind_params", _bind_params),
    ("kv_cache", _kv_cache),
    ("partition", _partition),
    ("codegen", _codegen),
    ("source_map", _source_map),
    ("cpu_lowering", _cpu_lowering),
)


def run_stages(mod: tvm.IRModule, ctx: BuildContext, last: str = STAGES[-1][0]) -> tvm.IRModule:
    """Walk STAGES in order through `last`, logging each and printing the module after
    `ctx.dump_after`.

    Parameters
    ----------
    mod : tvm.IRModule
        The model.
    ctx : BuildContext
        The build: every stage reads its inputs from it and records what it collects there.
    last : str
        The name of the last stage to run (e.g. "codegen" to stop before TVM's CPU lowering).

    Returns
    -------
    tvm.IRModule
        The module after `last`.
    """
    names = [name for name, _ in STAGES]
    for name in (ctx.dump_after, last):
        if name is not None and name not in names:
            raise ValueError(f"unknown stage {name!r}; the stages are {names}")
    for name, stage in STAGES[: names.index(last) + 1]:
        mod = stage(mod, ctx)
        log.info("stage %s done", name)
        if ctx.dump_after == name:
            print(f"# --- after {name} ---\n{mod}")
    return mod


def npu_pipeline(
    config: NPUConfig | str | None = None,
    report: report_mod.BuildReport | None = None,
    dump_after: str | None = None,
    params: dict | None = None,
    kv_cache: dict | None = None,
) -> tvm.transform.Pass:
    """The Relax pipeline "npu": every stage of STAGES on the module `tvm.compile` gives it.

    Parameters
    ----------
    config : NPUConfig or str, optional
        The NPU to compile for (default "npu-ref").
    report : BuildReport, optional
        Filled with op placement and each NPU region's plan.
    dump_after : str, optional
        Print the module after this stage (a name in STAGES) — for debugging.
    params : dict, optional
        Weights to bind into `main` as constants, by parameter name.
    kv_cache : dict, optional
        For an LLM step model (docs/llm.md): {"step": its metadata, "state_space": k != 0} keeps its KV
        cache on the NPU (backend/kv_cache.py; `main` becomes (input_ids, position) -> (logits,)), an int8
        one with "kv_scales": fp32 [layers][2][kv_heads] (K then V; docs/npu.md, "The int8 KV cache").
    """
    cfg = get_config(config)

    @tvm.transform.module_pass(opt_level=0, name="NPUPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        # A fresh context per module: a pipeline object applied twice keeps the two builds apart.
        return run_stages(mod, BuildContext(cfg, report, params, dump_after, kv_cache=kv_cache))

    return _pipeline


def compile_npu_regions(
    mod: tvm.IRModule, cfg: NPUConfig, report: report_mod.BuildReport | None = None, dump_after: str | None = None
) -> tvm.IRModule:
    """Partition and codegen: every NPU region planned and encoded, the rest still Relax for the CPU.

    tvm_npu.estimate stops here, since the report then already holds every region's cost-model
    numbers."""
    return run_stages(mod, BuildContext(cfg, report, dump_after=dump_after), last="codegen")


def _region_summary(cfg: NPUConfig, planned, layers: dict | None = None) -> dict:
    """A region's plan in JSON-serializable form; with `layers` (report.region_layers) also its
    layers, I/O tensor bytes and command -> layer map, which tvm_npu.profile needs."""
    from .backend.plan.cost_model import estimate
    from .backend.plan.energy import command_counts

    est = estimate(cfg, planned.commands)
    summary = {
        "commands": len(planned.commands),
        "weight_bytes": len(planned.weights),
        "sram_bytes_used": planned.sram_bytes_used,
        "ddr_bytes": planned.ddr_bytes,
        "estimated_cycles": est.total_cycles,
        "macs": est.macs,
        "mac_cycles": est.mac_cycles,
        "vector_cycles": est.vector_cycles,
        "ddr_read_bytes": est.ddr_read_bytes,
        "ddr_write_bytes": est.ddr_write_bytes,
    }
    # NCHW host tensors are transposed to NHWC (and back) by the runtime at the region boundary only;
    # a tensor with one channel or one pixel needs no data movement for it.
    summary["boundary_transposes"] = sum(
        1 for t in planned.tensors if t.host_layout == "NCHW" and t.view[3] > 1 and t.view[1] * t.view[2] > 1
    )
    summary.update(command_counts(cfg, planned.commands))  # for energy.py's estimate
    summary.update(getattr(planned, "info", {}))  # the planner's own numbers (plan.py)
    summary.update(layers or {})
    return summary


def bind_params(mod: tvm.IRModule, params: dict | None) -> tvm.IRModule:
    """Bind named weights of `main` as constants (what `relay.build(..., params=)` did)."""
    if not params:
        return mod
    names = {p.name for p in mod["main"].params}
    unknown = sorted(set(params) - names)
    if unknown:
        raise NPUError("ERR_SHAPE_MISMATCH", f"params {unknown} are not parameters of main (it has {sorted(names)})")
    values = {k: tvm.runtime.tensor(np.asarray(v)) for k, v in params.items()}
    return relax.transform.BindParams("main", values)(mod)


def build(
    mod: tvm.IRModule,
    target="npu",
    params: dict | None = None,
    config: NPUConfig | str | None = None,
    report: report_mod.BuildReport | None = None,
    dump_after: str | None = None,
    kv_cache: dict | None = None,
):
    """Compile a Relax module: NPU-supported regions for the NPU, the rest for the host CPU.

    Parameters
    ----------
    mod : tvm.IRModule
        The model, e.g. from `tvm.relax.frontend.onnx.from_onnx`.
    target : str or dict or tvm.target.Target
        "npu" (the registered tag: LLVM host with keys npu, cpu) or any host target.
    params : dict, optional
        Weights to bind into `main` as constants, by parameter name.
    config : NPUConfig or str, optional
        The NPU to compile for ("npu-ref", "npu-small" or an NPUConfig).
    report : BuildReport, optional
        Filled with where each op ran and the plan of each NPU region.
    dump_after : str, optional
        Print the module after this stage (a name in STAGES) — for debugging.
    kv_cache : dict, optional
        An LLM step model's resident KV cache: {"step": metadata, "state_space": k} (tvm_npu.llm sets it).

    Returns
    -------
    tvm.relax.Executable
        Run it with `tvm.relax.VirtualMachine(ex, tvm.cpu())`, or `tvm_npu.export_library(ex, path)`.
    """
    check_module(mod, "build")
    return tvm.compile(
        mod, target=host_target(target), relax_pipeline=npu_pipeline(config, report, dump_after, params, kv_cache)
    )


def check_module(mod, who: str) -> None:
    """NPUError(ERR_INVALID_MODEL) unless `mod` is a Relax IRModule, saying how to make one from what was
    given (an ONNX path or ModelProto: `tvm_npu.from_onnx`)."""
    if not isinstance(mod, tvm.IRModule):
        onnx_like = isinstance(mod, str | os.PathLike) or hasattr(mod, "graph")
        hint = " (import it first: tvm_npu.from_onnx(model))" if onnx_like else ""
        raise NPUError("ERR_INVALID_MODEL", f"{who} takes a Relax IRModule{hint}, not {type(mod).__name__}")


def host_target(target) -> tvm.target.Target:
    """`target` as a TVM Target whose kind runs on this CPU (llvm, c: the NPU is reached from the host);
    NPUError(ERR_INVALID_CONFIG) for anything else (a GPU, a name TVM does not know)."""
    try:
        parsed = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    except (ValueError, TypeError, RuntimeError) as err:
        raise NPUError(
            "ERR_INVALID_CONFIG", f'target={target!r} is not a TVM target ({_first_line(err)}): use "npu"'
        ) from None
    if parsed.kind.name not in ("llvm", "c"):
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f'target={target!r} is a {parsed.kind.name} target: the NPU\'s host is the CPU; use "npu" (or an '
            'llvm host target such as "llvm -mcpu=native")',
        )
    return parsed


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
