"""onnxruntime's RMS norms as ONNX's RMSNormalization (opset 23), which TVM imports as one rms_norm.

onnxruntime-genai's builder writes `SimplifiedLayerNormalization(x, scale)` (RMSNorm over the last
axis; in the default domain, where only onnxruntime knows it) and com.microsoft
`SkipSimplifiedLayerNormalization(x, skip, scale[, bias])` whose output 0 is the RMSNorm of
s = x + skip (+ bias) and output 3 is s itself (the residual stream of the next layer). Both compute in
float32 (`stash_type` 1): on float32 tensors RMSNormalization with the same epsilon is the same function.
"""

from __future__ import annotations

import onnx
from onnx import helper

from ..contract.errors import NPUError

OPS = ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")


def _refuse(node: onnx.NodeProto, what: str) -> NPUError:
    return NPUError("ERR_OP_NOT_SUPPORTED", f"{node.op_type} {node.name or node.output[0]!r}: {what}")


def rewrite(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The standard nodes computing `node`'s used outputs (op_type in OPS)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    eps = float(attrs.get("epsilon", 1e-5))
    if node.op_type == "SimplifiedLayerNormalization":
        if attrs.get("axis", -1) != -1:
            raise _refuse(node, f"attribute axis {attrs['axis']} (only the last axis, -1)")
        if attrs.get("stash_type", 1) != 1:
            raise _refuse(node, f"attribute stash_type {attrs['stash_type']} (only 1, float32)")
        if len([o for o in node.output if o]) > 1:
            raise _refuse(node, "its inv_std_var output is read (only the normalized output is supported)")
        return [helper.make_node("RMSNormalization", list(node.input[:2]), [node.output[0]], axis=-1, epsilon=eps)]
    if any(len(node.output) > k and node.output[k] for k in (1, 2)):
        raise _refuse(node, "its mean / inv_std_var outputs are read (only outputs 0 and 3 are supported)")
    x, skip, scale = node.input[:3]
    bias = node.input[3] if len(node.input) > 3 and node.input[3] else ""
    total = node.output[3] if len(node.output) > 3 and node.output[3] else f"{node.output[0]}/skip_sum"
    nodes = []
    if bias:
        nodes.append(helper.make_node("Add", [x, skip], [total + "/no_bias"]))
        nodes.append(helper.make_node("Add", [total + "/no_bias", bias], [total]))
    else:
        nodes.append(helper.make_node("Add", [x, skip], [total]))
    nodes.append(helper.make_node("RMSNormalization", [total, scale], [node.output[0]], axis=-1, epsilon=eps))
    return nodes
