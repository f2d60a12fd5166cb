"""Sweep stage 3b — sustained objectives: each feasible configuration run for a while under a governor
and a cooler (power/pipeline.py), from the row's stored counts and time split (no new estimate).

`sustained_fps` is the frame rate of the run's last third (what the user gets once the die is warm),
`sustained_mj` the NPU's energy per inference over the run (dynamic at the operating points the governor
chose, leakage, idle), `throttled_s` the time the thermal cap held the clock below the policy's choice,
and `holds_fps` whether the sustained rate reaches the source's (within one frame of the window). The
front `pareto_sustained` minimises (frame time at the sustained rate, energy per inference) over all
bandwidths: which configuration holds the frame rate, and for how little energy.
"""

from __future__ import annotations

from ..contract.config import NPUConfig
from ..power import DEFAULT_POWER, NpuWork, PowerModel, simulate

# The run each configuration gets unless the sweep is told otherwise: a 30 fps camera for a minute on
# a phone's cooler, the step-wise throttling governor, no CPU part (the sweep compiles the NPU only).
DEFAULT_RUN = {"fps": 30.0, "seconds": 60.0, "policy": "throttle", "thermal": "phone", "cpu_ms": 0.0}


def work_of_row(row: dict) -> NpuWork | None:
    """The NPU work a sweep row stores, or None for a row without the time split (an older result)."""
    if "split_compute_cycles" not in row:
        return None
    return NpuWork(
        row["config"]["clock_mhz"],
        row["split_compute_cycles"],
        row["split_ddr_cycles"],
        row["split_overlap_cycles"],
        row["split_idle_cycles"],
        row["macs_int8"],
        row["macs_fp16"],
        row["ddr_bytes"],
        row["sram_access_bytes"],
        row["regions"],
    )


def add(rows: list[dict], run: dict | None = None, power: PowerModel = DEFAULT_POWER) -> list[dict]:
    """Fill `sustained_fps`, `sustained_mj`, `throttled_s`, `holds_fps` and `pareto_sustained`."""
    from .table import pareto_flags

    run = {**DEFAULT_RUN, **(run or {})}
    for r in rows:
        work = work_of_row(r) if r.get("feasible") else None
        if work is None:
            continue
        cfg = NPUConfig(**r["config"])
        s = simulate(
            cfg, work, run["cpu_ms"] * 1e-3, run["fps"] or None, run["seconds"], run["policy"], run["thermal"], power
        ).summary
        r.update(
            sustained_fps=s["sustained_fps"],
            sustained_frame_ms=1e3 / s["sustained_fps"] if s["sustained_fps"] else float("inf"),
            sustained_mj=s["energy_per_inference_mj"],
            throttled_s=s["throttled_s"],
            holds_fps=bool(run["fps"]) and s["sustained_fps"] >= run["fps"] - 3 / run["seconds"],
        )
    scored = [r if "sustained_mj" in r else {**r, "feasible": False} for r in rows]
    for r, on in zip(rows, pareto_flags(scored, keys=("sustained_frame_ms", "sustained_mj"), group=None)):
        r["pareto_sustained"] = on
    return rows
