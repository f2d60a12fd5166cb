"""Memory growth per build + run (issue 32): build a small model, run it once, drop everything; repeat.

    python benchmarks/memory_growth.py --iterations 100 --warmup 10
    python benchmarks/memory_growth.py --path npu-build --model small_cnn --iterations 200

Four paths, each building (or loading) the same model again and again in one process:

- `npu-build`: `tvm_npu.build(mod)`;
- `npu-compile`: `tvm.compile(mod, target="npu", relax_pipeline="npu")`;
- `llvm`: a plain TVM build, `tvm.compile(mod, target="llvm")` — TVM's own growth, for comparison (out of
  tvm_npu's scope; tvm_npu's part is what the NPU paths add above it);
- `npu-load`: no build in the loop: `tvm_npu.build` once, `tvm_npu.export_library` to a temporary file,
  then `tvm_npu.load_module` of it each iteration.

Each iteration builds (or loads), creates a Relax VM, runs `main` once, checks the result against the first
iteration's, and drops every reference. After `--warmup` iterations the resident set size
(/proc/self/statm) is read, and again after the rest; the growth per iteration is printed. Besides RSS it
reports whether the last iteration's objects were freed once dropped: a weak reference to the
`tvm.relax.Executable` (a Python object), and the strong reference counts (read from the tvm-ffi object
header: tvm-ffi's modules take no Python weak reference) of the runtime module the VM ran (`ex.jit()`:
the executable's own module, or the copy TVM exported and loaded for it) and of each NPU runtime module
in it, once this script's handle is the only one it keeps; 0 other references means freed.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import tempfile
import weakref
from pathlib import Path

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
PATHS = ("npu-build", "npu-compile", "llvm", "npu-load")


def rss_bytes() -> int:
    """The resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def strong_refs(obj) -> int:
    """The strong reference count of a live tvm-ffi object (the low 32 bits of its header's first word,
    TVMFFIObject.combined_ref_count); the caller's own handle counts as one."""
    return ctypes.c_uint64.from_address(obj.__chandle__()).value & 0xFFFFFFFF


def model(name: str):
    """(Relax module, input) of a model from tvm_npu.models: `small_cnn`, or `tiny` (conv, sin on the CPU,
    dense: benchmarks/resource_hygiene.py's)."""
    import tvm_npu
    from tvm_npu.models import GraphBuilder, small_cnn

    if name == "small_cnn":
        onnx_model, shape = small_cnn(), (1, 3, 32, 32)
    else:
        g = GraphBuilder(0)
        y = g.conv("input", 3, 8, 3)
        y = g.node("Sin", [y])
        y = g.gemm(g.node("Flatten", [y]), 8 * 12 * 12, 10)
        onnx_model, shape = g.model([1, 3, 12, 12], y, [1, 10]), (1, 3, 12, 12)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return tvm_npu.from_onnx(onnx_model), x


def compile_for(path: str, mod):
    """The tvm.relax.Executable of `mod` built along `path` (one of PATHS)."""
    import tvm

    import tvm_npu

    if path == "npu-build":
        return tvm_npu.build(mod)
    if path == "npu-compile":
        return tvm.compile(mod, target="npu", relax_pipeline="npu")
    return tvm.compile(mod, target="llvm")


def build_and_run(path: str, mod, x):
    """One iteration: build, VM, run; returns (output, what to watch after everything is dropped).
    For "npu-load" `mod` is the path of an exported library instead."""
    import tvm
    from tvm import relax

    import tvm_npu

    if path == "npu-load":
        ran = tvm_npu.load_module(mod)
        ex = None
    else:
        ex = compile_for(path, mod)
    vm = relax.VirtualMachine(ran if ex is None else ex, tvm.cpu())
    y = vm["main"](tvm.runtime.tensor(x)).numpy()
    if ex is not None:
        ran = ex.jit()  # what the VM loaded: ex.mod, or the library TVM exported and loaded for it (cached)
    watch = {"executable": None if ex is None else weakref.ref(ex), "module": ran}
    watch["npu"] = tvm_npu.runtime.npu_modules(ran)
    return y, watch


def measure(path: str, name: str = "small_cnn", iterations: int = 50, warmup: int = 10) -> dict:
    """RSS growth per iteration of `path` after `warmup` iterations, and whether the objects of the last
    iteration were freed (see the module docstring)."""
    mod, x = model(name)
    with tempfile.TemporaryDirectory() as tmp:
        if path == "npu-load":
            import tvm_npu

            mod = tvm_npu.export_library(tvm_npu.build(mod), Path(tmp) / "model.so")
        return _measure(path, name, mod, x, iterations, warmup)


def _measure(path: str, name: str, mod, x, iterations: int, warmup: int) -> dict:
    want, _ = build_and_run(path, mod, x)
    wrong = 0

    def cycle():
        nonlocal wrong
        y, watch = build_and_run(path, mod, x)
        wrong += not np.array_equal(y, want)
        return watch

    for _ in range(warmup):
        cycle()
    gc.collect()
    rss0 = rss_bytes()
    for _ in range(iterations - 1):
        cycle()
    watch = cycle()
    gc.collect()
    rss1 = rss_bytes()
    return {
        "path": path,
        "model": name,
        "iterations": iterations,
        "rss_before": rss0,
        "rss_after": rss1,
        "per_iteration": (rss1 - rss0) / iterations,
        "identical": wrong == 0,
        "executable_freed": None if watch["executable"] is None else watch["executable"]() is None,
        **other_references(watch),
    }


def other_references(watch: dict) -> dict:
    """The references to watch["module"] and to the NPU modules watch["npu"] beyond `watch`'s own,
    the module's read first and then dropped from `watch` (it imports the NPU modules):
    {"module_refs": int, "npu_module_refs": [int, ...]}; all 0 when nothing else keeps them."""
    refs = strong_refs(watch["module"]) - 1  # one Python handle holds one reference
    del watch["module"]
    gc.collect()
    return {"module_refs": refs, "npu_module_refs": [strong_refs(m) - 1 for m in watch["npu"]]}


def _line(r: dict) -> str:
    return (
        f"{r['path']:12s} {r['model']}: {r['iterations']} iterations, RSS {r['rss_before'] / 2**20:.1f} -> "
        f"{r['rss_after'] / 2**20:.1f} MiB, {r['per_iteration'] / 1024:+.1f} KiB per iteration; results "
        f"identical: {r['identical']}; executable freed: {r['executable_freed']}; other references to the "
        f"module the VM ran: {r['module_refs']}, to its NPU modules: {r['npu_module_refs']}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=PATHS, action="append", help="a path to measure (default: all three)")
    ap.add_argument("--model", choices=("small_cnn", "tiny"), default="small_cnn")
    ap.add_argument("--iterations", type=int, default=50, help="measured iterations after the warm-up")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="print one JSON object per path instead")
    args = ap.parse_args(argv)
    if args.iterations < 1 or args.warmup < 0:
        ap.error("--iterations must be at least 1 and --warmup at least 0")
    for path in args.path or PATHS:
        r = measure(path, args.model, args.iterations, args.warmup)
        print(json.dumps(r) if args.json else _line(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
