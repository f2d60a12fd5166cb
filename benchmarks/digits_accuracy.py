"""Held-out top-1 accuracy of the shipped digits CNN through the NPU: float, fp16, int8 (issue 33).

The model is `tvm_npu.models.pretrained_digits.digits_cnn()` (trained by scripts/train_digits_cnn.py on
scikit-learn's load_digits); the 450 held-out images are recomputed from scikit-learn. Each row runs the
450 images one at a time (the model's static batch of 1):

- float: onnxruntime on the float ONNX file (the reference every other row is compared with);
- NPU fp16: the float model through ``tvm_npu.build`` on the reference NPU's fp16 datapath;
- NPU int8 ours: ``tvm_npu.quantize`` (per-channel weights, per-tensor activations) calibrated on
  images of the TRAIN split, one row per calibration method;
- NPU int8 ORT-QDQ: onnxruntime's ``quantize_static`` (QDQ, int8, per-channel) calibrated on the same
  train images, imported with ``tvm_npu.from_onnx`` and built for the NPU.

Columns: top-1 accuracy, top-1 agreement with float, the SQNR of all 4,500 logits against float's, NPU
cycles per image (the cycle model, npu-ref).
Needs scikit-learn and onnxruntime (``pip install ".[test]"``).

    python benchmarks/digits_accuracy.py [--calibration 128] [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import numpy as np
import onnx
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import pretrained_digits as pd
from tvm_npu.tools.accuracy import sqnr_db

METHODS = ("minmax", "percentile", "entropy")


def calibration_images(n: int) -> list[np.ndarray]:
    """The first `n` images of the train split (which is already shuffled by the split), batch 1 each."""
    x, _ = pd.digits_split("train")
    return [x[i : i + 1] for i in range(min(n, len(x)))]


def ort_session(model: onnx.ModelProto, int8_kernels: bool = False):
    """onnxruntime's CPU provider; with `int8_kernels` every QDQ group runs on its integer kernels."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if int8_kernels:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_logits(model: onnx.ModelProto, x: np.ndarray, int8_kernels: bool = False) -> np.ndarray:
    sess = ort_session(model, int8_kernels)
    return np.concatenate([sess.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])


def quantize_ort(model: onnx.ModelProto, calib: list[np.ndarray]) -> onnx.ModelProto:
    """onnxruntime's static quantizer: QDQ, int8 activations and weights, weights per channel."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    root = logging.getLogger()
    level, _ = root.level, root.setLevel(logging.ERROR)  # its advice to pre-process (shape inference) is moot here
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(model, src)
        quantize_static(
            src,
            dst,
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
        root.setLevel(level)
        return onnx.load(dst)


def quantize_ours(model: onnx.ModelProto, calib: list[np.ndarray], method: str) -> tvm.IRModule:
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), calib, method=method, progress=False)
    return qmod


def build(mod: tvm.IRModule) -> tuple:
    """(executable, BuildReport) for the npu-ref NPU."""
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, target="npu", report=report), report


def run_npu(ex, x: np.ndarray) -> tuple[np.ndarray, int]:
    """(logits [n, 10], NPU cycles per image) of the images of `x`, one call each."""
    vm = relax.VirtualMachine(ex, tvm.cpu())
    modules = tvm_npu.runtime.npu_modules(vm)
    for m in modules:
        m["reset_profile"]()
    out = np.concatenate([vm["main"](tvm.runtime.tensor(x[i : i + 1])).numpy() for i in range(len(x))])
    cycles = sum(tvm_npu.runtime.profile_of(m)["total"]["total_cycles"] for m in modules)
    return out, cycles // len(x)


def rows(calibration: int) -> list[dict]:
    model = onnx.load(pd.digits_cnn())
    x, y = pd.digits_heldout()
    calib = calibration_images(calibration)
    ref = ort_logits(model, x)
    out = [{"name": "float (onnxruntime)", "logits": ref, "cycles": None}]
    ex, _ = build(tvm_npu.from_onnx(model))
    out.append(dict(zip(("logits", "cycles"), run_npu(ex, x)), name="NPU fp16"))
    for method in METHODS:
        ex, _ = build(quantize_ours(model, calib, method))
        out.append(dict(zip(("logits", "cycles"), run_npu(ex, x)), name=f"NPU int8 ours ({method})"))
    q = quantize_ort(model, calib)
    ex, _ = build(tvm_npu.from_onnx(q))
    out.append(dict(zip(("logits", "cycles"), run_npu(ex, x)), name="NPU int8 ORT-QDQ (minmax)"))
    scale = float(
        onnx.numpy_helper.to_array(next(t for t in q.graph.initializer if t.name == q.graph.node[-1].input[1]))
    )
    ort_int8 = ort_logits(q, x, int8_kernels=True)
    out[-1]["vs_ort_int8"] = (
        float(np.abs(out[-1]["logits"] - ort_int8).max() / scale),
        float((out[-1]["logits"] == ort_int8).mean()),
    )
    for r in out:
        pred = r["logits"].argmax(1)
        r["accuracy"] = float((pred == y).mean())
        r["agreement"] = float((pred == ref.argmax(1)).mean())
        r["sqnr"] = sqnr_db(ref, r["logits"])
    return out


def table(rs: list[dict], markdown: bool) -> str:
    head = ("model", "held-out top-1", "agreement with float", "logits SQNR (dB)", "NPU cycles / image")
    cells = [
        (
            r["name"],
            f"{r['accuracy']:.2%}",
            f"{r['agreement']:.2%}",
            "-" if np.isinf(r["sqnr"]) else f"{r['sqnr']:.1f}",
            "-" if r["cycles"] is None else f"{r['cycles']:,}",
        )
        for r in rs
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|---:|---:|"]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    w = [max(len(row[i]) for row in [head, *cells]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(row)) for row in [head, *cells]
    )


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=int, default=128, help="train images to calibrate int8 on")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = ap.parse_args(argv)
    t0 = time.time()
    rs = rows(args.calibration)
    _, y = pd.digits_heldout()
    print(f"digits CNN, {len(y)} held-out images, int8 calibrated on {args.calibration} train images (npu-ref)")
    print(table(rs, args.markdown))
    lsb, same = rs[-1]["vs_ort_int8"]
    print(
        f"ORT-QDQ on the NPU vs onnxruntime's integer kernels on the same file: max |diff| {lsb:.2f} output LSB, "
        f"{same:.2%} of the logits identical"
    )
    print(f"({time.time() - t0:.0f} s)")
    return rs


if __name__ == "__main__":
    main()
