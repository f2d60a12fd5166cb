"""Sweep stage 3 — the table: energy and area from each row's counts, the Pareto front, text and CSV.

Energy and area are recomputed here from the stored counts (MACs, DDR bytes, SRAM bytes) and resources,
so other constants (energy.py) need no new estimates.

The Pareto front: for each DDR bandwidth (memory is chosen apart from the die), the configurations that
no other is at least as fast and as small (MAC array + SRAM area) as, and better in one. Those are the
chips worth considering; off the front, some silicon was added that bought no time. Over more
objectives at once (latency, energy, MACs, SRAM, bandwidth) nearly every point of a grid is on the
front (all 36 of a MobileNetV2 sweep), which marks nothing; `pareto_flags` takes other keys.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ..backend.plan.energy import AreaModel, EnergyModel
from .grid import size_name

OBJECTIVES = ("latency_us", "area_mm2")
COLUMNS = (
    "name",
    "feasible",
    "pareto",
    "mac_rows",
    "mac_cols",
    "sram_bytes",
    "ddr_bytes_per_cycle",
    "area_mm2",
    "cycles",
    "latency_us",
    "mac_cycles",
    "vector_cycles",
    "macs",
    "ddr_bytes",
    "compulsory_ddr_bytes",
    "sram_peak_bytes",
    "sram_access_bytes",
    "energy_mac_uj",
    "energy_ddr_uj",
    "energy_sram_uj",
    "energy_uj",
    "sustained_fps",
    "sustained_mj",
    "throttled_s",
    "holds_fps",
    "pareto_sustained",
    "npu_ops",
    "ops",
    "cpu_macs",
    "error_code",
    "reason",
    "seconds",
)


def finish(rows: list[dict], energy: EnergyModel, area: AreaModel) -> list[dict]:
    """Rows with `mac_count`, `area_mm2`, energy (from `energy`) and the `pareto` flag filled in."""
    rows = [dict(r) for r in rows]
    for r in rows:
        r["mac_count"] = r["mac_rows"] * r["mac_cols"]
        r["area_mm2"] = area.area_mm2(r["mac_count"], r["sram_bytes"])
        if r.get("feasible"):
            r.update(
                energy.energy_uj(r["config"], r["macs_int8"], r["macs_fp16"], r["ddr_bytes"], r["sram_access_bytes"])
            )
    for r, on in zip(rows, pareto_flags(rows)):
        r["pareto"] = on
    return rows


def pareto_flags(rows: list[dict], keys=OBJECTIVES, group: str | None = "ddr_bytes_per_cycle") -> list[bool]:
    """True for each feasible row that no other feasible row of its `group` dominates (`keys` minimised)."""
    feasible = [r for r in rows if r.get("feasible")]

    def dominates(a, b):
        return (
            (group is None or a[group] == b[group])
            and all(a[k] <= b[k] for k in keys)
            and any(a[k] < b[k] for k in keys)
        )

    return [bool(r.get("feasible")) and not any(dominates(o, r) for o in feasible) for r in rows]


def text(rows: list[dict]) -> str:
    """A fixed-width table, one line per configuration; '*' marks the Pareto front, an infeasible one
    gives its error code and reason."""
    head = ("config", "area mm2", "latency us", "MAC cycles", "DDR MB", "SRAM peak", "energy uJ", "")
    lines = []
    for r in rows:
        if r.get("feasible"):
            lines.append(
                (
                    r["name"],
                    f"{r['area_mm2']:.2f}",
                    f"{r['latency_us']:.1f}",
                    str(r["mac_cycles"]),
                    f"{r['ddr_bytes'] / 1e6:.2f}",
                    size_name(r["sram_peak_bytes"])
                    if r["sram_peak_bytes"] % 1024 == 0
                    else f"{r['sram_peak_bytes'] / 1024:.0f}KiB",
                    f"{r['energy_uj']:.0f}",
                    "*" if r["pareto"] else "",
                )
            )
        else:
            lines.append(
                (
                    r["name"],
                    f"{r['area_mm2']:.2f}",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    f"{r['error_code']}: {_first_line(r['reason'])}",
                )
            )
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(7)]

    def fmt(x):
        cells = "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(x[:7], widths)))
        return cells + ("  " + x[7] if x[7] else "")

    return "\n".join([fmt(head), *(fmt(x) for x in lines)])


def _first_line(reason: str, limit: int = 100) -> str:
    s = " ".join(str(reason).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
