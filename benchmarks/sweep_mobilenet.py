"""Design-space sweep benchmark: MobileNetV2 224x224 (fp16, seeded weights) on 36 configurations —
MAC arrays 16x16 / 32x32 / 64x64, SRAM 512 KiB / 1 / 2 / 4 MiB, DDR 8 / 16 / 32 bytes per cycle — with
the default process pool. Prints the table, the wall time and the machine's load average (other work on
the machine slows the sweep; the load says how much). A benchmark, not a test: it prints numbers.

    python benchmarks/sweep_mobilenet.py [--jobs 2] [--out mobilenet_sweep] [--keep]

Without --keep, earlier results in the output folder are deleted first, so every configuration is
estimated again (with --keep the sweep resumes, which measures nothing).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import onnx

import tvm_npu
from tvm_npu.models import mobilenet_v2_shaped


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument("--out", default="mobilenet_sweep")
    parser.add_argument("--keep", action="store_true", help="resume from earlier results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.keep:
        (out / "results.jsonl").unlink(missing_ok=True)
    model = out / "mobilenet_v2_224.onnx"
    if not model.exists():
        onnx.save(mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000), str(model))
    load_before = os.getloadavg()
    start = time.perf_counter()
    res = tvm_npu.sweep(
        model, mac="16x16,32x32,64x64", sram="512KiB,1MiB,2MiB,4MiB", ddr_bw="8,16,32", out=out, jobs=args.jobs
    )
    wall = time.perf_counter() - start
    print(res.table())
    feasible = sum(bool(r.get("feasible")) for r in res.rows)
    per = sum(r.get("seconds", 0) for r in res.rows) / len(res.rows)  # as measured when each was estimated
    print(
        f"{len(res.rows)} configurations, {feasible} feasible, {len(res.pareto)} on the Pareto front; "
        f"{res.estimated} estimated in {wall:.1f} s wall on {args.jobs or os.cpu_count()} worker(s) "
        f"(plots included; {per:.2f} s per configuration in a worker); load average before "
        f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"
    )
    print("wrote " + ", ".join(str(f) for f in res.files))


if __name__ == "__main__":
    main()
