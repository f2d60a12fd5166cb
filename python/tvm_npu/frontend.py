"""Stage 1 — import: ONNX models into Relax, with the weights as constants.

`from_onnx` is TVM's ONNX frontend plus tvm_npu's own converters for what TVM lowers in a way the NPU
patterns cannot see (Clip becomes two TIR calls in TVM 0.27; here it stays one `R.clip`, so relu6
fuses into the convolution before it), and QOperator-format quantized models (QLinearConv,
QLinearMatMul) are rewritten into the QDQ format the NPU patterns match (onnx_qlinear.py).
"""

from __future__ import annotations

import contextlib

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .constraints import constant_value
from .errors import NPUError
from .onnx_qlinear import qoperator_to_qdq


class Clip(onnx_frontend.Clip):
    """Clip with constant bounds as one R.clip (TVM emits maximum + minimum as call_tir)."""

    @classmethod
    def _as_clip(cls, x, lo, hi):
        if str(x.ty.dtype) != "float32":
            return None
        bounds = []
        for bound, default in ((lo, np.finfo(np.float32).min), (hi, np.finfo(np.float32).max)):
            if bound is None:
                bounds.append(float(default))
                continue
            value = constant_value(bound)
            if value is None or value.size != 1 or not np.isfinite(value).all():
                return None
            bounds.append(float(value.reshape(-1)[0]))
        return relax.op.clip(x, *bounds)

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        lo = inputs[1] if len(inputs) > 1 else None
        hi = inputs[2] if len(inputs) > 2 else None
        clip = cls._as_clip(inputs[0], lo, hi)
        return clip if clip is not None else super()._impl_v13(bb, inputs, attr, params)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._impl_v13(bb, inputs, attr, params)


CONVERTERS = {"Clip": Clip}


@contextlib.contextmanager
def _npu_converters():
    """TVM's converter map with tvm_npu's converters in it, for the duration of one import."""
    original = onnx_frontend._get_convert_map

    def patched():
        table = original()
        table.update(CONVERTERS)
        return table

    onnx_frontend._get_convert_map = patched
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


def from_onnx(model: "onnx.ModelProto | str", shape_dict: dict | None = None) -> tvm.IRModule:
    """Import an ONNX model (a ModelProto or a path); weights become constants of `main`.

    Raises NPUError(ERR_OP_NOT_SUPPORTED) for a file that is not a valid ONNX model.
    """
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        try:
            model = onnx.load(model)
        except Exception as err:  # onnx raises DecodeError, OSError, ...
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"cannot read ONNX model {model!r}: {err}") from None
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"invalid ONNX model: {err}") from None
    model = qoperator_to_qdq(model)
    with _npu_converters():
        return onnx_frontend.from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False)
