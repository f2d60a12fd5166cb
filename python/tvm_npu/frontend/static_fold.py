"""Values computed from static shapes alone become constants at import (issue 34).

Why: exporters build constants in the graph from shapes: CLIP's causal mask (Shape -> Range -> Less ->
Where -> Expand), the attention scale of torch's scaled_dot_product_attention (Shape -> Gather -> Cast
-> Sqrt -> Div). TVM imports them as run-time CPU ops (shape_of, call_tir, sqrt) that cut the NPU graph
into regions too small to run, and an additive mask that is not a constant keeps the masked softmax
from fusing. With every graph input static they are constants, so they are folded here, before TVM's
importer, for every static export.

Exact: a node is evaluated (onnx.reference.ReferenceEvaluator, numpy) only when every input is a
constant (an initializer, a Constant node, the Shape / Size of a statically shaped tensor, or an
already folded output); a node reading a real graph input, directly or not, is never folded. Integer,
comparison and IEEE arithmetic results (+ - * / sqrt, casts) are onnxruntime's bit for bit; a
transcendental (exp, sin, ...) of a constant may differ from onnxruntime's in the last ulp, as TVM's
CPU kernels would. A folded result larger than _MAX_ELEMENTS stays the node it was (an Expand of a small
constant to a big shape stays a broadcast op), so folding never makes the graph much bigger; random
ops, subgraphs, contrib ops and a QDQ weight's Quantize / Dequantize are not evaluated. Same-type
Casts (the tracer's `.to(dtype)` after every softmax) are then bypassed.
"""

from __future__ import annotations

import onnx

from . import decoder_fold

# Largest folded result, in elements (256 KiB of float32); a bigger one stays an op of its small inputs.
_MAX_ELEMENTS = 1 << 16
# Constant nodes stay (already constants); a QDQ weight keeps its Quantize/Dequantize pair, which the
# QDQ import reads (and decoder_fold._NOT_FOLDED keeps DequantizeLinear for issue 31).
_KEPT = {"Constant", "QuantizeLinear", "DynamicQuantizeLinear"}


def folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` (graph inputs static) with the values computed from static shapes as
    initializers."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    values = decoder_fold.constants(copy.graph)
    while decoder_fold.fold_pass(copy, values, kept=_KEPT, max_elements=_MAX_ELEMENTS):
        decoder_fold.remove_dead(copy)
    # the tracer's `.to(dtype)` of a tensor of that dtype (after every attention softmax): identities that
    # would cut the NPU graph as CPU astype ops
    decoder_fold.bypass_identities(copy, decoder_fold._same_type_casts(copy))
    return copy
