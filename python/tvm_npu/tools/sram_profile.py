"""SRAM utilization and fragmentation in a profile: the planner's allocations (report.regions[symbol]
["sram_allocations"], backend/plan/sram_usage.py) weighted by the cycles the runtime measured per command.

Per layer and per region: peak and time-weighted utilization, and at the peak the free bytes against the
largest free block. For the whole run: the peak over the regions (each runs alone, with all of SRAM), and
the time-weighted utilization over all their commands' cycles. Plus the findings of
backend/plan/fragmentation.py (an intermediate spilled to DDR, a tile kept small) as warning lines.
"""

from __future__ import annotations

from ..backend.plan import sram_usage

KEYS = (
    "peak_bytes",
    "peak_utilization",
    "time_weighted_utilization",
    "free_bytes_at_peak",
    "largest_free_block_at_peak",
)


def region_sram(info: dict, records: list, sram_bytes: int) -> dict | None:
    """`sram_usage.usage` of one region's call from its runtime records (None: the region has no
    allocation list, e.g. a KV-cache attention step planned by kv_plan.py)."""
    if "sram_allocations" not in info:
        return None
    notes = info["command_layers"]
    durations = [0] * len(notes)
    for r in records:
        durations[r["index"]] = r["end"] - r["start"]
    use = sram_usage.usage(info["sram_allocations"], info["layer_first_command"], notes, durations, sram_bytes)
    use["command_cycles"] = sum(durations)
    return use


def task_sram(regions: list, sram_bytes: int) -> dict | None:
    """The whole run's SRAM numbers from its regions' `region_sram` (None entries skipped)."""
    known = [r for r in regions if r is not None]
    if not known:
        return None
    peak = max(known, key=lambda r: r["peak_bytes"])
    cycles = sum(r["command_cycles"] for r in known)
    weighted = sum(r["time_weighted_utilization"] * r["command_cycles"] for r in known)
    out = {k: peak[k] for k in KEYS}
    out["time_weighted_utilization"] = weighted / cycles if cycles else 0.0
    out["sram_bytes"] = sram_bytes
    return out


def sram_line(sram: dict | None) -> str:
    """One line of a profile's SRAM numbers, as `tvm-npu profile` prints it."""
    if sram is None:
        return "SRAM: no planner allocations to report (KV-cache steps are planned apart)"
    return (
        f"SRAM: peak {sram['peak_bytes']} of {sram['sram_bytes']} B ({100 * sram['peak_utilization']:.1f}%), "
        f"time-weighted {100 * sram['time_weighted_utilization']:.1f}%; at the peak {sram['free_bytes_at_peak']} B "
        f"free, largest free block {sram['largest_free_block_at_peak']} B"
    )


def fragmentation_warnings(prof: dict) -> list:
    """One line per place fragmentation cost the plan something (backend/plan/fragmentation.py)."""
    return [f"warning: {f['region']}: {f['message']}" for f in prof.get("sram_fragmentation", [])]
