"""Compiler-core benchmark: how well the compiled command streams use the NPU (cost model + emulator).

Prints, for a seeded MobileNetV2 (224x224, int8 via tvm_npu.quantize), a large GEMM and a ResNet-style
block on npu-ref: total cycles, MAC utilization, DDR bytes against compulsory bytes, SRAM peak, and the
ratio of cycles to the sum of per-layer ideal cycles. A benchmark, not a test: it prints numbers.

    python benchmarks/compiler_core.py [--config npu-ref] [--skip-mobilenet]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import mobilenet_v2_shaped


def _run(mod, x, config):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, config=config, report=report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(x))
    profiles = [tvm_npu.runtime.profile_of(m)["last"] for m in tvm_npu.runtime.npu_modules(vm)]
    return report, profiles


def summarize(name, report, profiles, cfg):
    cycles = sum(p["total_cycles"] for p in profiles)
    macs = sum(p["macs"] for p in profiles)
    ddr = sum(p["ddr_read_bytes"] + p["ddr_write_bytes"] for p in profiles)
    compulsory = sum(r.get("compulsory_ddr_bytes", 0) for r in report.regions.values())
    ideal = sum(r.get("ideal_cycles", 0) for r in report.regions.values())
    estimated = sum(r.get("estimated_cycles", 0) for r in report.regions.values())
    sram = max(r["sram_bytes_used"] for r in report.regions.values())
    sram_naive = max(r.get("sram_bytes_no_reuse", r["sram_bytes_used"]) for r in report.regions.values())
    int8 = any(p.precision == "int8" for p in report.placements)
    rate = 1 if int8 else cfg.fp16_rate_div
    util = macs / (cycles * cfg.mac_rows * cfg.mac_cols / rate) if cycles else 0.0
    print(
        f"{name}: {cycles} cycles ({cycles / cfg.clock_mhz:.1f} us), {macs / 1e6:.1f} M MACs, "
        f"MAC utilization {util:.1%} ({'int8' if int8 else 'fp16'}), DDR {ddr} B"
        + (f" = {ddr / compulsory:.2f}x compulsory ({compulsory} B)" if compulsory else "")
        + f", SRAM peak {sram} B (without liveness reuse {sram_naive} B)"
        + (f", cycles / ideal {cycles / ideal:.2f}" if ideal else "")
        + f", cost model {estimated} cycles ({estimated / cycles - 1:+.2%} against the emulator)"
    )


def gemm(m=1024, k=2048, n=2048, seed=0):
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    w = (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, relax.op.permute_dims(relax.const(w)))))
        bb.emit_func_output(out)
    return bb.get(), rng.standard_normal((m, k)).astype(np.float32)


def resnet_block(c=128, hw=56, seed=0):
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, hw, hw), "float32"))
    w1, w2 = ((rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32) for _ in range(2))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w1), padding=1)))
            y = bb.emit(relax.op.nn.conv2d(y, relax.const(w2), padding=1))
            out = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.add(y, x))))
        bb.emit_func_output(out)
    return bb.get(), rng.standard_normal((1, c, hw, hw)).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="npu-ref")
    parser.add_argument("--skip-mobilenet", action="store_true")
    args = parser.parse_args()
    cfg = tvm_npu.get_config(args.config)
    if not args.skip_mobilenet:
        t = time.time()
        mod = tvm_npu.from_onnx(mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000))
        rng = np.random.default_rng(1)
        calib = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(2)]
        qmod, _ = tvm_npu.quantize(mod, calib, progress=False)
        report, profiles = _run(qmod, calib[0], cfg)
        summarize("MobileNetV2 224 int8", report, profiles, cfg)
        print(f"  (compile + run {time.time() - t:.0f} s)")
    for name, (mod, x) in (("GEMM 1024x2048x2048 fp16", gemm()), ("ResNet block 128x56x56 fp16", resnet_block())):
        report, profiles = _run(mod, x, cfg)
        summarize(name, report, profiles, cfg)


if __name__ == "__main__":
    main()
