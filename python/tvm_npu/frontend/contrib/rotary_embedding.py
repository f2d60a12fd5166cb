"""RotaryEmbedding (com.microsoft): RoPE with the cos / sin tables as inputs, as onnxruntime's CPU kernel
computes it. For each head of each token at position p (position_ids[b, s], or position_ids[0] + s when
it holds one value), the first `rotary_embedding_dim` features (all of the head by default) rotate by
the table rows cos[p], sin[p] (rotary_embedding_dim / 2 values each):

- non-interleaved (default): x1, x2 = the two halves; out = (x1 * c - x2 * s, x2 * c + x1 * s), written
  as ``x * concat(c, c) + concat(-x2, x1) * concat(s, s)``, the rotate-half form the NPU's ROPE runs;
- interleaved: the pairs (x[2k], x[2k+1]) rotate by (c[k], s[k]);

the remaining features pass through. The input is [batch, sequence, hidden] (heads of hidden / num_heads
features side by side) or [batch, num_heads, sequence, head_size]. ONNX's own RotaryEmbedding (opset 23,
inputs in another order) is another op and is not this converter's (registry.routed dispatches by domain).
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import require_float32, shape_of, where
from .registry import MS_DOMAIN, contrib_op

SPEC = OnnxOp(
    ("relax.take", "relax.multiply", "relax.add", "relax.concat", "relax.negative"),
    {
        "interleaved": refused(
            "0 (halves) or 1 (interleaved pairs); onnxruntime reads any other value as 0: write 0",
            lambda v: v not in (0, 1),
            "ERR_INVALID_MODEL",
        ),
        "is_packed_batching": refused(
            "refused: ragged (packed) batches have no fixed [batch, sequence] layout; export unpacked", lambda v: v != 0
        ),
        "num_heads": imported("the head count (needed with rotary_embedding_dim); else hidden / head_size"),
        "rotary_embedding_dim": imported("the rotated features of each head; 0: the whole head"),
        "scale": imported("no effect: onnxruntime uses it only to extend the tables, which it refuses too"),
    },
    {
        "input": imported("float32 [batch, sequence, hidden] or [batch, num_heads, sequence, head_size]"),
        "position_ids": imported("int64, one value (the first position) or [batch, sequence]"),
        "cos_cache": imported("[max_sequence_length, rotary_embedding_dim / 2], a constant or computed"),
        "sin_cache": imported("as cos_cache"),
    },
    {"output": imported("the input's shape")},
)


class _Rope:
    """The geometry of one node, checked as onnxruntime's CheckInputs does (and refusing the forms where
    its kernel's strides disagree with the tensor's layout)."""

    def __init__(self, x, cos, sin, pos, attr, place):
        shape = shape_of(x, "input", place)
        table = shape_of(cos, "cos_cache", place)
        if len(shape) not in (3, 4):
            raise NPUError("ERR_INVALID_MODEL", f"{place}: the input is {shape}; it must be 3-D or 4-D")
        if len(table) != 2 or shape_of(sin, "sin_cache", place) != table:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: cos_cache / sin_cache must be the same 2-D shape")
        heads, dim = int(attr.get("num_heads", 0)), int(attr.get("rotary_embedding_dim", 0))
        self.packed = len(shape) == 3  # [B, S, N * H]; else [B, N, S, H]
        batch, seq = shape[0], shape[1] if self.packed else shape[2]
        hidden = shape[2] if self.packed else shape[1] * shape[3]
        if dim > 0 and heads <= 0:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: rotary_embedding_dim {dim} needs num_heads")
        head = 2 * table[1] if dim == 0 else hidden // max(heads, 1)
        heads = heads if heads > 0 else hidden // head
        actual = shape[3] if not self.packed else hidden // heads
        if heads * head != hidden or head != actual or (not self.packed and heads != shape[1]):
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{place}: input {shape}, num_heads {heads}, head size {head} from the tables "
                f"{table}: onnxruntime's kernel would read these heads with other strides; give num_heads and "
                "tables of rotary_embedding_dim / 2 columns that match the input",
            )
        self.dim = dim or head
        if self.dim % 2 or self.dim > head or table[1] != self.dim // 2:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{place}: rotary_embedding_dim {self.dim} of heads of {head} with tables {table}: the import "
                "takes an even dimension <= the head size and tables of rotary_embedding_dim / 2 columns",
            )
        if seq > table[0]:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{place}: {seq} tokens but tables of {table[0]} positions (onnxruntime refuses it too)",
            )
        pos_shape = shape_of(pos, "position_ids", place)
        self.offset = int(np.prod(pos_shape)) == 1 and len(pos_shape) <= 1
        if not self.offset and pos_shape != [batch, seq]:
            raise NPUError(
                "ERR_INVALID_MODEL", f"{place}: position_ids {pos_shape}; onnxruntime takes [1] or {[batch, seq]}"
            )
        if str(pos.ty.dtype) != "int64":
            raise NPUError("ERR_INVALID_MODEL", f"{place}: position_ids are {pos.ty.dtype}, not int64")
        self.shape, self.batch, self.seq, self.heads, self.head = shape, batch, seq, heads, head


@contrib_op(MS_DOMAIN, "RotaryEmbedding", SPEC)
class RotaryEmbedding(onnx_frontend.OnnxOpConverter):
    """onnxruntime's RoPE, exactly (the same products and one add per output, in its order)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where("RotaryEmbedding", attr)
        x, pos, cos, sin = inputs[0], inputs[1], inputs[2], inputs[3]
        for name, t in (("input", x), ("cos_cache", cos), ("sin_cache", sin)):
            require_float32(t, name, place)
        g = _Rope(x, cos, sin, pos, attr, place)
        op, e = relax.op, bb.normalize

        def cut(t, begin, end):  # features begin..end of each head (axis 3)
            return e(op.strided_slice(t, axes=[3], begin=[begin], end=[end]))

        # heads on their own axis: [B, S, N, H] (3-D input) or [B, N, S, H]
        lead = [g.batch, g.seq, g.heads] if g.packed else [g.batch, g.heads, g.seq]
        heads = e(op.reshape(x, [*lead, g.head])) if g.packed else x
        if g.offset:  # positions position_ids[0] + s, the same for every batch
            index = e(op.add(e(op.reshape(pos, [1])), relax.const(np.arange(g.seq, dtype=np.int64), "int64")))
            rows = [1, g.seq, 1, -1] if g.packed else [1, 1, g.seq, -1]
        else:
            index = pos
            rows = [g.batch, g.seq, 1, -1] if g.packed else [g.batch, 1, g.seq, -1]
        c, s = (e(op.reshape(e(op.take(t, index, axis=0)), rows)) for t in (cos, sin))
        rot = cut(heads, 0, g.dim) if g.dim < g.head else heads
        half = g.dim // 2
        if int(attr.get("interleaved", 0)):
            pairs = e(op.reshape(rot, [*lead, half, 2]))
            even, odd = (e(op.squeeze(e(op.strided_slice(pairs, [4], [i], [i + 1])), [4])) for i in (0, 1))
            out_even = e(op.add(e(op.multiply(even, c)), e(op.multiply(e(op.negative(odd)), s))))
            out_odd = e(op.add(e(op.multiply(odd, c)), e(op.multiply(even, s))))
            pair = e(op.concat([e(op.expand_dims(out_even, 4)), e(op.expand_dims(out_odd, 4))], 4))
            out = e(op.reshape(pair, [*lead, g.dim]))
        else:
            cc, ss = (e(op.concat([t, t], axis=3)) for t in (c, s))
            turned = e(op.concat([e(op.negative(cut(rot, half, g.dim))), cut(rot, 0, half)], axis=3))
            out = e(op.add(e(op.multiply(rot, cc)), e(op.multiply(turned, ss))))
        if g.dim < g.head:
            out = e(op.concat([out, cut(heads, g.dim, g.head)], axis=3))
        return op.reshape(out, g.shape) if g.packed else out
