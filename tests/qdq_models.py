"""onnxruntime's quantize_static (s8s8 or u8s8, per-channel QDQ) and inference, for the int8 tests.

The float models themselves are built by tvm_npu.models (re-exported here for the tests)."""

import onnx
from onnx import numpy_helper

from tvm_npu.models import GraphBuilder, mobilenet_v2_shaped, op_zoo  # noqa: F401


def quantize_with_ort(
    model: onnx.ModelProto, calib: list, path, activations="int8", weights="int8", per_channel=True, extra_options=None
) -> onnx.ModelProto:
    """onnxruntime's quantize_static: QDQ format, int8 (or "uint8") activations and weights, per-channel
    unless told."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    src = str(path) + ".float.onnx"
    onnx.save(model, src)
    quantize_static(
        src,
        str(path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=types[activations],
        weight_type=types[weights],
        per_channel=per_channel,
        extra_options=extra_options,
    )
    return onnx.load(str(path))


def ort_session(model, int8_kernels: bool):
    """onnxruntime's CPU provider. With int8_kernels, every QDQ group runs on ORT's integer kernels
    (QLinearConv, QLinearAdd, ...); by default ORT emulates some s8 groups (depthwise, add) in float."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if int8_kernels:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def output_scale(model) -> float:
    last = model.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(init[last.input[1]])
