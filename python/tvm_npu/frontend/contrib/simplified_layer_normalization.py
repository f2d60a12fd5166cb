"""SimplifiedLayerNormalization (onnxruntime, in ONNX's domain): RMSNorm,
``Y = X / sqrt(mean(X^2 over axes axis..last) + epsilon) * scale``. onnxruntime-genai's model builder
writes it for every Llama-family norm. Imported as ``relax.nn.rms_norm`` (the op RMSNormalization (23)
imports as; over the last axis it runs on the NPU as one NORM command)."""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import require_float32, shape_of, where
from .registry import contrib_op

SPEC = OnnxOp(
    ("relax.nn.rms_norm",),
    {
        "axis": imported("the first normalized axis; the norm runs over axis..last (negative counts back)"),
        "epsilon": imported("rms_norm's epsilon (default 1e-5)"),
        "stash_type": refused(
            "1 (float32, the default) only: the import computes in float32", lambda v: v != 1, "ERR_OP_NOT_SUPPORTED"
        ),
    },
    {"X": imported("float32"), "scale": imported("the weight, X's shape from axis on")},
    {
        "Y": imported("the normalized X"),
        "inv_std_var": refused("refused when read: the import gives only Y (nothing reads it in inference)"),
    },
)


def rms_norm(x, scale, axis: int, epsilon: float, place: str):
    """rms_norm(x, scale) over axes axis..last; the scale reshaped to x's shape from `axis` on."""
    shape = shape_of(x, "input", place)
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise NPUError("ERR_INVALID_MODEL", f"{place}: axis {axis} outside the input's rank {rank}")
    want = shape[axis:]
    got = shape_of(scale, "scale", place)
    if int(np.prod(got)) != int(np.prod(want)) or len(got) > len(want):
        raise NPUError("ERR_INVALID_MODEL", f"{place}: the scale is {got}, the normalized axes {want}")
    if got != want:
        scale = relax.op.reshape(scale, want)
    axes = [-1] if axis == rank - 1 else list(range(axis, rank))
    return relax.op.nn.rms_norm(x, scale, axes=axes, epsilon=float(epsilon))


@contrib_op("", "SimplifiedLayerNormalization", SPEC)
class SimplifiedLayerNormalization(onnx_frontend.OnnxOpConverter):
    """RMSNorm over axes axis..last, float32."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where("SimplifiedLayerNormalization", attr)
        x, scale = inputs[0], inputs[1]
        require_float32(x, "input X", place)
        require_float32(scale, "scale", place)
        return rms_norm(x, scale, int(attr.get("axis", -1)), attr.get("epsilon", 1e-5), place)
