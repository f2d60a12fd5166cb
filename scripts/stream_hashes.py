"""Hash the command streams the compiler emits for the benchmark and tutorial models.

A refactor of the compiler must not change what it emits. This script builds each model through the
public API only (so it runs unchanged on both sides of a restructuring), and writes one line per NPU
region: model, region index, sha256 of the stream bytes, and the cycles of one call on the reference
NPU. Compare two runs with `diff`, or pass `--check FILE` to compare against a saved run.

    python scripts/stream_hashes.py -o before.txt              # on the old commit
    python scripts/stream_hashes.py --check before.txt         # on the new one; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import lstm, mobilenet_v2_shaped, op_zoo, small_cnn
from tvm_npu.models.zoo import resnet50_shaped, shufflenet_v2, squeezenet1_1

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
import lstm_wake_word as kws

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import compiler_core


def _gemm():
    mod, x = compiler_core.gemm()  # the compiler-core benchmark's 1024x2048x2048 GEMM
    return mod, [x]


def _onnx(model, shape, seed=1, quantize=False, config="npu-ref"):
    def build():
        mod = tvm_npu.from_onnx(model)
        rng = np.random.default_rng(seed)
        x = [rng.standard_normal(shape).astype(np.float32)]
        if quantize:
            calib = [[rng.standard_normal(shape).astype(np.float32)] for _ in range(2)]
            mod, _ = tvm_npu.quantize(mod, calib, progress=False)
        return tvm_npu.build(mod, config=config), x

    return build


def _kws(quantize):
    def build():
        rng = np.random.default_rng(0)
        model = kws.seeded_model(rng)
        state = np.zeros((1, 1, kws.HIDDEN), np.float32)
        chunks = [[rng.standard_normal((kws.CHUNK, 1, kws.BANDS)).astype(np.float32), state, state] for _ in range(4)]
        mod = tvm_npu.from_onnx(model)
        if quantize:
            mod, _ = tvm_npu.quantize(mod, chunks, method="percentile", progress=False)
        return tvm_npu.build(mod), chunks[0]

    return build


def _relax(factory):
    def build():
        mod, x = factory()
        return tvm_npu.build(mod), x

    return build


MODELS = {
    "mobilenet_v2_224_int8": _onnx(
        mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000), (1, 3, 224, 224), quantize=True
    ),
    "mobilenet_v2_224_fp16": _onnx(mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000), (1, 3, 224, 224)),
    "mobilenet_v2_64_small": _onnx(mobilenet_v2_shaped(), (1, 3, 64, 64), config="npu-small"),
    "resnet50_w025_112": _onnx(resnet50_shaped(size=112, width=0.25), (1, 3, 112, 112)),
    "squeezenet_64_int8": _onnx(squeezenet1_1(size=64, width=0.5), (1, 3, 64, 64), quantize=True),
    "shufflenet_64": _onnx(shufflenet_v2(size=64, width=0.5), (1, 3, 64, 64)),
    "small_cnn": _onnx(small_cnn(), (1, 3, 32, 32)),
    "op_zoo": _onnx(op_zoo(), (1, 3, 17, 17)),
    "lstm_bidirectional": _onnx(lstm(direction="bidirectional", init=False), (5, 2, 3)),
    "gemm_1024x2048x2048": _relax(_gemm),
    "kws_fp16": _kws(False),
    "kws_int8": _kws(True),
}


def _lines(names):
    for name in names:
        ex, x = MODELS[name]()
        vm = relax.VirtualMachine(ex, tvm.cpu())
        vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in x])
        for i, m in enumerate(tvm_npu.runtime.npu_modules(vm)):
            blob = bytes(m["get_stream"]())
            cycles = tvm_npu.runtime.profile_of(m)["last"]["total_cycles"]
            line = f"{name} region{i} {hashlib.sha256(blob).hexdigest()[:32]} {len(blob)} B {cycles} cycles"
            print(line, flush=True)
            yield line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--check", type=Path, help="a saved run to compare with")
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    args = parser.parse_args()
    lines = list(_lines(args.only))
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")
    if args.check:
        want = [l for l in args.check.read_text().splitlines() if l.split()[0] in args.only]
        if want != lines:
            print(f"stream hashes differ from {args.check}:", file=sys.stderr)
            for a, b in zip(want, lines):
                if a != b:
                    print(f"  was {a}\n  now {b}", file=sys.stderr)
            if len(want) != len(lines):
                print(f"  {len(want)} regions before, {len(lines)} now", file=sys.stderr)
            return 1
        print(f"{len(lines)} streams identical to {args.check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
