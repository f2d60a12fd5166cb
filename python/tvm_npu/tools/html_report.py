"""An HTML report of a profile, with PNG figures next to it (matplotlib, Agg backend).

    report = tvm_npu.BuildReport()
    prof = tvm_npu.profile(mod, report=report)
    write_html(prof, report, "out/model.html")   # + model_cycles.png, model_roofline.png, model_sram*.png

Figures: per-layer cycles (compute / DMA / stall) with MAC utilization; a roofline (arithmetic intensity,
MACs per DDR byte, against achieved MACs per cycle); the SRAM occupancy over the run (from the planner's
per-layer buffers and weight slots, `layer_sram` and `weight_slots` in report.regions); per layer, peak and
time-weighted SRAM utilization and how contiguous the free SRAM is at the peak (tools/sram_profile.py),
with a table of the same numbers and the fragmentation warnings. The page also
holds the headline numbers and the partition table (where each op runs, or the reason code of why not).
Without a report (None) the SRAM timeline and the partition table are left out.
"""

from __future__ import annotations

import html
from pathlib import Path

from ..partition.report import BuildReport
from ..runtime.files import replacing, write_text
from .profiler import SATURATION_WARN_FRACTION

COLORS = {"compute": "#4C72B0", "dma": "#DD8452", "stall": "#C44E52", "util": "#2CA02C"}
CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}th{background:#eee}"
    "td.num{text-align:right}tr.cpu{background:#fff3f0}img{max-width:100%;border:1px solid #ddd}"
    "tr.warn{background:#ffd7d7;font-weight:bold}"
)


def _short(lay: dict) -> str:
    return lay["name"].replace(lay["symbol"], lay["region"])


