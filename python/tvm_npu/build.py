"""The driver: every stage of the NPU flow, in order, one line each.

    import (frontend / user)  -> bind params -> quantize (issue 3) -> patterns + partition
    -> codegen (lower, plan, encode; runtime modules) -> TVM's CPU pipeline for the rest -> executable

`npu_pipeline` is the Relax pipeline registered as "npu", so a plain TVM script can call
`tvm.compile(mod, target="npu", relax_pipeline="npu")`; `build` is the one-call form with params,
an NPU configuration and a report.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from .backend import codegen
from .partition import partitioner as partition, report as report_mod
from .contract.config import NPUConfig, get_config
from .contract.errors import NPUError

log = logging.getLogger(__name__)

STAGES = ("bind_params", "partition", "codegen", "cpu_lowering")


def cpu_pipeline() -> tvm.transform.Pass:
    """TVM's own lowering of what stays on the CPU (legalize, fuse, VM lowering)."""
    return tvm.transform.Sequential([relax.get_pipeline("zero"), relax.get_pipeline("default")])


def npu_pipeline(config: NPUConfig | str | None = None, report: report_mod.BuildReport | None = None,
                 dump_after: str | None = None) -> tvm.transform.Pass:
    """The Relax pipeline "npu": partition for the NPU, compile the regions, lower the rest for the CPU.

    Parameters
    ----------
    config : NPUConfig or str, optional
        The NPU to compile for (default "npu-ref").
    report : BuildReport, optional
        Filled with op placement and each NPU region's plan.
    dump_after : str, optional
        Print the module after this stage (one of STAGES) — for debugging.
    """
    cfg = get_config(config)

    @tvm.transform.module_pass(opt_level=0, name="NPUPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = compile_npu_regions(mod, cfg, report, dump_after)
        return _stage("cpu_lowering", cpu_pipeline()(mod), dump_after)

    return _pipeline


def compile_npu_regions(mod: tvm.IRModule, cfg: NPUConfig, report: report_mod.BuildReport | None = None,
                        dump_after: str | None = None) -> tvm.IRModule:
    """Partition and codegen: every NPU region planned and encoded, the rest still Relax for the CPU.

    The pipeline above continues with TVM's CPU lowering; tvm_npu.estimate stops here, since the
    report then already holds every region's cost-model numbers."""
    rejections: list = []
    streams: dict = {}
    layers: dict = {}
    mod = _stage("partition", partition.partition_for_npu(mod, cfg, rejections), dump_after)
    if report is not None:
        report.config = cfg.to_dict()
        report.record_partition(mod, rejections)
    with codegen.compiling(cfg, streams, layers):
        mod = _stage("codegen", relax.transform.RunCodegen()(mod), dump_after)
    if report is not None:
        report.regions = {s: _region_summary(cfg, st, layers.get(s)) for s, st in streams.items()}
    return mod


def _stage(name: str, mod: tvm.IRModule, dump_after: str | None) -> tvm.IRModule:
    log.info("stage %s done", name)
    if dump_after == name:
        print(f"# --- after {name} ---\n{mod}")
    return mod


def _region_summary(cfg: NPUConfig, planned, layers: dict | None = None) -> dict:
    """A region's plan in JSON-serializable form; with `layers` (report.region_layers) also its
    layers, I/O tensor bytes and command -> layer map, which tvm_npu.profile needs."""
    from .backend.plan.cost_model import estimate
    from .backend.plan.energy import command_counts

    est = estimate(cfg, planned.commands)
    summary = {"commands": len(planned.commands), "weight_bytes": len(planned.weights),
               "sram_bytes_used": planned.sram_bytes_used, "ddr_bytes": planned.ddr_bytes,
               "estimated_cycles": est.total_cycles, "macs": est.macs,
               "mac_cycles": est.mac_cycles, "vector_cycles": est.vector_cycles,
               "ddr_read_bytes": est.ddr_read_bytes, "ddr_write_bytes": est.ddr_write_bytes}
    # NCHW host tensors are transposed to NHWC (and back) by the runtime at the region boundary only;
    # a tensor with one channel or one pixel needs no data movement for it.
    summary["boundary_transposes"] = sum(
        1 for t in planned.tensors
        if t.host_layout == "NCHW" and t.view[3] > 1 and t.view[1] * t.view[2] > 1)
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
        raise NPUError("ERR_SHAPE_MISMATCH",
                       f"params {unknown} are not parameters of main (it has {sorted(names)})")
    values = {k: tvm.runtime.tensor(np.asarray(v)) for k, v in params.items()}
    return relax.transform.BindParams("main", values)(mod)


def build(mod: tvm.IRModule, target="npu", params: dict | None = None,
          config: NPUConfig | str | None = None, report: report_mod.BuildReport | None = None,
          dump_after: str | None = None):
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

    Returns
    -------
    tvm.relax.Executable
        Run it with `tvm.relax.VirtualMachine(ex, tvm.cpu())`, or `ex.export_library(path)`.
    """
    mod = _stage("bind_params", bind_params(mod, params), dump_after)
    return tvm.compile(mod, target=target,
                       relax_pipeline=npu_pipeline(config, report, dump_after))
