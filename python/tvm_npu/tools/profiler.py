"""Profile a model on the reference NPU: cycles, DDR traffic and utilization per NPU layer.

    from tvm_npu.profile import profile, to_csv
    from tvm_npu.trace import write_chrome_trace
    prof = profile(mod)                         # build, run once, collect every NPU call
    to_csv(prof, "layers.csv")                  # one row per NPU layer
    write_chrome_trace(prof, "trace.json")      # open in https://ui.perfetto.dev

The build report (report.region_layers) says which layer every command belongs to; the runtime's
per-command records (issue / start / end cycle, bus bytes, MACs; docs/npu.md section 5) are grouped by
that map. Everything returned is plain JSON data.
"""

from __future__ import annotations

import csv
import math

import numpy as np
import tvm
from tvm import relax

from .. import runtime
from ..build import build, check_module
from ..contract.config import get_config
from ..contract.errors import NPUError
from ..partition.report import BuildReport
from ..runtime.files import replacing
from . import inputs as inputs_mod
from . import sram_profile

COMPUTE_ENGINES = ("mac", "vector")
CSV_COLUMNS = (
    "region",
    "name",
    "composite",
    "kind",
    "dtype",
    "compute_cycles",
    "dma_cycles",
    "stall_cycles",
    "overlap_cycles",
    "total_cycles",
    "macs",
    "mac_utilization",
    "ddr_read_bytes",
    "ddr_write_bytes",
    "compulsory_ddr_bytes",
    "intensity",
    "roofline_bound",
    "saturated",
    "fp16_overflow",
    "nan",
)
# A layer whose saturated results exceed this fraction of its outputs is flagged (CLI warning, HTML).
SATURATION_WARN_FRACTION = 0.001