def _cycles_figure(plt, prof: dict, path: Path) -> None:
    layers = prof["layers"]
    names = [f"{_short(lay)} {lay['kind']}" for lay in layers]
    x = range(len(layers))
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(layers) + 3), 5))
    bottom = [0] * len(layers)
    for key in ("compute", "dma", "stall"):
        vals = [lay["cycles"][key] for lay in layers]
        ax.bar(x, vals, bottom=bottom, color=COLORS[key], label=f"{key} cycles")
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("cycles (DMA runs alongside compute)")
    ax.set_xticks(list(x), names, rotation=60, ha="right", fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(
        list(x), [100 * lay["mac_utilization"] for lay in layers], "o-", color=COLORS["util"], label="MAC utilization"
    )
    ax2.set_ylabel("MAC utilization (%)")
    ax2.set_ylim(0, 105)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    ax.set_title(
        f"Cycles per layer ({prof['total_cycles']} total, {100 * prof['mac_utilization']:.1f}% MAC utilization)"
    )
    fig.tight_layout()
    _save(plt, fig, path)


def _roofline_figure(plt, prof: dict, path: Path) -> None:
    conf = prof["config"]
    slots, bw = conf["mac_rows"] * conf["mac_cols"], conf["ddr_bytes_per_cycle"]
    pts = [lay for lay in prof["layers"] if lay["macs"] and lay["cycles"]["compute"] + lay["cycles"]["stall"]]
    finite = [lay["intensity"] for lay in pts if lay["intensity"] is not None]
    hi = max(finite + [slots / bw]) * 4  # the right edge: layers without DDR traffic
    lo = min(finite + [slots / bw]) / 4
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for dtype in sorted({lay["dtype"] for lay in pts} or {"int8"}):
        peak = slots / (conf["fp16_rate_div"] if dtype == "float16" else 1)
        ax.plot(
            xs,
            [min(peak, bw * v) for v in xs],
            "-",
            lw=2,
            color="#333" if dtype != "float16" else "#888",
            label=f"roof {dtype}: {peak:g} MACs/cycle",
        )
    ax.axvline(hi, color="#bbb", ls=":")
    ax.text(
        hi,
        0.98,
        "no DDR traffic ",
        rotation=90,
        va="top",
        ha="right",
        fontsize=8,
        color="#666",
        transform=ax.get_xaxis_transform(),
    )
    marks = {"compute": "o", "memory": "s"}
    for lay in pts:
        x = hi if lay["intensity"] is None else lay["intensity"]
        y = lay["macs"] / (lay["cycles"]["compute"] + lay["cycles"]["stall"])
        ax.plot(
            [x],
            [y],
            marks[lay["roofline_bound"]],
            ms=7,
            alpha=0.8,
            color="#4C72B0" if lay["dtype"] != "float16" else "#DD8452",
        )
        ax.annotate(_short(lay).split("_")[-1], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.plot([], [], "o", color="#777", label="compute-bound layer")
    ax.plot([], [], "s", color="#777", label="memory-bound layer")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"arithmetic intensity (MACs per DDR byte; roof slope {bw} B/cycle)")
    ax.set_ylabel("achieved MACs per cycle")
    skipped = len(prof["layers"]) - len(pts)
    ax.set_title("Roofline" + (f" ({skipped} layer(s) without MACs not shown)" if skipped else ""))
    ax.legend(fontsize=8, loc="best")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    _save(plt, fig, path)


def sram_spans(prof: dict, report: BuildReport) -> list:
    """(start, end, lo, hi, layer, what) per planned SRAM use: each layer's activation buffers over its
    span ("buffers"), and each of its weight blocks from the start of the layer its load may overlap
    to the layer's end ("weights"). Cycles are offset by the calls of the regions before it (the
    regions run one after another)."""
    spans, offset = [], 0
    for sym, reg in prof["regions"].items():
        info = report.regions.get(sym, {})
        sram, slots = info.get("layer_sram", {}), info.get("weight_slots", {})
        layers = {lay["name"]: lay for lay in prof["layers"] if lay["symbol"] == sym}
        order = [name for name in sram if name in layers]
        for name in order:
            lay = layers[name]
            base, top = sram[name]
            spans.append((offset + lay["start"], offset + lay["end"], base, top, lay, "buffers"))
            for k, slot, nbytes in slots.get(name, []):
                first = layers[order[k]] if k is not None else lay
                spans.append((offset + first["start"], offset + lay["end"], slot, slot + nbytes, lay, "weights"))
        offset += reg["call_cycles"]
    return spans


def _sram_figure(plt, prof: dict, spans: list, path: Path) -> None:
    size = prof["config"]["sram_bytes"]
    fig, ax = plt.subplots(figsize=(11, 5))
    buffers = [sp for sp in spans if sp[5] == "buffers"]
    for i, (s, e, base, top, lay, _) in enumerate(buffers):
        label = f"{_short(lay)} {lay['kind']}" if len(buffers) <= 12 else None
        ax.fill_between([s, e], base, top, color=f"C{i % 10}", alpha=0.6, lw=0, label=label, zorder=2)
        ax.fill_between([s, e], 0, base, color="#999", alpha=0.15, lw=0, zorder=1)
    for s, e, lo, hi, _, what in spans:
        if what == "weights":
            ax.fill_between([s, e], lo, hi, facecolor="none", edgecolor="#555", hatch="///", lw=0.3, zorder=3)
    edges = sorted({t for s, e, *_ in spans for t in (s, e)})
    used = [max((hi for s, e, _, hi, *_ in spans if s <= a < e), default=0) for a in edges]
    ax.step(edges, used, where="post", color="k", lw=1.5, label="highest SRAM byte in use")
    ax.axhline(size, color="r", ls="--", label=f"SRAM size {size} B")
    ax.fill_between([], [], color="#999", alpha=0.25, label="residents (below the layer's buffers)")
    ax.fill_between([], [], facecolor="none", edgecolor="#555", hatch="///", label="weight blocks, load to use")
    ax.set_xlabel("cycle")
    peak = max(used, default=1)
    if peak < size / 5:  # on a linear scale up to the SRAM size the use would be a line at the bottom
        ax.set_yscale("log", nonpositive="clip")
        ax.set_ylim(max(1, min(hi for _, _, _, hi, *_ in spans if hi) / 2), size * 1.5)
    else:
        ax.set_ylim(0, size * 1.08)
    ax.set_ylabel("SRAM bytes" + (" (log scale)" if peak < size / 5 else ""))
    ax.set_title(f"SRAM occupancy (peak {prof['sram_peak_bytes']} B of {size} B)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    _save(plt, fig, path)


def headline(prof: dict) -> dict:
    """The numbers at the top of the page, as they are printed there."""
    out = {
        "total_cycles": str(prof["total_cycles"]),
        "mac_utilization": f"{100 * prof['mac_utilization']:.1f}%",
        "ddr_bytes": str(prof["ddr_bytes"]),
        "compulsory_ddr_bytes": str(prof["compulsory_ddr_bytes"]),
        "sram_peak_bytes": str(prof["sram_peak_bytes"]),
    }
    sram = prof.get("sram")
    if sram is not None:  # tools/sram_profile.py
        out["sram_peak_utilization"] = f"{100 * sram['peak_utilization']:.1f}%"
        out["sram_time_weighted_utilization"] = f"{100 * sram['time_weighted_utilization']:.1f}%"
        out["sram_free_at_peak"] = (
            f"{sram['free_bytes_at_peak']} B, largest block {sram['largest_free_block_at_peak']} B"
        )
    return out


def _sram_layers_figure(plt, prof: dict, path: Path) -> None:
    """Per layer: peak and time-weighted SRAM utilization (bars), and the largest free block at the
    layer's peak as a share of the free bytes then (a line: 100% is no fragmentation)."""
    layers = [lay for lay in prof["layers"] if lay.get("sram")]
    x = list(range(len(layers)))
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(layers) + 3), 5))
    w = 0.4
    ax.bar([i - w / 2 for i in x], [100 * lay["sram"]["peak_utilization"] for lay in layers], w,
           color=COLORS["compute"], label="peak utilization")  # fmt: skip
    ax.bar([i + w / 2 for i in x], [100 * lay["sram"]["time_weighted_utilization"] for lay in layers], w,
           color=COLORS["dma"], label="time-weighted utilization")  # fmt: skip
    ax.set_ylabel("% of SRAM")
    ax.set_ylim(0, 105)
    ax.set_xticks(x, [f"{_short(lay)} {lay['kind']}" for lay in layers], rotation=60, ha="right", fontsize=8)
    ax2 = ax.twinx()
    contiguous = [
        100 * lay["sram"]["largest_free_block_at_peak"] / max(1, lay["sram"]["free_bytes_at_peak"]) for lay in layers
    ]
    ax2.plot(x, contiguous, "o-", color=COLORS["stall"], label="largest free block / free bytes at the peak")
    ax2.set_ylabel("contiguous share of free SRAM (%)")
    ax2.set_ylim(0, 105)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    sram = prof["sram"]
    ax.set_title(
        f"SRAM per layer (peak {100 * sram['peak_utilization']:.1f}%, "
        f"time-weighted {100 * sram['time_weighted_utilization']:.1f}% of {sram['sram_bytes']} B)"
    )
    fig.tight_layout()
    _save(plt, fig, path)


