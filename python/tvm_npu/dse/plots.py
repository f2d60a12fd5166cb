"""Sweep stage 4 — the plots: latency against SRAM, against MAC count and against area (with the Pareto
front of each DDR bandwidth joined), and energy against latency.

One PNG each; Pareto-front configurations (sweep_table.py) are black-edged stars. In the first two, lines
join the configurations that differ only in the x axis' resource: a flat line is hardware that buys nothing.
"""

from __future__ import annotations

from pathlib import Path

from .grid import size_name


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a build server or a worker
    import matplotlib.pyplot as plt

    return plt


def _lines(ax, rows, x_key, group_keys, label):
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in group_keys), []).append(r)
    firsts, seconds = sorted({k[0] for k in groups}), sorted({k[1] for k in groups})
    for key, rs in sorted(groups.items()):  # colour: the first other resource; line style: the second
        rs = sorted(rs, key=lambda r: r[x_key])
        ax.plot(
            [r[x_key] for r in rs],
            [r["latency_us"] for r in rs],
            marker="o",
            ms=4,
            label=label(key),
            color=f"C{firsts.index(key[0]) % 10}",
            linestyle=("-", "--", ":", "-.")[seconds.index(key[1]) % 4],
        )
        front = [r for r in rs if r["pareto"]]
        _stars(ax, front, x_key, "latency_us", zorder=3)


def write_plots(rows: list[dict], folder: Path, title: str) -> list[Path]:
    """latency_vs_sram.png, latency_vs_macs.png, latency_vs_area.png, energy_vs_latency.png in `folder`."""
    plt = _plt()
    ok = [r for r in rows if r.get("feasible")]
    paths = []
    if not ok:
        return paths
    star = "stars: Pareto front (latency and area, per DDR bandwidth)"

    # (x axis, lines of equal other resources, their label, tick label, axis name, file)
    for x_key, others, label, tick, xlabel, file in (
        (
            "sram_bytes",
            ("mac_count", "ddr_bytes_per_cycle"),
            lambda k: f"{k[0]} MACs, DDR {k[1]} B/cycle",
            size_name,
            "SRAM",
            "latency_vs_sram.png",
        ),
        (
            "mac_count",
            ("sram_bytes", "ddr_bytes_per_cycle"),
            lambda k: f"SRAM {size_name(k[0])}, DDR {k[1]} B/cycle",
            str,
            "MACs (rows x columns)",
            "latency_vs_macs.png",
        ),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _lines(ax, ok, x_key, others, label)
        xs = sorted({r[x_key] for r in ok})
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [tick(x) for x in xs])
        ax.set(xlabel=xlabel, ylabel="latency (us, NPU regions)", title=f"{title}: latency vs {xlabel}\n{star}")
        paths.append(_save(fig, ax, folder / file))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for bw in sorted({r["ddr_bytes_per_cycle"] for r in ok}):
        rs = [r for r in ok if r["ddr_bytes_per_cycle"] == bw]
        dots = ax.scatter([r["area_mm2"] for r in rs], [r["latency_us"] for r in rs], s=18, alpha=0.6)
        front = sorted((r for r in rs if r["pareto"]), key=lambda r: r["area_mm2"])
        ax.plot(
            [r["area_mm2"] for r in front],
            [r["latency_us"] for r in front],
            drawstyle="steps-post",
            color=dots.get_facecolor()[0],
            label=f"DDR {bw} B/cycle: front",
        )
        _stars(ax, front, "area_mm2", "latency_us", zorder=3)
    ax.set(
        xlabel="area of MAC array + SRAM (mm^2, 45 nm, docs/dse.md)",
        ylabel="latency (us, NPU regions)",
        title=f"{title}: latency vs area\n{star}",
    )
    paths.append(_save(fig, ax, folder / "latency_vs_area.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    sc = ax.scatter(
        [r["latency_us"] for r in ok],
        [r["energy_uj"] for r in ok],
        c=[r["sram_bytes"] / 2**20 for r in ok],
        s=[3 * r["mac_count"] ** 0.5 for r in ok],
        cmap="viridis",
        alpha=0.8,
    )
    front = [r for r in ok if r["pareto"]]
    _stars(ax, front, "latency_us", "energy_uj", label="Pareto front (latency and area, per DDR bandwidth)")
    fig.colorbar(sc, ax=ax, label="SRAM (MiB)")
    ax.set(
        xlabel="latency (us)",
        ylabel="energy per inference (uJ, docs/dse.md constants)",
        title=f"{title}: energy vs latency (marker size: MAC array)",
    )
    paths.append(_save(fig, ax, folder / "energy_vs_latency.png"))
    return paths


def _stars(ax, rows, x_key: str, y_key: str, **kwargs) -> None:
    """Ring the Pareto-optimal `rows` with hollow stars."""
    xs, ys = [r[x_key] for r in rows], [r[y_key] for r in rows]
    ax.scatter(xs, ys, marker="*", s=140, facecolors="none", edgecolors="black", **kwargs)


def _save(fig, ax, path: Path) -> Path:
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path
