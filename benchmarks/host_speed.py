"""Host speed benchmark: how fast the reference NPU runs on this machine, next to onnxruntime and TVM llvm.

In one run, side by side (interleaved rounds, so background load hits every contender alike), the median
latency of one inference of:

- MobileNetV2 224 (width 1.0, 1000 classes; seeded weights), quantized by onnxruntime's quantize_static
  (QDQ, s8s8, per channel): tvm_npu (int8 on the reference NPU), onnxruntime on the same QDQ model,
  onnxruntime fp32 on the float model, TVM llvm (untuned) on the float model;
- the KWS LSTM of tutorials/lstm_wake_word.py (one 7-frame streaming chunk, 10 -> LSTM 64 -> 12; seeded
  weights): tvm_npu fp16 and int8 (tvm_npu.quantize), onnxruntime's LSTM op (fp32) on the same ONNX model.

onnxruntime runs with `--threads` intra-op threads, as does the NPU (TVM_NPU_THREADS). A benchmark, not a
test: it prints numbers and ratios; measure on a quiet machine, or at least compare ratios from one run.

    python benchmarks/host_speed.py [--threads 2] [--rounds 7] [--iters 20] [--skip-llvm] [--ref-kernels]
                                    [--skip-mobilenet] [--skip-kws]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import mobilenet_v2_shaped

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
import lstm_wake_word as kws


def quantize_qdq(model: onnx.ModelProto, calib: list, path: Path) -> onnx.ModelProto:
    """onnxruntime's quantize_static, QDQ s8s8 per channel (what tests/qdq_models.py does)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    src = path.with_suffix(".float.onnx")
    onnx.save(model, src)
    quantize_static(
        str(src),
        str(path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    return onnx.load(str(path))


def ort_runner(model: onnx.ModelProto, feeds: dict, threads: int, spin: bool = True):
    """onnxruntime's CPU provider. Its worker threads spin-wait between ops by default, which is fast on
    an idle machine and slow on a loaded one; `spin=False` shows the difference."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feeds)


def vm_runner(ex, args: list):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    targs = [tvm.runtime.tensor(a) for a in args]
    fn = vm["main"]
    return lambda: fn(*targs)


def at_level(fn, level: str):
    """`fn` run with the reference NPU at kernel level `level` (then back to the previous one)."""

    def run():
        before = tvm_npu.runtime.kernel_level()
        tvm_npu.runtime.set_kernel_level(level)
        try:
            return fn()
        finally:
            tvm_npu.runtime.set_kernel_level(before)

    return run


def mobilenet_runners(threads: int, tmp: Path, llvm: bool, ref: bool) -> dict:
    model = mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000)
    rng = np.random.default_rng(1)
    calib = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
    x = calib[0]
    q = quantize_qdq(model, calib, tmp / "mbv2_qdq.onnx")
    npu = vm_runner(tvm_npu.build(tvm_npu.from_onnx(q)), [x])
    runners = {
        "tvm_npu int8": npu,
        "onnxruntime int8 (QDQ)": ort_runner(q, {"input": x}, threads),
        "onnxruntime int8, no spin": ort_runner(q, {"input": x}, threads, spin=False),
        "onnxruntime fp32": ort_runner(model, {"input": x}, threads),
    }
    if ref:
        runners["tvm_npu int8, ref kernels"] = at_level(npu, "ref")
    if llvm:
        ex = tvm.compile(tvm_npu.from_onnx(model), target="llvm")
        runners["TVM llvm fp32"] = vm_runner(ex, [x])
    return runners


def kws_runners(threads: int) -> dict:
    rng = np.random.default_rng(0)
    model = kws.seeded_model(rng)
    state = np.zeros((1, 1, kws.HIDDEN), np.float32)
    chunks = [[rng.standard_normal((kws.CHUNK, 1, kws.BANDS)).astype(np.float32), state, state] for _ in range(16)]
    args = chunks[0]
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), chunks, method="percentile", progress=False)
    return {
        "tvm_npu fp16": vm_runner(tvm_npu.build(tvm_npu.from_onnx(model)), args),
        "tvm_npu int8": vm_runner(tvm_npu.build(qmod), args),
        "onnxruntime LSTM fp32": ort_runner(model, {"X": args[0], "h0": state, "c0": state}, threads),
    }


def measure(runners: dict, rounds: int, iters: int) -> dict:
    """Median per-call latency in ms; rounds interleave the contenders. Python's garbage collector is off
    while a round runs, as timeit has it: with the models and onnxruntime sessions this process holds, a
    collection can land inside a ~20 us call of any contender and add as much again."""
    for fn in runners.values():  # warm up
        for _ in range(3):
            fn()
    samples = {k: [] for k in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            gc.collect()
            gc.disable()
            try:
                for _ in range(iters):
                    t = time.perf_counter()
                    fn()
                    samples[name].append((time.perf_counter() - t) * 1e3)
            finally:
                gc.enable()
    return {k: statistics.median(v) for k, v in samples.items()}


def report(title: str, medians: dict, base: str):
    print(f"\n{title} (median ms per inference; ratio = time / {base})")
    for name, ms in medians.items():
        print(f"  {name:28s} {ms:9.4f} ms   {ms / medians[base]:7.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--skip-llvm", action="store_true", help="skip the (slow, untuned) TVM llvm build")
    ap.add_argument("--skip-mobilenet", action="store_true")
    ap.add_argument("--skip-kws", action="store_true")
    ap.add_argument(
        "--ref-kernels",
        action="store_true",
        help="also time tvm_npu with the reference kernels (TVM_NPU_KERNELS=ref): the speed before them",
    )
    args = ap.parse_args()
    tvm_npu.runtime.set_threads(args.threads)
    print(
        f"host: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
        f"threads {args.threads}; kernels {tvm_npu.runtime.kernel_level()}; "
        f"{args.rounds} rounds x {args.iters} calls each"
    )
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_mobilenet:
            runners = mobilenet_runners(args.threads, Path(d), not args.skip_llvm, args.ref_kernels)
            # Untuned TVM llvm and the reference kernels are ~30-80x slower than the rest: a few calls of
            # them, after the others.
            slow = {k: v for k, v in runners.items() if "llvm" in k or "ref kernels" in k}
            medians = measure({k: v for k, v in runners.items() if k not in slow}, args.rounds, args.iters)
            medians.update(measure(slow, 1, 5))
            report("MobileNetV2 224 int8 (QDQ)", medians, "onnxruntime int8 (QDQ)")
        if not args.skip_kws:
            report(
                "KWS LSTM, one 7-frame chunk",
                measure(kws_runners(args.threads), args.rounds, args.iters * 5),
                "onnxruntime LSTM fp32",
            )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