def _sram_table(prof: dict) -> str:
    """Per NPU layer: its SRAM numbers (tools/sram_profile.py), and the fragmentation warnings."""
    rows = []
    for lay in prof["layers"]:
        s = lay.get("sram")
        cells = [_short(lay), lay["kind"]] + (
            ["-"] * 5
            if s is None
            else [
                str(s["peak_bytes"]),
                f"{100 * s['peak_utilization']:.2f}%",
                f"{100 * s['time_weighted_utilization']:.2f}%",
                str(s["free_bytes_at_peak"]),
                str(s["largest_free_block_at_peak"]),
            ]
        )
        rows.append("<tr>" + "".join(f'<td class="num">{html.escape(c)}</td>' for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("layer", "kind", "peak bytes", "peak", "time-weighted", "free at peak", "largest free block")
    )
    warns = "".join(
        f'<li class="warn">{html.escape(f["region"])}: {html.escape(f["message"])}</li>'
        for f in prof.get("sram_fragmentation", [])
    )
    return (
        "<h2>SRAM utilization</h2><p>From the planner's allocations, weighted by each command's measured "
        "cycles: peak and time-weighted (bytes live x command cycles / (SRAM bytes x command cycles)) "
        "utilization, and at the peak the free bytes against the largest free block.</p>"
        + (f'<ul id="fragmentation">{warns}</ul>' if warns else "<p>No fragmentation warnings.</p>")
        + f'<table id="sram"><tr>{head}</tr>{"".join(rows)}</table>'
    )


def _saturation_table(prof: dict) -> str:
    """Per NPU layer: its outputs and how many saturated at requantization (int8 / int16), overflowed
    to +-inf or are NaN (fp16; docs/npu.md section 5). A row above SATURATION_WARN_FRACTION of its
    outputs is highlighted (class "warn"), as the CLI warns about it."""
    rows = []
    for lay in prof["layers"]:
        worst = max(lay.get(f"{k}_fraction", 0.0) for k in ("saturated", "fp16_overflow", "nan"))
        cells = [_short(lay), lay["kind"], lay["dtype"]]
        cells += [str(lay.get(k, 0)) for k in ("outputs", "saturated", "fp16_overflow", "nan")]
        cells.append(f"{100 * worst:.3f}%")
        cls = "warn" if worst > SATURATION_WARN_FRACTION else "ok"
        rows.append(f'<tr class="{cls}">' + "".join(f'<td class="num">{html.escape(c)}</td>' for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("layer", "kind", "dtype", "outputs", "saturated", "fp16 overflow", "NaN", "worst fraction")
    )
    return (
        "<h2>Saturation and overflow</h2><p>Results the int8 / int16 requantization clipped to the "
        "dtype's range, and fp16 results that are +-inf or NaN (rows above "
        f"{100 * SATURATION_WARN_FRACTION:g}% of the layer's outputs highlighted).</p>"
        f'<table id="saturation"><tr>{head}</tr>{"".join(rows)}</table>'
    )


def _placement_table(report: BuildReport) -> str:
    alias = report.aliases()
    rows = []
    for i, p in enumerate(report.placements):
        where = f"{alias.get(p.region, p.region)} ({p.composite})" if p.device == "npu" else ""
        why = f"{p.code}: {p.reason}" if p.code else ""
        cells = [str(i), p.var, p.op, p.device, p.precision, where, why, "" if p.macs is None else str(p.macs)]
        rows.append(
            f'<tr class="{html.escape(p.device)}">' + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("#", "var", "op", "device", "precision", "region (pattern)", "reason code", "MACs")
    )
    return (
        f"<h2>Partition</h2><p>{html.escape(report.summary())}</p>"
        f'<table id="placements"><tr>{head}</tr>{"".join(rows)}</table>'
    )


def _pyplot_to(path) -> tuple:
    """matplotlib's pyplot on the Agg backend (files, no display), and `path` as a Path whose folder exists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, Path(path)


def _save(plt, fig, path) -> None:
    """Save a figure as PNG through a temporary file renamed onto `path` (runtime/files.py)."""
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)


def write_html(prof: dict, report: BuildReport | None, path) -> list[Path]:
    """Write `path` (HTML) and its PNG figures next to it (`<stem>_cycles.png`, ...).

    Parameters
    ----------
    prof : dict
        A `tvm_npu.profile` result.
    report : BuildReport or None
        The report of the same build (pass it to `profile(..., report=)`); adds the SRAM timeline and
        the partition table.
    path : str or os.PathLike
        The HTML file to write.

    Returns
    -------
    list of Path
        The HTML file, then the PNG files.
    """
    plt, out = _pyplot_to(path)
    figs = {
        "cycles": "Cycles and MAC utilization per layer",
        "roofline": "Roofline: arithmetic intensity against achieved MACs per cycle",
    }
    spans = sram_spans(prof, report) if report is not None else []
    if spans:
        figs["sram"] = (
            "SRAM occupancy over time (each layer's buffers over its span; grey: residents; "
            "hatched: weight blocks from the start of their load to their layer's end)"
        )
    if prof.get("sram") is not None:
        figs["sram_layers"] = "SRAM utilization per layer: peak, time-weighted, and how contiguous the free SRAM is"
    pngs = {k: out.with_name(f"{out.stem}_{k}.png") for k in figs}
    _cycles_figure(plt, prof, pngs["cycles"])
    _roofline_figure(plt, prof, pngs["roofline"])
    if "sram_layers" in figs:
        _sram_layers_figure(plt, prof, pngs["sram_layers"])
    if spans:
        _sram_figure(plt, prof, spans, pngs["sram"])

    conf = prof["config"]
    labels = {
        "total_cycles": "total cycles",
        "mac_utilization": "MAC utilization",
        "ddr_bytes": "DDR bytes",
        "compulsory_ddr_bytes": "compulsory DDR bytes",
        "sram_peak_bytes": "SRAM peak bytes",
        "sram_peak_utilization": "SRAM peak utilization",
        "sram_time_weighted_utilization": "SRAM time-weighted utilization",
        "sram_free_at_peak": "SRAM free at the peak",
    }
    heads = "".join(
        f'<tr><th>{labels[k]}</th><td class="num" id="{k}">{html.escape(v)}</td></tr>'
        for k, v in headline(prof).items()
    )
    us = prof["total_cycles"] / conf["clock_mhz"]
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>tvm_npu report: "
        f"{html.escape(out.stem)}</title><style>{CSS}</style></head><body>",
        f"<h1>tvm_npu profile: {html.escape(out.stem)}</h1>",
        f"<p>{len(prof['layers'])} NPU layers in {len(prof['regions'])} region(s); "
        f"{us:.1f} us at {conf['clock_mhz']} MHz; DDR {prof['ddr_bytes']} B against "
        f"{prof['compulsory_ddr_bytes']} B compulsory "
        f"({prof['ddr_bytes'] / max(1, prof['compulsory_ddr_bytes']):.2f}x)</p>",
        f'<table id="headline">{heads}</table>',
    ]
    for k, title in figs.items():
        parts.append(f'<h2>{html.escape(title)}</h2><img src="{html.escape(pngs[k].name)}" alt="{html.escape(title)}">')
    if prof.get("sram") is not None:
        parts.append(_sram_table(prof))
    parts.append(_saturation_table(prof))
    if report is not None:
        parts.append(_placement_table(report))
    parts.append("</body></html>\n")
    write_text(out, "\n".join(parts))
    return [out, *pngs.values()]


def _sustain_figure(plt, result, path: Path) -> None:
    tl, s = result.timeline, result.summary
    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
    axes[0].plot(tl["t_s"], tl["temp_c"], color=COLORS["stall"])
    axes[0].axhline(s["threshold_c"], color="grey", linestyle="--", label="throttle threshold")
    axes[0].set_ylabel("die temperature (C)")
    axes[0].legend(loc="lower right", fontsize=8)
    axes[1].step(tl["t_s"], tl["mhz"], where="post", color=COLORS["compute"])
    axes[1].set_ylabel("NPU clock (MHz)")
    axes[2].step(tl["fps_t_s"], tl["fps"], where="post", color=COLORS["util"])
    axes[2].set_ylabel("frames per second")
    axes[2].set_xlabel("time (s)")
    axes[0].set_title(f"Sustained run: {s['policy']} policy, {s['thermal']} cooler, {s['config']}")
    fig.tight_layout()
    _save(plt, fig, path)


def write_sustain_html(result, path) -> list[Path]:
    """Write a sustained run (tools/sustain.py) as an HTML page with its figure next to it
    (`<stem>_sustain.png`: temperature, clock and fps over time) and the summary's numbers.

    Returns
    -------
    list of Path
        The HTML file, then the PNG file.
    """
    plt, out = _pyplot_to(path)
    png = out.with_name(f"{out.stem}_sustain.png")
    _sustain_figure(plt, result, png)
    rows = "".join(
        f'<tr><th>{html.escape(k)}</th><td class="num" id="{html.escape(k)}">'
        f"{html.escape(f'{v:.4g}' if isinstance(v, float) else str(v))}</td></tr>"
        for k, v in result.summary.items()
    )
    write_text(
        out,
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>tvm_npu sustained run: "
        f"{html.escape(out.stem)}</title><style>{CSS}</style></head><body>"
        f"<h1>tvm_npu sustained run: {html.escape(out.stem)}</h1><pre>{html.escape(result.text())}</pre>"
        f'<img src="{html.escape(png.name)}" alt="temperature, clock and fps over time">'
        f'<table id="summary">{rows}</table></body></html>\n',
    )
    return [out, png]
