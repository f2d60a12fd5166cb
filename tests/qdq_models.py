"""onnxruntime's quantize_static (s8s8, per-channel QDQ) and inference, for the int8 tests.

The float models themselves are built by tvm_npu.models (re-exported here for the tests)."""

import onnx

from tvm_npu.models import GraphBuilder, mobilenet_v2_shaped, op_zoo  # noqa: F401


def quantize_with_ort(model: onnx.ModelProto, calib: list, path) -> onnx.ModelProto:
    """onnxruntime's quantize_static: QDQ format, int8 activations and weights, per-channel."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    src = str(path) + ".float.onnx"
    onnx.save(model, src)
    quantize_static(src, str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
    return onnx.load(str(path))