def random_inputs(mod: tvm.IRModule, seed: int = 0) -> list:
    """Seeded random arrays of `main`'s parameter shapes and dtypes (normal floats, uniform ints).

    Parameters
    ----------
    mod : tvm.IRModule
        The model; its `main` has static tensor parameters.
    seed : int
        The numpy generator's seed.

    Returns
    -------
    list of numpy.ndarray
        One array per parameter of `main`, in order.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for name, dims, dtype in inputs_mod.signature(mod):
        if dims is None or None in dims:
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"input {name} has a symbolic shape "
                f"{tuple('?' if d is None else d for d in dims or ())}: no random input can stand "
                "for it; give the inputs (inputs=, or --input x.npy)",
            )
        if np.issubdtype(np.dtype(dtype), np.integer):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1, dims).astype(dtype))
        else:
            arrays.append(rng.standard_normal(dims).astype(dtype))
    return arrays


def profile(mod: tvm.IRModule, inputs: list | None = None, config=None, report: BuildReport | None = None) -> dict:
    """Build `mod` for the NPU, run it once, and profile every NPU call, layer by layer.

    Parameters
    ----------
    mod : tvm.IRModule
        The model (weights bound as constants).
    inputs : numpy.ndarray, list, dict or path, optional
        The arguments of `main`: one array, a list in order, {name: array} or a .npy / .npz file
        (`inputs.as_arguments`); default: `random_inputs(mod)` (seed 0).
    config : NPUConfig or str, optional
        The NPU to compile for (default "npu-ref").
    report : BuildReport, optional
        Filled by the build (placements, regions), e.g. for `html_report.write_html`.

    Returns
    -------
    dict
        JSON-serializable; see `collect` for the keys and their definitions.
    """
    check_module(mod, "profile")
    cfg = get_config(config)
    arrays = random_inputs(mod) if inputs is None else inputs_mod.as_arguments(inputs, inputs_mod.signature(mod))
    report = BuildReport() if report is None else report
    ex = build(mod, config=cfg, report=report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    modules = runtime.npu_modules(vm)
    for m in modules:
        m["reset_profile"]()
    vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return collect(report, [runtime.profile_of(m) for m in modules])


def collect(report: BuildReport, module_profiles: list) -> dict:
    """Combine a build report with the runtime profiles of its NPU modules (one run).

    Parameters
    ----------
    report : BuildReport
        The report of the build (its regions carry the layers and the command -> layer map).
    module_profiles : list of dict
        `runtime.profile_of(module)` of every NPU module, after the run.

    Returns
    -------
    dict
        ``total_cycles`` the sum over NPU calls; ``ddr_bytes`` DDR bus bytes read + written;
        ``compulsory_ddr_bytes`` per region the constants as stored + its input and output tensors
        (device form: rows padded to the alignment), summed; ``mac_utilization`` MACs over the MAC
        slots of ``total_cycles``: an fp16 MAC fills ``fp16_rate_div`` int8 slots, so a mixed model
        counts ``sum(macs_l * rate_l) / (total_cycles * mac_rows * mac_cols)`` (``rate_l`` = 1 for
        int8 layers); ``sram_peak_bytes`` the planner's largest SRAM use over the regions (the highest byte);
        ``sram`` the SRAM utilization of the run (tools/sram_profile.py: peak and time-weighted
        utilization, free bytes and largest free block at the peak; per layer in ``layers[i]["sram"]``,
        per region in ``regions[symbol]["sram"]``; None where the planner recorded no allocations);
        ``sram_fragmentation`` where fragmentation cost the plan something (backend/plan/fragmentation.py);
        ``saturated_inputs`` how many finite float32 input values beyond the fp16 range the runtime
        saturated to +-65504 as it staged them (docs/npu.md section 2; per region input in
        ``regions[symbol]["saturated_inputs"]``); ``clamped_inputs`` how many values the quantized
        (int8 / int16) staging clamped to the dtype's range, NaN included (per region input in
        ``regions[symbol]["clamped_inputs"]``); ``layers`` one entry per NPU layer (see `_layer`);
        ``regions`` per region counters, host timestamps and the command records; ``config`` the NPU
        configuration. Top-level counters come from the modules' "total" (all calls of the run);
        layers from each module's last call.
    """
    conf = report.config
    aliases = report.aliases()
    for sym in report.regions:
        aliases.setdefault(sym, f"npu{len(aliases)}")
    ran = sorted((p for p in module_profiles if p["calls"]), key=lambda p: p["last"].get("host_start_ns", 0))
    regions, layers, frag = {}, [], []
    for p in ran:
        sym, last = p["symbol"], p["last"]
        info = report.regions[sym]
        notes = info["command_layers"]
        if len(notes) != len(last["records"]):
            raise ValueError(
                f"{sym}: the report has {len(notes)} commands, the runtime ran "
                f"{len(last['records'])}; profile the executable of this build"
            )
        records = [dict(r, layer=notes[r["index"]], **_counts_of(last, r["index"])) for r in last["records"]]
        busy_all = _union([r for r in records if r["engine"] in COMPUTE_ENGINES])
        rows = [
            _layer(conf, sym, aliases[sym], layer, [r for r in records if r["layer"] == layer["name"]], busy_all)
            for layer in info["layers"]
        ]
        sram = sram_profile.region_sram(info, records, conf["sram_bytes"])
        for row in rows:
            own = (sram or {}).get("layers", {}).get(row["name"])
            row["sram"] = {k: own[k] for k in sram_profile.KEYS} if own else None
        frag += [dict(f, region=aliases[sym]) for f in info.get("sram_fragmentation", [])]
        layers += rows
        compulsory = (
            sum(lay["weight_bytes"] for lay in info["layers"]) + sum(info["input_bytes"]) + sum(info["output_bytes"])
        )
        regions[sym] = {
            "alias": aliases[sym],
            "calls": p["calls"],
            "records": records,
            "compulsory_ddr_bytes": compulsory,
            "sram_bytes_used": info["sram_bytes_used"],
            "estimated_cycles": info["estimated_cycles"],
            "call_cycles": last["total_cycles"],
            "sram": None if sram is None else {k: v for k, v in sram.items() if k != "layers"},
            "slot_macs": sum(r["macs"] * _rate(conf, r["dtype"]) for r in rows),
            **{
                k: p["total"][k]
                for k in (
                    "total_cycles",
                    "mac_cycles",
                    "vector_cycles",
                    "dma_cycles",
                    "ddr_read_bytes",
                    "ddr_write_bytes",
                    "macs",
                    "saturated_inputs",
                    "clamped_inputs",
                )
            },
            **{k: last.get(k, 0) for k in ("host_start_ns", "host_end_ns")},
        }
    total = sum(r["total_cycles"] for r in regions.values())
    slots = total * conf["mac_rows"] * conf["mac_cols"]
    return {
        "total_cycles": total,
        "ddr_bytes": sum(r["ddr_read_bytes"] + r["ddr_write_bytes"] for r in regions.values()),
        "compulsory_ddr_bytes": sum(r["compulsory_ddr_bytes"] for r in regions.values()),
        "mac_utilization": sum(r["slot_macs"] for r in regions.values()) / slots if slots else 0.0,
        "sram_peak_bytes": max((r["sram_bytes_used"] for r in report.regions.values()), default=0),
        "sram": sram_profile.task_sram([r["sram"] for r in regions.values()], conf["sram_bytes"]),
        "sram_fragmentation": frag,
        "saturated_inputs": sum(sum(r["saturated_inputs"]) for r in regions.values()),
        "clamped_inputs": sum(sum(r["clamped_inputs"]) for r in regions.values()),
        "layers": layers,
        "config": conf,
        "regions": regions,
    }


COUNTERS = ("outputs", "saturated", "fp16_overflow", "nan")


def _counts_of(last: dict, index: int) -> dict:
    """Command `index`'s saturation and overflow counters of the call (docs/npu.md section 5); 0 from
    a runtime that predates them."""
    return {k: last[f"command_{k}"][index] if f"command_{k}" in last else 0 for k in COUNTERS}


def _rate(conf: dict, dtype: str) -> int:
    return conf["fp16_rate_div"] if dtype == "float16" else 1


def _busy(records: list) -> int:
    return sum(r["end"] - r["start"] for r in records)


def _union(records: list) -> list:
    """The busy intervals of `records`, merged: sorted, disjoint [start, end) pairs."""
    merged: list = []
    for lo, hi in sorted((r["start"], r["end"]) for r in records if r["end"] > r["start"]):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _covered(merged: list, lo: int, hi: int) -> int:
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in merged)


def _layer(conf: dict, symbol: str, alias: str, layer: dict, records: list, busy_all: list) -> dict:
    """One layer's entry. Its span (``cycles.total``, ``start``, ``end``) is [first start, last end]
    of its commands, in cycles of its region's call. ``compute`` is the busy cycles of its MAC / vector
    commands, ``dma`` of its DMA commands (all channels). ``stall`` is the time in the span when no
    compute engine was busy (waiting for data); ``overlap`` the time in the span the compute engines
    spent on other layers (a layer's weights are loaded while the previous layer computes), so
    ``total = compute + overlap + stall``; without overlap, ``stall = total - compute``.
    ``mac_utilization`` is MACs over the MAC slots of ``compute + stall`` (the cycles that are the
    layer's own). ``roofline_bound`` compares the ideal compute cycles (MACs at the peak rate, or vector
    steps at full lanes) with the DDR bytes it moved / ``ddr_bytes_per_cycle``; ``intensity`` is MACs
    per DDR byte moved. ``compulsory_ddr_bytes``: its constants as stored plus those of its tensors
    that are region inputs or outputs (intermediates need not leave SRAM). ``outputs`` is the result
    elements its compute commands wrote; ``saturated`` the int8 / int16 results the clamp to the
    dtype's range changed at requantization, ``fp16_overflow`` the fp16 results that are +-inf,
    ``nan`` those that are NaN (docs/npu.md section 5), each also as ``*_fraction`` of ``outputs``."""
    compute = [r for r in records if r["engine"] in COMPUTE_ENGINES]
    dma = [r for r in records if r["engine"] and r["engine"].startswith("dma")]
    start = min((r["start"] for r in records), default=0)
    end = max((r["end"] for r in records), default=0)
    span, busy = end - start, _busy(compute)
    stall = span - _covered(busy_all, start, end)
    macs = sum(r["macs"] for r in compute)
    rd = sum(r["bus_bytes"] for r in dma if r["opcode"] == "DMA_LOAD")
    wr = sum(r["bus_bytes"] for r in dma if r["opcode"] == "DMA_STORE")
    rate = _rate(conf, layer["dtype"])
    if layer["kind"] in ("conv", "matmul"):  # the MAC array's layers
        ideal = math.ceil(macs * rate / (conf["mac_rows"] * conf["mac_cols"]))
    else:
        lanes = conf["vector_lanes"] // (2 if layer["dtype"] == "float16" else 1)
        ideal = math.ceil(layer["vector_steps"] / lanes)
    memory = (rd + wr) / conf["ddr_bytes_per_cycle"]
    slots = (busy + stall) * conf["mac_rows"] * conf["mac_cols"]
    counts = {k: sum(r.get(k, 0) for r in compute) for k in COUNTERS}
    fraction = {f"{k}_fraction": counts[k] / counts["outputs"] if counts["outputs"] else 0.0 for k in COUNTERS[1:]}
    return {
        "name": layer["name"],
        "region": alias,
        "symbol": symbol,
        "composite": layer["composite"],
        "kind": layer["kind"],
        "dtype": layer["dtype"],
        "cycles": {"compute": busy, "dma": _busy(dma), "stall": stall, "overlap": span - busy - stall, "total": span},
        "start": start,
        "end": end,
        "macs": macs,
        "mac_utilization": macs * rate / slots if slots else 0.0,
        "ddr_read_bytes": rd,
        "ddr_write_bytes": wr,
        "compulsory_ddr_bytes": layer["weight_bytes"] + layer["region_io_bytes"],
        "weight_bytes": layer["weight_bytes"],
        "ideal_compute_cycles": ideal,
        "roofline_bound": "compute" if ideal >= memory else "memory",
        "intensity": macs / (rd + wr) if rd + wr else None,
        "commands": len(records),
        **counts,
        **fraction,
    }


def saturation_warnings(prof: dict, fraction: float = SATURATION_WARN_FRACTION) -> list:
    """One line per layer whose saturated int8 / int16 results (or fp16 results that overflowed to
    +-inf or are NaN) exceed `fraction` of its outputs, in the layers' order.

    Parameters
    ----------
    prof : dict
        A `profile` result.
    fraction : float
        The threshold (0.1% by default).

    Returns
    -------
    list of str
        The warnings, each naming the layer, its region, the counts and what to change.
    """
    lines = []
    for lay in prof["layers"]:
        over = [
            f"{lay[k]} of {lay['outputs']} outputs {what} ({100 * lay[k + '_fraction']:.2f}%)"
            for k, what in (
                ("saturated", "saturated at requantization"),
                ("fp16_overflow", "overflowed fp16 to +-inf"),
                ("nan", "are NaN"),
            )
            if lay[k + "_fraction"] > fraction
        ]
        if over:
            lines.append(
                f"warning: layer {lay['name']} ({lay['region']}): {'; '.join(over)}; "
                + (
                    "its output scale is too small for these inputs: calibrate with data like them"
                    if lay["saturated_fraction"] > fraction
                    else "its results leave the fp16 range: scale the layer down or keep it in float32"
                )
            )
    return lines


def check_profile(prof) -> None:
    """NPUError(ERR_INVALID_CONFIG) unless `prof` is what `tvm_npu.profile` returned."""
    if not isinstance(prof, dict) or not isinstance(prof.get("layers"), list) or "total_cycles" not in prof:
        raise NPUError(
            "ERR_INVALID_CONFIG", f"pass the dict tvm_npu.profile(mod, inputs) returned, not {type(prof).__name__}"
        )


def to_csv(prof: dict, path) -> None:
    """Write one row per NPU layer (header: CSV_COLUMNS) to `path`.

    Parameters
    ----------
    prof : dict
        A `profile` result.
    path : str or os.PathLike
        The CSV file to write.
    """
    check_profile(prof)
    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for lay in prof["layers"]:
            c = lay["cycles"]
            w.writerow(
                [
                    lay["region"],
                    lay["name"],
                    lay["composite"],
                    lay["kind"],
                    lay["dtype"],
                    c["compute"],
                    c["dma"],
                    c["stall"],
                    c["overlap"],
                    c["total"],
                    lay["macs"],
                    f"{lay['mac_utilization']:.4f}",
                    lay["ddr_read_bytes"],
                    lay["ddr_write_bytes"],
                    lay["compulsory_ddr_bytes"],
                    "" if lay["intensity"] is None else f"{lay['intensity']:.3f}",
                    lay["roofline_bound"],
                    lay["saturated"],
                    lay["fp16_overflow"],
                    lay["nan"],
                ]
            )
