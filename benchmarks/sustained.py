"""Sustained-performance benchmark (docs/sustained.md): burst against sustained frame rate under each
governor, energy per inference, power, temperature, and the CPU/NPU pipeline's gain over running the two
parts back to back, for two models at their natural rates:

- MobileNetV2 224 int8 (seeded weights, tvm_npu.quantize) at 30 fps from a camera: the CPU part is the
  library's own CPU share plus the application's pre- and post-processing of a 480x640 RGB frame
  (centre crop, bilinear resize to 224, normalisation, NCHW; softmax and top-5), measured here;
- the LSTM keyword spotter of tutorials/lstm_wake_word.py, int8, one 7-frame chunk every 140 ms (7.1
  inferences per second): the CPU part is the log-mel features of the chunk's audio, measured here.

Each runs `--seconds` at its rate, as fast as it goes ("max"), and as fast as it goes without the
application's CPU part ("npu": the library's own CPU share only; MobileNetV2 only), on the "phone"
cooler with the rest of the phone (`--other-w`, display and camera) on it, under the fixed, throttle
and target policies. A benchmark, not a test: it prints numbers (the CPU parts are this machine's).

    python benchmarks/sustained.py [--seconds 120] [--config npu-ref] [--ambient 35] [--other-w 1.0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import tvm_npu
from tvm_npu.models import mobilenet_v2_shaped
from tvm_npu.power import get_thermal
from tvm_npu.tools import sustain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
import lstm_wake_word as kws

POLICIES = ("fixed", "throttle", "target")


def mobilenet(config: str):
    """(executable, input, pre) of MobileNetV2 int8; `pre` is one camera frame's pre- and post-processing."""
    rng = np.random.default_rng(1)
    calib = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(2)]
    qmod, _ = tvm_npu.quantize(
        tvm_npu.from_onnx(mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000)), calib, progress=False
    )
    frame = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    logits = rng.standard_normal(1000).astype(np.float32)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)

    pos = np.linspace(0, 479, 224)  # bilinear sample positions in the centre 480 x 480 square
    i0 = np.floor(pos).astype(int)
    i1, w = np.minimum(i0 + 1, 479), (pos - i0).astype(np.float32)[:, None, None]

    def pre():
        square = frame[:, 80:560].astype(np.float32)
        tall = square[i0] * (1 - w) + square[i1] * w  # rows, then columns
        small = tall[:, i0] * (1 - w[:, 0][None]) + tall[:, i1] * w[:, 0][None]
        x = ((small / 255 - mean) / std).transpose(2, 0, 1)[None]
        p = np.exp(logits - logits.max())
        return x, np.argsort(p / p.sum())[-5:]

    return tvm_npu.build(qmod, config=config), calib[0], pre


def keyword_spotter(config: str):
    """(executable, inputs, pre) of the KWS LSTM int8; `pre` is the log-mel features of one chunk."""
    rng = np.random.default_rng(0)
    model = kws.seeded_model(rng)
    state = np.zeros((1, 1, kws.HIDDEN), np.float32)
    chunks = [[rng.standard_normal((kws.CHUNK, 1, kws.BANDS)).astype(np.float32), state, state] for _ in range(8)]
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), chunks, method="percentile", progress=False)
    bank, audio = kws.mel_bank(), rng.normal(0, 0.1, 256 + 160 * (kws.CHUNK - 1))

    def pre():
        return kws.features(audio, bank)

    return tvm_npu.build(qmod, config=config), chunks[0], pre


MODELS = (("MobileNetV2", mobilenet, 30.0), ("KWS LSTM", keyword_spotter, 1 / 0.14))


def row(name: str, rate: str, s: dict) -> str:
    return (
        f"{name:12s} {rate:>6s} {s['policy']:8s} {s['burst_fps']:9.2f} {s['sustained_fps']:9.2f} "
        f"{s['latency_ms_p50']:8.3f} {s['latency_ms_p99']:8.3f} {s['energy_per_inference_mj']:8.3f} "
        f"{s['npu_power_w']:6.3f} {s['peak_temp_c']:6.1f} {s['throttled_s']:6.1f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--config", default="npu-ref,npu-small", help="NPU presets, comma-separated")
    ap.add_argument("--ambient", type=float, default=35.0, help="C: a phone in a warm room, or in the hand")
    ap.add_argument("--other-w", type=float, default=1.0, help="W: the rest of the phone (display, camera)")
    args = ap.parse_args()
    thermal = get_thermal("phone").replace(ambient_c=args.ambient)
    head = (
        f"{'model':12s} {'rate':>6s} {'policy':8s} {'burst fps':>9s} {'sust fps':>9s} {'p50 ms':>8s} "
        f"{'p99 ms':>8s} {'mJ/inf':>8s} {'NPU W':>6s} {'peak C':>6s} {'thr s':>6s}"
    )
    print(
        f"{args.config}; phone cooler (R 20 K/W, tau 30 s, throttle at 70 C) at {args.ambient} C with "
        f"{args.other_w} W of the rest of the phone on it; {args.seconds:.0f} s per run"
    )
    cases = [(n, m, r, c) for c in args.config.split(",") for n, m, r in MODELS]
    for name, make, rate, config in cases:
        ex, x, pre = make(config)
        base = sustain(ex, fps=None, seconds=10, policy="fixed", inputs=x, pre=pre, thermal="large").summary
        c, n = base["cpu_ms"], base["npu_ms_fastest"]  # measured once: every run below has the same CPU part
        common = dict(cpu_ms=c, thermal=thermal, other_w=args.other_w)
        serial = sustain(ex, fps=None, seconds=10, policy="fixed", pipelined=False, cpu_ms=c, thermal="large")
        print(
            f"\n{name} on {config}: CPU part {c:.3f} ms (measured), NPU part {n:.3f} ms at "
            f"{base['operating_points'][0]} "
            f"({', '.join(f'{t:.3f}' for t in base['npu_ms'])} ms at the {len(base['npu_ms'])} points); CPU "
            f"share {c / (c + n):.0%}; pipelined {base['fps']:.1f} fps vs back to back "
            f"{serial.summary['fps']:.1f} fps: {base['fps'] / serial.summary['fps']:.2f}x"
        )
        # Without the application's part the CPU does only the library's own share: NPU-bound flat out.
        own = sustain(ex, fps=None, seconds=1, policy="fixed", inputs=x, thermal="large").summary["cpu_ms"]
        print(f"without the application's pre- and post-processing the CPU part is {own:.3f} ms ('npu' rows)")
        print(head)
        modes = [(rate, f"{rate:.1f}", c), (None, "max", c)]
        if n >= 0.1:  # flat out at 10 us per inference is not a use (and millions of frames to simulate)
            modes.append((None, "npu", own))
        for fps, label, cpu in modes:
            for policy in POLICIES:
                run = {**common, "cpu_ms": cpu}
                print(row(name, label, sustain(ex, fps=fps, seconds=args.seconds, policy=policy, **run).summary))


if __name__ == "__main__":
    main()
