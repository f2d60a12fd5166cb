"""SkipSimplifiedLayerNormalization (com.microsoft): the residual add and RMSNorm of a Llama-family
block, ``S = input + skip (+ bias)``, ``output = S / sqrt(mean(S^2 over the last axis) + epsilon) * gamma``;
input_skip_bias_sum (the fourth output) is S. onnxruntime-genai's model builder writes it between
every two layers. Imported as ``relax.add``s and ``relax.nn.rms_norm`` (NPU-run)."""

from __future__ import annotations

from tvm import relax

from ..onnx_attributes import imported
from .registry import MS_DOMAIN, contrib_op
from .skip_layer_normalization import _SKIP_INPUTS, SkipNorm, skip_spec

SPEC = skip_spec("relax.nn.rms_norm", {**_SKIP_INPUTS, "bias": imported("[hidden], added to the sum; absent: none")})


@contrib_op(MS_DOMAIN, "SkipSimplifiedLayerNormalization", SPEC)
class SkipSimplifiedLayerNormalization(SkipNorm):
    OP = "SkipSimplifiedLayerNormalization"
    BETA = False  # inputs: input, skip, gamma, bias

    @classmethod
    def _norm(cls, total, gamma, beta, epsilon):
        return relax.op.nn.rms_norm(total, gamma, axes=[-1], epsilon=epsilon)
