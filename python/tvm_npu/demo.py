"""The one-command demo: a small CNN compiled for the NPU, run on the reference NPU, checked against
TVM's own CPU build, with where each op ran and the cycles each NPU region took."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from . import runtime
from .build import build
from .config import get_config
from .frontend import from_onnx
from .models import small_cnn
from .report import BuildReport


def run_demo(config: str = "npu-ref", out_dir: str | None = None, seed: int = 0) -> dict:
    """Compile, run and compare; returns the numbers it prints (and writes report.json to out_dir)."""
    cfg = get_config(config)
    model = small_cnn(seed)
    mod = from_onnx(model)
    x = np.random.default_rng(seed + 1).standard_normal((1, 3, 32, 32)).astype(np.float32)

    report = BuildReport()
    ex = build(mod, target="npu", config=cfg, report=report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    npu_out = vm["main"](tvm.runtime.tensor(x)).numpy()

    cpu_ex = tvm.compile(mod, target="llvm")
    cpu_out = relax.VirtualMachine(cpu_ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    max_err = float(np.abs(npu_out - cpu_out).max())

    print(f"tvm_npu demo: small CNN (ONNX, 1x3x32x32) on {cfg.name} "
          f"({cfg.mac_rows}x{cfg.mac_cols} MACs, {cfg.sram_bytes // 1024} KiB SRAM)\n")
    print("Where each op ran:")
    print(report.table())
    print("\nNPU regions (cycles counted by the reference NPU while it ran):")
    total_cycles = 0
    profiles = {}
    alias = report.aliases()
    for mod_ in sorted(runtime.npu_modules(vm), key=lambda m: alias.get(m["get_symbol"](), "")):
        prof = runtime.profile_of(mod_)
        symbol = mod_["get_symbol"]()
        profiles[symbol] = prof
        last = prof["last"]
        total_cycles += last["total_cycles"]
        region = report.regions[symbol]
        print(f"  {alias.get(symbol, symbol)}: {last['total_cycles']} cycles (compiler estimate "
              f"{region['estimated_cycles']}), {last['macs']} MACs, DDR read {last['ddr_read_bytes']} B / "
              f"write {last['ddr_write_bytes']} B, SRAM peak {region['sram_bytes_used']} B, "
              f"{region['boundary_transposes']} layout transposes at the boundary")
    print(f"  total: {total_cycles} NPU cycles = {total_cycles / cfg.clock_mhz:.1f} us at {cfg.clock_mhz} MHz")
    top_npu, top_cpu = np.argsort(-npu_out[0])[:3], np.argsort(-cpu_out[0])[:3]
    print(f"\nNPU (fp16) vs TVM CPU (fp32): max abs difference {max_err:.2e}; "
          f"top-3 classes NPU {top_npu.tolist()} / CPU {top_cpu.tolist()}")
    ok = max_err < 1e-2 and top_npu[0] == top_cpu[0]
    print("PASS" if ok else "MISMATCH")
    result = {"config": cfg.name, "max_abs_err": max_err, "npu_cycles": total_cycles, "ok": bool(ok),
              "report": report.to_dict(), "profiles": profiles}
    if out_dir:
        path = Path(out_dir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "report.json").write_text(json.dumps(result, indent=2))
        js, txt = report.write(path / "partition")
        print(f"report written to {path / 'report.json'} (partition: {js.name}, {txt.name})")
    return result
