"""Published CNN architectures (tvm_npu.model_zoo, seeded weights) on the NPU against onnxruntime.

fp16: the float model on the NPU's fp16 datapath against onnxruntime's float32 result. The error is
measured as ||npu - ort|| / ||ort|| over the logits: an fp16 datapath rounds every activation to 11
significant bits (relative step 2^-11 ~ 5e-4), so per-element relative errors blow up on logits near 0
while the norm ratio measures the error against the size of the answer; 1e-2 is the issue's bound.
int8: the model quantized by onnxruntime's static quantizer (QDQ, s8s8, per-channel) on the NPU
against onnxruntime's own integer kernels, within 2 steps of the output quantization.
Ops the NPU does not take yet (concat, split, channel shuffle) run on the CPU; the report must name a
reason for each, and its MAC count must equal the model's, counted here from the ONNX shapes.
"""

import numpy as np
import pytest
from onnx import numpy_helper, shape_inference

import tvm_npu
from conftest import run_vm
from qdq_models import quantize_with_ort
from tvm_npu.models import zoo

# name -> (builder, kwargs): reduced widths and inputs so the whole file runs in seconds.
MODELS = {
    "mobilenet_v2": (zoo.mobilenet_v2_shaped, dict(size=64, width=0.5, classes=100)),
    "resnet50": (zoo.resnet50_shaped, dict(size=32, width=0.25, classes=10)),
    "squeezenet1_1": (zoo.squeezenet1_1, dict(size=64, width=0.25, classes=10)),
    "shufflenet_v2": (zoo.shufflenet_v2, dict(size=64, width=0.25, classes=10, repeats=(2, 2, 2))),
    "densenet": (zoo.densenet_shaped, dict(size=32, growth=8, blocks=(2, 2, 2), classes=10)),
    "inception": (zoo.inception_shaped, dict(size=64, width=0.25, classes=10)),
    "vgg": (zoo.vgg_shaped, dict(size=32, width=0.125, classes=10, fc=256)),
}
MOSTLY_NPU = {"mobilenet_v2", "resnet50"}  # issue 5: >= 99% of the MACs on the NPU


def input_shape(model):
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def inputs(n, shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def onnx_macs(model) -> int:
    """Multiply-accumulates of every Conv and Gemm, from ONNX shape inference (independent of tvm_npu)."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            per_output = int(np.prod(weights[node.input[1]][1:]))  # (C / group) x KH x KW, or K
            total += int(np.prod(shapes[node.output[0]])) * per_output
    return total


def ort_session(model, int8_kernels=False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    if int8_kernels:  # run every QDQ group on onnxruntime's integer kernels
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def check_report(name, report, macs, record_property):
    """Every op is placed, every CPU op has a reason, the MACs add up; record the NPU's share."""
    cpu = [p for p in report.placements if p.device == "cpu"]
    assert all(p.code.startswith("NPU_E_") and p.reason for p in cpu), [(p.op, p.code) for p in cpu]
    m = report.macs()
    assert m["npu"] + m["cpu"] == macs and m["unknown_ops"] == 0
    record_property("npu_mac_percent", round(report.mac_percent(), 2))
    record_property("summary", report.summary())
    print(f"{name}: {report.summary()}")
    if name in MOSTLY_NPU:
        assert report.mac_percent() >= 99.0, report.table()


@pytest.fixture(scope="module", params=list(MODELS))
def float_model(request):
    builder, kwargs = MODELS[request.param]
    return request.param, builder(seed=0, **kwargs)


def test_fp16_matches_onnxruntime_within_1e_2_with_the_same_top1(float_model, record_property):
    name, model = float_model
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    check_report(name, report, onnx_macs(model), record_property)
    sess, worst = ort_session(model), 0.0
    for x in inputs(3, input_shape(model), seed=7):
        got, want = run_vm(ex, x), sess.run(None, {"input": x})[0]
        worst = max(worst, float(np.linalg.norm(got - want) / np.linalg.norm(want)))
        assert got.argmax() == want.argmax()
    record_property("fp16_rel_err", worst)
    print(f"{name}: fp16 relative error {worst:.2e}")
    assert worst <= 1e-2


def test_int8_matches_onnxruntime_qdq_within_2_lsb(float_model, tmp_path, record_property):
    name, model = float_model
    shape = input_shape(model)
    q = quantize_with_ort(model, inputs(4, shape, seed=100), tmp_path / f"{name}.onnx")
    last = q.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    scale = float(numpy_helper.to_array(next(t for t in q.graph.initializer if t.name == last.input[1])))
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(q), report=report)
    check_report(name, report, onnx_macs(model), record_property)
    assert {p.precision for p in report.placements if p.device == "npu"} == {"int8"}
    sess, worst = ort_session(q, int8_kernels=True), 0
    for x in inputs(3, shape, seed=7):
        got, want = run_vm(ex, x), sess.run(None, {"input": x})[0]
        worst = max(worst, int(np.rint(np.abs(got - want) / scale).max()))
    record_property("int8_max_lsb", worst)
    print(f"{name}: int8 max error {worst} LSB")
    assert worst <= 2


def test_resnet50_224_puts_99_percent_of_its_macs_on_the_npu():
    """The full-size network: partition and report only (no NPU build or run, which would take long)."""
    model = zoo.resnet50_shaped(seed=0, size=224)
    macs = onnx_macs(model)
    assert 4.0e9 < macs < 4.2e9  # ResNet-50's published 4.1 GMACs: the builder has its shape
    rejections = []
    mod = tvm_npu.partition.partition_for_npu(tvm_npu.from_onnx(model), "npu-ref", rejections)
    report = tvm_npu.BuildReport()
    report.record_partition(mod, rejections)
    assert report.macs()["npu"] + report.macs()["cpu"] == macs
    assert report.mac_percent() >= 99.0, report.table()
