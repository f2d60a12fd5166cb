"""A model's cost on one NPU configuration, from the compiler and the cost model alone.

The build's own stages up to codegen (partition, lower, plan, verify, encode: build.compile_npu_regions)
give every NPU region's command stream, which the cost model (cost_model.py, docs/npu.md section 5)
times. Nothing runs, and TVM's CPU lowering -- the slow part of a build, which does not change the NPU's
numbers -- is skipped: MobileNetV2 at 224x224 estimates in about 1.5 s. The numbers are the ones the
planner optimised and that `tvm-npu profile` reports as "estimated".

What the estimate leaves out: the ops that stay on the CPU (their MACs are counted as `cpu_macs` but
not timed), and the host's work at region boundaries (fp32 <-> fp16 conversion, NCHW <-> NHWC).
"""

from __future__ import annotations

from collections import Counter

import tvm

from ..backend.plan.energy import DEFAULT, EnergyModel
from ..contract.config import NPUConfig, get_config
from ..ir.graph import region_calls
from ..partition.report import BuildReport

# Summed over NPU regions (which run one after another); SRAM is the largest region's.
_SUMMED = (
    "estimated_cycles",
    "mac_cycles",
    "vector_cycles",
    "macs",
    "macs_int8",
    "macs_fp16",
    "ddr_read_bytes",
    "ddr_write_bytes",
    "compulsory_ddr_bytes",
    "sram_access_bytes",
    "weight_bytes",
)


def estimate(
    mod: tvm.IRModule, config: NPUConfig | str | None = None, params: dict | None = None, energy: EnergyModel = DEFAULT
) -> dict:
    """Compile `mod`'s NPU regions for `config` and return the cost model's totals.

    Parameters
    ----------
    mod : tvm.IRModule
        The model (e.g. from `tvm_npu.from_onnx`).
    config : NPUConfig or str, optional
        The NPU ("npu-ref" by default).
    params : dict, optional
        Weights to bind into `main`, as for `tvm_npu.build`.
    energy : EnergyModel, optional
        The pJ constants of the energy estimate (energy.py).

    Returns
    -------
    dict
        `cycles` (all NPU regions, one after another), `latency_us`, `mac_cycles` (MAC array busy),
        `vector_cycles`, `macs`, `ddr_bytes` (read + written), `sram_peak_bytes`, the energy parts in
        microjoules, `npu_ops` / `ops`, `cpu_macs`, `cpu_codes` (reason code -> ops on the CPU),
        `regions` and `split_compute_cycles` / `split_ddr_cycles` / `split_overlap_cycles` /
        `split_idle_cycles` (power/model.py's time split). Raises NPUError (e.g. ERR_SRAM_OVERFLOW)
        when the model does not compile for `config`.
    """
    from ..build import check_module  # pylint: disable=import-outside-toplevel

    check_module(mod, "estimate")
    from ..build import bind_params, compile_npu_regions

    cfg = get_config(config)
    report = BuildReport()
    compiled = compile_npu_regions(bind_params(mod, params), cfg, report)
    # A region the partitioner found identical to another (a transformer's attention blocks) is one
    # function called once per block: its costs count once per call (report.regions holds it once).
    calls = region_calls(compiled["main"])
    regions = report.regions.values()
    out: dict = {k: sum(int(r.get(k, 0)) * calls.get(s, 1) for s, r in report.regions.items()) for k in _SUMMED}
    out["cycles"] = out.pop("estimated_cycles")
    out["latency_us"] = out["cycles"] / cfg.clock_mhz
    out["ddr_bytes"] = out["ddr_read_bytes"] + out["ddr_write_bytes"]
    out["sram_peak_bytes"] = max((int(r["sram_bytes_used"]) for r in regions), default=0)
    out.update(energy.energy_uj(cfg, out["macs_int8"], out["macs_fp16"], out["ddr_bytes"], out["sram_access_bytes"]))
    out.update(
        regions=len(report.regions),
        npu_ops=report.npu_ops,
        ops=len(report.placements),
        cpu_macs=report.macs()["cpu"],
        cpu_codes=dict(Counter(p.code for p in report.placements if p.device == "cpu" and p.code)),
    )
    out.update(_time_split(cfg, compiled))
    return out


def _time_split(cfg: NPUConfig, compiled: tvm.IRModule) -> dict:
    """The regions' schedules cut into compute, DDR, overlapping and idle cycles (power/model.py): what
    the sweep's sustained objectives (dse/sustained.py) scale to other clocks."""
    from ..contract import stream
    from ..power import work_of

    attrs = compiled.attrs
    modules = list(attrs["external_mods"]) if attrs is not None and "external_mods" in attrs else []
    calls = region_calls(compiled["main"])
    works = [
        (work_of(cfg, stream.decode(bytes(m["get_stream"]())).commands), calls.get(str(m["get_symbol"]()), 1))
        for m in modules
        if m.kind == "npu"
    ]
    keys = ("compute_cycles", "ddr_cycles", "overlap_cycles", "idle_cycles")
    return {f"split_{k}": sum(getattr(w, k) * n for w, n in works) for k in keys}
