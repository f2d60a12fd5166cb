"""RotaryEmbedding (ONNX's own, opset 23, ai.onnx domain; com.microsoft's is rotary_embedding.py): what
torch.onnx.export(dynamo=True, opset_version=23) writes for a Llama-family RoPE. TVM 0.27 has no
converter for it; `expand` rewrites each node, before the import, into the standard ops ONNX defines it
by (its reference implementation):

- X 4-D [B, H, S, Dh] as given, or 3-D [B, S, num_heads * Dh] split into heads and merged back;
- cos / sin: cos_cache[position_ids] ([max_position, R / 2] tables gathered) with position_ids, else the
  given [B, S, R / 2] per token; broadcast over the heads;
- the first R = rotary_embedding_dim (0: Dh) features rotate: halves as x * (c, c) + (-x2, x1) * (s, s)
  (the rotate-half form of Hugging Face's eager RoPE), or interleaved pairs (x[2k], x[2k + 1]); the
  others pass through.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import Writer, expand_nodes
from .registry import contrib_op

SPEC = OnnxOp(
    ("relax.multiply", "relax.add", "relax.concat", "relax.take"),
    {
        "interleaved": refused("0 (halves) or 1 (interleaved pairs)", lambda v: v not in (0, 1), "ERR_INVALID_MODEL"),
        "num_heads": imported("the heads of a 3-D X"),
        "rotary_embedding_dim": imported("R, the rotated features of each head; 0: the whole head"),
    },
    {
        "X": imported("float32 [B, H, S, Dh] or [B, S, num_heads * Dh]"),
        "cos_cache": imported("[max_position, R / 2] with position_ids, else [B, S, R / 2]"),
        "sin_cache": imported("as cos_cache"),
        "position_ids": imported("int64 [B, S]: the rows of the tables"),
    },
    {"Y": imported("X's shape")},
)
contrib_op("", "RotaryEmbedding", SPEC)(None)


def _refuse(node: onnx.NodeProto, what: str, code: str = "ERR_OP_NOT_SUPPORTED") -> NPUError:
    return NPUError(code, f"RotaryEmbedding node {node.name or node.output[0]!r} (ai.onnx domain): {what}")


def _slice(w: Writer, x: str, begin: int, end: int) -> str:
    return w.op("Slice", x, w.const([begin], np.int64), w.const([end], np.int64), w.const([3], np.int64))


def _expand_node(node: onnx.NodeProto, types: dict) -> Writer:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    names = list(node.input) + [""] * (4 - len(node.input))
    elem, dims = types.get(names[0], (0, None))
    if elem not in (TensorProto.FLOAT, 0):
        raise _refuse(node, "X is not float32; tvm_npu imports this op in float32 (export in fp32)")
    if dims is None or len(dims) not in (3, 4):
        raise _refuse(node, "X must be 3-D or 4-D with a known rank", "ERR_INVALID_MODEL")
    heads = int(attrs.get("num_heads", 0))
    if len(dims) == 3 and (heads <= 0 or dims[2] is None):
        raise _refuse(node, "a 3-D X needs num_heads and a static hidden size", "ERR_INVALID_MODEL")
    dh = dims[3] if len(dims) == 4 else dims[2] // heads
    if dh is None:
        raise _refuse(node, "the head size is not static; give the model's inputs fixed shapes")
    rot = int(attrs.get("rotary_embedding_dim", 0)) or dh
    if rot % 2 or rot > dh:
        what = f"rotary_embedding_dim {rot} must be even and at most the head size {dh}"
        raise _refuse(node, what, "ERR_INVALID_MODEL")
    w = Writer(node)
    x = w.heads(names[0], heads) if len(dims) == 3 else names[0]
    c, s = names[1], names[2]
    if names[3]:
        c, s = (w.op("Gather", t, names[3], axis=0) for t in (c, s))
    c, s = (w.op("Unsqueeze", t, w.const([1], np.int64)) for t in (c, s))  # [B, 1, S, R / 2]
    part = _slice(w, x, 0, rot) if rot < dh else x
    half = rot // 2
    if int(attrs.get("interleaved", 0)):
        pairs = w.op("Reshape", part, w.const([0, 0, 0, half, 2], np.int64))
        x1, x2 = (w.op("Squeeze", w.op("Slice", pairs, *(w.const([v], np.int64) for v in (k, k + 1, 4))),
                       w.const([4], np.int64)) for k in (0, 1))  # fmt: skip
        real = w.op("Sub", w.op("Mul", x1, c), w.op("Mul", x2, s))
        imag = w.op("Add", w.op("Mul", x1, s), w.op("Mul", x2, c))
        one = w.const([4], np.int64)
        both = w.op("Concat", w.op("Unsqueeze", real, one), w.op("Unsqueeze", imag, one), axis=4)
        out = w.op("Reshape", both, w.const([0, 0, 0, rot], np.int64))
    else:
        x1, x2 = _slice(w, part, 0, half), _slice(w, part, half, rot)
        cc, ss = (w.op("Concat", t, t, axis=-1) for t in (c, s))
        rotated = w.op("Concat", w.op("Neg", x2), x1, axis=-1)
        out = w.op("Add", w.op("Mul", part, cc), w.op("Mul", rotated, ss))
    if rot < dh:
        out = w.op("Concat", out, _slice(w, x, rot, dh), axis=3)
    if len(dims) == 3:
        w.merge(out, out=node.output[0])
    else:
        w.op("Identity", out, out=node.output[0])
    return w


def expand(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every ai.onnx RotaryEmbedding node replaced by the standard ops of the module
    docstring (a copy; `model` itself when it has none)."""
    return expand_nodes(model, "RotaryEmbedding", SPEC, _expand_node)
