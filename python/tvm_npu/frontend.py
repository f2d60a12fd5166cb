"""Stage 1 — import: ONNX models into Relax, with the weights as constants.

A thin entry point over TVM's ONNX frontend today; it is where tvm_npu adds what TVM's frontend lacks
(LSTM, QLinear* conversion — issues 3, 5, 6) and turns import failures into coded errors.
"""

from __future__ import annotations

import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx as _tvm_from_onnx

from .errors import NPUError


def from_onnx(model: "onnx.ModelProto | str", shape_dict: dict | None = None) -> tvm.IRModule:
    """Import an ONNX model (a ModelProto or a path); weights become constants of `main`."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        try:
            model = onnx.load(model)
        except Exception as err:  # onnx raises DecodeError, OSError, ...
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"cannot read ONNX model {model!r}: {err}") from None
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"invalid ONNX model: {err}") from None
    return _tvm_from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False)
