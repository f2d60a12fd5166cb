"""The one-command demo: MobileNetV2 (224x224, seeded weights) imported from ONNX, compiled for the NPU,
run on the reference NPU and checked against TVM's own CPU build, with where each op ran, the cycles,
MAC utilization and DDR traffic of each NPU region, and a report written (JSON, partition table, HTML
with figures)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tvm

from .. import runtime
from ..build import build
from ..contract.config import get_config
from ..frontend.onnx import from_onnx
from ..models.builders import mobilenet_v2_shaped
from ..partition.report import BuildReport

SIZE = 224


def run_demo(config: str = "npu-ref", out_dir: str | None = None, seed: int = 0) -> dict:
    """Compile, run and compare; returns the numbers it prints (and writes report.json to out_dir)."""
    cfg = get_config(config)
    if out_dir:  # a folder that cannot take the files fails now, not after the build
        from ..runtime.files import writable_folder

        writable_folder(out_dir)
    model = mobilenet_v2_shaped(seed=seed, size=SIZE, width=1.0, classes=1000)
    mod = from_onnx(model)
    x = np.random.default_rng(seed + 1).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)

    report = BuildReport()
    ex = build(mod, target="npu", config=cfg, report=report)
    npu = runtime.Model(ex)  # the checked boundary, as a user's call
    npu_out = npu(x)

    cpu_out = runtime.Model(tvm.compile(mod, target="llvm"))(x)
    max_err = float(np.abs(npu_out - cpu_out).max())
    rel_err = float(np.linalg.norm(npu_out - cpu_out) / np.linalg.norm(cpu_out))

    print(
        f"tvm_npu demo: MobileNetV2 (ONNX, 1x3x{SIZE}x{SIZE}, seeded weights) on {cfg.name} "
        f"({cfg.mac_rows}x{cfg.mac_cols} MACs, {cfg.sram_bytes // 1024} KiB SRAM), fp16 datapath\n"
    )
    print(f"Where each op ran: {report.summary()}")
    cpu_ops = [p for p in report.placements if p.device == "cpu"]
    for p in cpu_ops:
        print(f"  on the CPU: {p.op} ({p.var}): {p.code}: {p.reason}")
    if not cpu_ops:
        print("  every op on the NPU (the full per-op table is in the partition report)")
    print("\nNPU regions (cycles counted by the reference NPU while it ran):")
    total_cycles = 0
    profiles = {}
    alias = report.aliases()
    for mod_ in sorted(runtime.npu_modules(npu.vm), key=lambda m: alias.get(m["get_symbol"](), "")):
        prof = runtime.profile_of(mod_)
        symbol = mod_["get_symbol"]()
        profiles[symbol] = prof
        last = prof["last"]
        total_cycles += last["total_cycles"]
        region = report.regions[symbol]
        print(
            f"  {alias.get(symbol, symbol)}: {last['total_cycles']} cycles (compiler estimate "
            f"{region['estimated_cycles']}), {last['macs']} MACs, DDR read {last['ddr_read_bytes']} B / "
            f"write {last['ddr_write_bytes']} B, SRAM peak {region['sram_bytes_used']} B, "
            f"{region['boundary_transposes']} layout transposes at the boundary"
        )
    print(f"  total: {total_cycles} NPU cycles = {total_cycles / cfg.clock_mhz:.1f} us at {cfg.clock_mhz} MHz")
    from .profiler import collect

    prof = collect(report, list(profiles.values()))
    print(
        f"  MAC utilization {prof['mac_utilization']:.1%} (fp16 MACs fill {cfg.fp16_rate_div} int8 slots); "
        f"DDR {prof['ddr_bytes']} B = {prof['ddr_bytes'] / max(1, prof['compulsory_ddr_bytes']):.2f}x "
        f"compulsory; SRAM peak {prof['sram_peak_bytes']} B"
    )
    top_npu, top_cpu = np.argsort(-npu_out[0])[:3], np.argsort(-cpu_out[0])[:3]
    print(
        f"\nNPU (fp16) vs TVM CPU (fp32): relative difference {rel_err:.2e} (max abs {max_err:.2e}); "
        f"top-3 classes NPU {top_npu.tolist()} / CPU {top_cpu.tolist()}"
    )
    ok = rel_err < 1e-2 and top_npu[0] == top_cpu[0]
    print("PASS" if ok else "MISMATCH")
    result = {
        "config": cfg.name,
        "max_abs_err": max_err,
        "rel_err": rel_err,
        "npu_cycles": total_cycles,
        "ok": bool(ok),
        "report": report.to_dict(),
        "profiles": profiles,
    }
    if out_dir:
        from ..runtime.files import write_text
        from .commands import write_report
        from .html_report import write_html

        path = Path(out_dir)
        write_text(path / "report.json", json.dumps(result, indent=2))
        js, txt = write_report(report, [path / "partition.json", path / "partition.txt"])

        page, *_ = write_html(prof, report, path / "report.html")
        print(f"report written to {path / 'report.json'} (partition: {js.name}, {txt.name}; figures: {page.name})")
    return result
