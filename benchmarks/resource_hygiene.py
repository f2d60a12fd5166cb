"""Resource hygiene (issue 9 item 5): memory and file handles across many runs and many module loads.

    python benchmarks/resource_hygiene.py --runs 10000 --loads 1000

`runs`: a small compiled model (fp16 conv + dense on the NPU, a CPU op between) is called again and
again through one Relax VM, and the resident set size (/proc/self/statm) is read after a warm-up and at
the end. `loads`: the exported artifact is loaded (tvm_npu.load_module), run and dropped again and
again; RSS and the number of open file descriptors (/proc/self/fd) are read the same way. Prints the
growth per run / per load; tests/runtime/test_resource_hygiene.py runs a bounded form, docs/reliability.md
records the full one.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def small_model(target="npu"):
    """conv -> relu (NPU) -> sin (CPU) -> flatten -> dense (NPU), fp16, built for `target` ("npu" or
    "llvm": TVM alone, the same model without NPU modules); and an input."""
    import tvm

    import tvm_npu
    from tvm_npu.models import GraphBuilder

    g = GraphBuilder(0)
    y = g.conv("input", 3, 8, 3)
    y = g.node("Sin", [y])
    y = g.gemm(g.node("Flatten", [y]), 8 * 12 * 12, 10)
    mod = tvm_npu.from_onnx(g.model([1, 3, 12, 12], y, [1, 10]))
    ex = tvm_npu.build(mod) if target == "npu" else tvm.compile(mod, target="llvm")
    return ex, np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)


def _growth(count: int, cycle, warmup: int) -> dict:
    for _ in range(warmup):
        cycle()
    gc.collect()
    rss0, fds0 = rss_bytes(), open_fds()
    for _ in range(count):
        cycle()
    gc.collect()
    rss1, fds1 = rss_bytes(), open_fds()
    return {
        "count": count,
        "rss_before": rss0,
        "rss_after": rss1,
        "growth": rss1 - rss0,
        "per_cycle": (rss1 - rss0) / count,
        "fds_before": fds0,
        "fds_after": fds1,
    }


def run_growth(runs: int, warmup: int = 300) -> dict:
    """`runs` calls of one VM, after `warmup` calls; every result must equal the first."""
    import tvm
    from tvm import relax

    ex, x = small_model()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    xt = tvm.runtime.tensor(x)
    first = vm["main"](xt).numpy()
    wrong = []

    def cycle():
        if not np.array_equal(vm["main"](xt).numpy(), first):
            wrong.append(1)

    out = _growth(runs, cycle, warmup)
    out["identical"] = not wrong
    return out


def stream_load_growth(loads: int, warmup: int = 100) -> dict:
    """`loads` deserializations of the model's NPU modules (what loading an artifact does for each NPU
    region: ffi.Module.load_from_bytes.npu, stream parsing and validation), each dropped again."""
    import struct

    import tvm_ffi

    import tvm_npu

    ex, _ = small_model()
    saved = []
    for module in tvm_npu.runtime.npu_modules(ex):  # the form NPUModuleObj::SaveToBytes writes
        blob, symbol = bytes(module["get_stream"]()), module["get_symbol"]().encode()
        saved.append(struct.pack("<Q", len(symbol)) + symbol + struct.pack("<Q", len(blob)) + blob)
    tvm_npu.runtime.load_library()
    load = tvm_ffi.get_global_func("ffi.Module.load_from_bytes.npu")
    return _growth(loads, lambda: [load(b) for b in saved], warmup)


def artifact_load_growth(loads: int, target="npu", warmup: int = 20) -> dict:
    """`loads` cycles of load (tvm_npu.load_module) / VM / run / drop of an exported artifact."""
    import tvm
    from tvm import relax

    import tvm_npu

    ex, x = small_model(target)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.so"
        tvm_npu.export_library(ex, path)
        want = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        wrong = []

        def cycle():
            vm = relax.VirtualMachine(tvm_npu.load_module(path), tvm.cpu())
            if not np.array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), want):
                wrong.append(1)

        out = _growth(loads, cycle, warmup)
        out["artifact_bytes"] = path.stat().st_size
    out["identical"] = not wrong
    return out


def _line(what, r, unit):
    return (
        f"{r['count']} {what}: RSS {r['rss_before'] / 2**20:.1f} -> {r['rss_after'] / 2**20:.1f} MiB "
        f"({r['growth'] / 1024:+.0f} KiB, {r['per_cycle']:+.1f} B per {unit}); open files "
        f"{r['fds_before']} -> {r['fds_after']}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--loads", type=int, default=1000)
    args = ap.parse_args(argv)
    r = run_growth(args.runs)
    print(_line("runs of one VM", r, "run") + f"; results identical: {r['identical']}")
    print(_line("NPU module loads (load_from_bytes.npu)", stream_load_growth(args.loads * 10), "load"))
    for target in ("npu", "llvm"):
        r = artifact_load_growth(args.loads, target)
        print(
            _line(f"artifact loads ({target}, {r['artifact_bytes']} B)", r, "load")
            + f"; results identical: {r['identical']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
