"""MobileNetV2 on the NPU, int8: import, quantize, compile, inspect, run, compare, profile.

Run: python tutorials/mobilenet_v2.py [--out mobilenet_out]

The network is MobileNetV2 (224x224, 1000 classes) with seeded weights, so the tutorial needs no
downloads. With real weights you would export torchvision's `mobilenet_v2(weights="IMAGENET1K_V2")`
to ONNX and pass that file to `tvm_npu.from_onnx` instead; every step below stays the same.
"""

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tqdm import tqdm
from tvm import relax

import tvm_npu
from tvm_npu.models import mobilenet_v2_shaped

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="mobilenet_out")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
t0 = time.time()
bar = tqdm(total=8, unit="step", bar_format="{desc} [{n_fmt}/{total_fmt} steps, {elapsed}]")


@contextlib.contextmanager
def step(what: str):
    """One step of the tutorial on the progress bar; the bar's clock ticks while the step runs."""
    bar.set_description(what)
    stop = threading.Event()
    ticker = threading.Thread(target=lambda: [bar.refresh() for _ in iter(lambda: stop.wait(0.5), True)], daemon=True)
    if sys.stderr.isatty():  # a log file gets the bar once per step, not twice a second
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        bar.update(1)


say = tqdm.write  # prints above the bar


# Step 1: the model, exported to ONNX as a training framework would.
with step("build MobileNetV2 and save it as ONNX"):
    model = mobilenet_v2_shaped(seed=0, size=224, width=1.0, classes=1000)
    onnx.save(model, out / "mobilenet_v2.onnx")

# Step 2: import into Relax. Weights become constants the NPU compiler re-lays out.
with step("import the ONNX file into Relax"):
    mod = tvm_npu.from_onnx(str(out / "mobilenet_v2.onnx"))

# Step 3: post-training quantization to int8 (per-channel weights, per-tensor activations).
# Calibration data: use real images of your task; here, seeded noise.
rng = np.random.default_rng(1)
calibration = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
with step("calibrate and quantize to int8"):
    qmod, qreport = tvm_npu.quantize(mod, calibration, method="percentile")
say("\n".join(qreport.summary().splitlines()[:4]) + " ...")

# Step 4: compile with a plain TVM call; the plugin registered the "npu" target and pipeline.
with step("compile for the NPU"):
    ex = tvm.compile(qmod, target="npu", relax_pipeline="npu")

# Step 5: where did every op run, and why? (the same compile, with a report)
report = tvm_npu.BuildReport()
with step("compile again with the placement report"):
    tvm_npu.build(qmod, target="npu", report=report)
say(report.summary())
(out / "placement.txt").write_text(report.table())

# Step 6: run on the reference NPU and compare with the float model on TVM's CPU backend.
x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
with step("run on the reference NPU and the float model on TVM's CPU"):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    npu_logits = vm["main"](tvm.runtime.tensor(x)).numpy()
    cpu_vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    float_logits = cpu_vm["main"](tvm.runtime.tensor(x)).numpy()
cos = float(npu_logits.ravel() @ float_logits.ravel() / np.linalg.norm(npu_logits) / np.linalg.norm(float_logits))
say(f"int8 NPU vs float CPU: cosine {cos:.4f}, top-1 {npu_logits.argmax()} vs {float_logits.argmax()}")

# Step 7: onnxruntime's own int8 result on the same quantized graph, if onnxruntime is installed
# (it is a test dependency of tvm_npu, never a runtime one).
with step("quantize with onnxruntime and compare on its int8 kernels"):
    try:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"input": c} for c in calibration])

            def get_next(self):
                return next(self.it, None)

        quantize_static(
            str(out / "mobilenet_v2.onnx"),
            str(out / "mobilenet_v2_qdq.onnx"),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
        )
        import onnxruntime as ort

        q_onnx = onnx.load(out / "mobilenet_v2_qdq.onnx")
        # onnxruntime's integer kernels: its default session folds parts of a QDQ graph (depthwise convs,
        # adds) into float and is no int8 reference.
        so = ort.SessionOptions()
        so.add_session_config_entry("session.qdqisint8allowed", "1")
        ort_logits = ort.InferenceSession(q_onnx.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
            None, {"input": x}
        )[0]
        npu_on_ort_model = relax.VirtualMachine(tvm_npu.build(tvm_npu.from_onnx(q_onnx)), tvm.cpu())
        mine = npu_on_ort_model["main"](tvm.runtime.tensor(x)).numpy()
        out_scale = float(
            onnx.numpy_helper.to_array({t.name: t for t in q_onnx.graph.initializer}[q_onnx.graph.node[-1].input[1]])
        )
        lsb = np.rint(np.abs(mine - ort_logits) / out_scale)
        say(
            f"onnxruntime's QDQ model on its int8 kernels: NPU vs onnxruntime {int(lsb.max())} LSB at most "
            f"({int((lsb == 0).sum())} of {lsb.size} logits identical), top-1 {mine.argmax()} vs {ort_logits.argmax()}"
        )
    except ImportError:
        say("onnxruntime not installed: skipping the onnxruntime comparison")

# Step 8: per-layer profile, a CSV and a trace you can open in the Perfetto UI.
with step("profile every layer"):
    prof = tvm_npu.profile(qmod, inputs=[x])
tvm_npu.profile_to_csv(prof, out / "layers.csv")
tvm_npu.write_chrome_trace(prof, out / "trace.json")
say(
    f"NPU: {prof['total_cycles']} cycles, MAC utilization {prof['mac_utilization']:.1%}, "
    f"DDR {prof['ddr_bytes']} B ({prof['ddr_bytes'] / prof['compulsory_ddr_bytes']:.2f}x compulsory), "
    f"SRAM peak {prof['sram_peak_bytes']} B"
)
(out / "summary.json").write_text(
    json.dumps(
        {"cosine_vs_float": cos, "total_cycles": prof["total_cycles"], "mac_utilization": prof["mac_utilization"]},
        indent=2,
    )
)
bar.close()
print(f"done in {time.time() - t0:.0f} s; files in {out}/")
