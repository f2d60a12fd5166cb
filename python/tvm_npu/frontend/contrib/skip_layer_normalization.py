"""SkipLayerNormalization (com.microsoft): the residual add and LayerNorm of a transformer block,
``S = input + skip (+ bias)``, ``output = LayerNorm(S over the last axis) * gamma (+ beta)``;
the fourth output, input_skip_bias_sum, is S (the next block's residual). Imported as ``relax.add``s and
``relax.nn.layer_norm`` (NPU-run over the last axis); TVM 0.27's own converter refuses a node without
beta and bias and gives no S."""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import require_float32, shape_of, where
from .registry import MS_DOMAIN, contrib_op

_UNREAD = "refused when read: onnxruntime's training statistics; the import gives output and the sum only"


def skip_spec(norm: str, inputs: dict) -> OnnxOp:
    return OnnxOp(
        ("relax.add", norm),
        {"epsilon": imported("the norm's epsilon (default 1e-12)")},
        inputs,
        {
            "output": imported("the normalized sum"),
            "mean": refused(_UNREAD),
            "inv_std_var": refused(_UNREAD),
            "input_skip_bias_sum": imported("input + skip (+ bias), the residual: computed when read"),
        },
    )


_SKIP_INPUTS = {
    "input": imported("float32 [batch, sequence, hidden] or [tokens, hidden]"),
    "skip": imported("input's shape, or broadcast to it ([1, sequence, hidden], [sequence, hidden])"),
    "gamma": imported("[hidden]"),
}
SPEC = skip_spec(
    "relax.nn.layer_norm",
    {
        **_SKIP_INPUTS,
        "beta": imported("[hidden]; absent: zeros"),
        "bias": imported("[hidden], added to the sum; absent: none"),
    },
)


class SkipNorm(onnx_frontend.OnnxOpConverter):
    """The shared form: the sum, the norm of it, and (output, -, -, sum) as the node's outputs (the two
    statistics are never read: check_model refuses a model that reads them, registry.routed drops them)."""

    OP = ""
    BETA = True  # SkipLayerNormalization's inputs: input, skip, gamma, beta, bias

    @classmethod
    def _norm(cls, total, gamma, beta, epsilon):
        raise NotImplementedError

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where(cls.OP, attr)
        x, skip, gamma = inputs[0], inputs[1], inputs[2]
        beta = inputs[3] if cls.BETA and len(inputs) > 3 else None
        bias = inputs[4 if cls.BETA else 3] if len(inputs) > (4 if cls.BETA else 3) else None
        for name, t in (("input", x), ("skip", skip), ("gamma", gamma), ("beta", beta), ("bias", bias)):
            if t is not None:
                require_float32(t, name, place)
        shape = shape_of(x, "input", place)
        hidden = shape[-1]
        if len(shape) not in (2, 3):
            raise NPUError("ERR_INVALID_MODEL", f"{place}: the input is {shape}; onnxruntime takes 2-D or 3-D")
        skip_shape = shape_of(skip, "skip", place)
        if skip_shape != shape and skip_shape not in ([1, *shape[1:]], shape[1:]):
            raise NPUError("ERR_INVALID_MODEL", f"{place}: skip {skip_shape} does not broadcast to the input {shape}")
        for name, t in (("gamma", gamma), ("beta", beta), ("bias", bias)):
            if t is not None and int(np.prod(shape_of(t, name, place))) != hidden:
                raise NPUError("ERR_INVALID_MODEL", f"{place}: {name} is not [hidden] = [{hidden}]")
        gamma, beta, bias = (_row(t, hidden) for t in (gamma, beta, bias))
        total = bb.normalize(relax.op.add(x, skip))  # onnxruntime's order: (input + skip) + bias
        if bias is not None:
            total = bb.normalize(relax.op.add(total, bias))
        out = bb.normalize(cls._norm(total, gamma, beta, float(attr.get("epsilon", 1e-12))))
        return relax.Tuple([out, out, out, total])


def _row(t, hidden: int):
    """`t` as [hidden] (kept as it is when it is: a reshape would hide a constant gamma from the NPU)."""
    if t is None or [int(d) for d in t.ty.shape] == [hidden]:
        return t
    return relax.op.reshape(t, [hidden])


@contrib_op(MS_DOMAIN, "SkipLayerNormalization", SPEC)
class SkipLayerNormalization(SkipNorm):
    OP = "SkipLayerNormalization"

    @classmethod
    def _norm(cls, total, gamma, beta, epsilon):
        if beta is None:
            beta = relax.const(np.zeros(int(total.ty.shape[-1]), np.float32))
        return relax.op.nn.layer_norm(total, gamma, beta, axes=[-1], epsilon=epsilon)
