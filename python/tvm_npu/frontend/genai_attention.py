"""onnxruntime's GroupQueryAttention as standard ONNX ops over the step model's static cache.

The op (com.microsoft, onnxruntime's ContribOperators.md) takes the new Q, K, V (packed in one tensor or
three), the past K / V [B, H_kv, P, D], `seqlens_k` (each sequence's total length - 1) and
`total_sequence_length`; it rotates Q and K itself when `do_rotary` (tables `cos_cache` / `sin_cache`
[max_position, R / 2] gathered at each token's position, halves or interleaved pairs, the first R of D
dims), appends K / V to the past (the `present` outputs) and attends each query to the rows up to its
own position (with `local_window_size` w > 0, only the w rows ending there), its H heads sharing the
H_kv KV heads in groups, the scores times `scale` (default 1 / sqrt(D)) and, with `softcap` c > 0,
c * tanh(s / c).

In the step model a token's position is `position + s`, the past is the whole cache [1, H_kv, T, D],
the append is a ScatterND of the S new rows at those positions (its output `cache_out.{i}.*`), and the
mask is computed from `position` as Less + Where (with 0 < `local_window_size` < T the band, Less, Less,
Or, as frontend/decoder_mask.py writes it): the forms of `tvm_npu.models.decoder`'s step models, which
partition/kv_cache_check.py takes as the resident cache, a softcap and a window included.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..contract.errors import NPUError

MASKED = -1e9  # a hidden score: exp underflows to 0 in float32 as -inf would, without inf arithmetic
SUPPORTED = ("num_heads", "kv_num_heads", "scale", "local_window_size", "softcap", "do_rotary", "rotary_interleaved")
# without effect here (the q / k norm weights are refused inputs), or at their defaults only
HARMLESS = ("qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon")
DEFAULTS = {"causal": 1, "smooth_softmax": 0, "qk_output": 0, "kv_cache_bit_width": 0, "sliding_window_cache": 0}


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _refuse(node: onnx.NodeProto, what: str) -> NPUError:
    return NPUError("ERR_OP_NOT_SUPPORTED", f"GroupQueryAttention {node.name or node.output[0]!r}: {what}")


class Emitter:
    """Nodes and initializers under one name prefix."""

    def __init__(self, prefix: str):
        self.p, self.n = prefix, 0
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, value) -> str:
        self.n += 1
        name = f"{self.p}c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, np.int64))

    def op(self, op: str, inputs: list, out: str | None = None, outputs: int = 1, **attrs):
        self.n += 1
        names = [out] if out else [f"{self.p}{op.lower()}{self.n}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, **attrs))
        return names[0] if outputs == 1 else names


def positions(e: Emitter, seq: int) -> str:
    """int64 [S]: position + s."""
    return e.op("Add", ["position", e.const(np.arange(seq, dtype=np.int64))])


def scatter_indices(e: Emitter, pos: str, heads: int, seq: int) -> str:
    """int64 [1, H_kv, S, 3]: the rows (0, h, position + s) a step writes, as Concat(0, h, Expand(...))."""
    shape = (1, heads, seq, 1)
    head = np.broadcast_to(np.arange(heads, dtype=np.int64)[None, :, None, None], shape).copy()
    rows = e.op("Expand", [e.op("Reshape", [pos, e.ints(1, 1, seq, 1)]), e.ints(*shape)])
    return e.op("Concat", [e.const(np.zeros(shape, np.int64)), e.const(head), rows], axis=3)


def causal_mask(e: Emitter, pos: str, total: int, window: int) -> str:
    """float32 [S, T]: 0 where row t is seen by the token at pos (t <= pos, and with a window w > 0 the
    w rows up to pos only, t > pos - w, as onnxruntime's kernel), MASKED elsewhere."""
    col = e.op("Unsqueeze", [pos, e.ints(1)])  # [S, 1]
    rows = e.const(np.arange(total, dtype=np.int64)[None, :])
    hidden = e.op("Less", [col, rows])
    if 0 < window < total:  # rows up to pos - w hidden too: a band (a wider window is plain causal),
        # t + w - 1 < pos written as decoder_mask.py writes it, the form the resident cache takes
        last = e.const(np.arange(total, dtype=np.int64)[None, :] + window - 1)
        hidden = e.op("Or", [hidden, e.op("Less", [last, col])])
    return e.op("Where", [hidden, e.const(np.float32(MASKED)), e.const(np.float32(0.0))])


def _rotate(e: Emitter, x: str, cos: str, sin: str, dim: int, rot: int, interleaved: bool) -> str:
    """RoPE of x [1, n, S, D] on its first `rot` dims; cos / sin [S, rot / 2]."""
    half = rot // 2
    if rot < dim:
        x, rest = e.op("Split", [x, e.ints(rot, dim - rot)], outputs=2, axis=-1)
    if interleaved:  # pairs (2j, 2j + 1)
        pairs = e.op("Reshape", [x, e.ints(0, 0, 0, half, 2)])
        x1, x2 = (e.op("Squeeze", [p, e.ints(-1)]) for p in e.op("Split", [pairs, e.ints(1, 1)], outputs=2, axis=-1))
    else:  # halves
        x1, x2 = e.op("Split", [x, e.ints(half, half)], outputs=2, axis=-1)
    r1 = e.op("Sub", [e.op("Mul", [x1, cos]), e.op("Mul", [x2, sin])])
    r2 = e.op("Add", [e.op("Mul", [x2, cos]), e.op("Mul", [x1, sin])])
    if interleaved:
        out = e.op("Concat", [e.op("Unsqueeze", [r, e.ints(-1)]) for r in (r1, r2)], axis=-1)
        out = e.op("Reshape", [out, e.ints(0, 0, 0, rot)])
    else:
        out = e.op("Concat", [r1, r2], axis=-1)
    return e.op("Concat", [out, rest], axis=-1) if rot < dim else out


def _heads(e: Emitter, x: str, n: int, seq: int, dim: int) -> str:
    """[1, S, n * D] -> [1, n, S, D]."""
    return e.op("Transpose", [e.op("Reshape", [x, e.ints(1, seq, n, dim)])], perm=[0, 2, 1, 3])


def check(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> dict:
    """The node's attributes with their defaults, after refusing what is not implemented exactly."""
    attrs = _attrs(node)
    for name, default in DEFAULTS.items():
        if name in attrs and attrs.pop(name) != default:
            raise _refuse(node, f"attribute {name} is supported at its default {default} only")
    for name in HARMLESS:
        attrs.pop(name, None)
    unknown = sorted(set(attrs) - set(SUPPORTED))
    if unknown:
        raise _refuse(node, f"attribute {unknown[0]} is not supported (only {', '.join(SUPPORTED)})")
    for name in ("num_heads", "kv_num_heads"):
        if attrs.get(name, 0) <= 0:
            raise _refuse(node, f"attribute {name} must be a positive head count")
    if attrs["num_heads"] % attrs["kv_num_heads"]:
        raise _refuse(node, f"num_heads {attrs['num_heads']} is not a multiple of kv_num_heads")
    if attrs.get("local_window_size", -1) == 0 or attrs.get("local_window_size", -1) < -1:
        raise _refuse(node, f"attribute local_window_size {attrs['local_window_size']} (-1, or a window > 0)")
    if attrs.get("softcap", 0.0) < 0:
        raise _refuse(node, f"attribute softcap {attrs['softcap']} is negative")
    extra = [k for k, name in enumerate(node.input) if k >= 9 and name]
    if extra:  # position_ids, attention_bias, head_sink (newer onnxruntime): not in the builder's graphs
        raise _refuse(node, f"input {extra[0]} ({node.input[extra[0]]}) is not supported")
    if attrs.get("do_rotary", 0):
        for k in (7, 8):
            if len(node.input) <= k or node.input[k] not in consts:
                raise _refuse(node, "do_rotary needs constant cos_cache and sin_cache inputs")
    return {"scale": 0.0, "local_window_size": -1, "softcap": 0.0, "do_rotary": 0, "rotary_interleaved": 0, **attrs}


def expand(node: onnx.NodeProto, layer: int, consts: dict, seq: int, total: int, dim: int, pos: str, mask: str):
    """(nodes, initializers) computing the node's output over layer `layer`'s static cache: the new
    rows written at `pos` (into outputs cache_out.{layer}.key / value), attention under `mask`."""
    a = check(node, consts)
    H, H_kv = a["num_heads"], a["kv_num_heads"]
    e = Emitter(f"gqa{layer}/")
    q, k, v = (node.input[i] if len(node.input) > i else "" for i in range(3))
    if not k:  # packed [1, S, (H + 2 H_kv) D]
        q, k, v = e.op("Split", [q, e.ints(H * dim, H_kv * dim, H_kv * dim)], outputs=3, axis=-1)
    elif not v:
        raise _refuse(node, "a key input without a value input")
    q, k, v = _heads(e, q, H, seq, dim), _heads(e, k, H_kv, seq, dim), _heads(e, v, H_kv, seq, dim)
    if a["do_rotary"]:
        rot = 2 * consts[node.input[7]].shape[-1]
        if consts[node.input[7]].shape[0] < total or rot > dim or rot % 2:
            raise _refuse(node, f"cos_cache {list(consts[node.input[7]].shape)} does not cover {total} positions")
        cos, sin = (e.op("Gather", [node.input[i], pos]) for i in (7, 8))  # [S, R / 2]
        q, k = (_rotate(e, x, cos, sin, dim, rot, bool(a["rotary_interleaved"])) for x in (q, k))
    index = scatter_indices(e, pos, H_kv, seq)
    keys = e.op("ScatterND", [f"cache.{layer}.key", index, k], out=f"cache_out.{layer}.key")
    values = e.op("ScatterND", [f"cache.{layer}.value", index, v], out=f"cache_out.{layer}.value")
    if H_kv < H:  # repeat_kv as torch exports it: Unsqueeze -> Expand -> Reshape
        full = e.ints(1, H_kv, H // H_kv, total, dim)
        keys, values = (
            e.op("Reshape", [e.op("Expand", [e.op("Unsqueeze", [x, e.ints(2)]), full]), e.ints(1, H, total, dim)])
            for x in (keys, values)
        )
    scores = e.op("MatMul", [q, e.op("Transpose", [keys], perm=[0, 1, 3, 2])])
    scale = a["scale"] or 1.0 / np.sqrt(dim)
    scores = e.op("Mul", [scores, e.const(np.float32(scale))])
    if a["softcap"] > 0:
        c = e.const(np.float32(a["softcap"]))
        scores = e.op("Mul", [e.op("Tanh", [e.op("Div", [scores, c])]), c])
    probs = e.op("Softmax", [e.op("Add", [scores, mask])], axis=-1)
    ctx = e.op("Transpose", [e.op("MatMul", [probs, values])], perm=[0, 2, 1, 3])
    e.op("Reshape", [ctx, e.ints(1, seq, H * dim)], out=node.output[0])
    return e.nodes, e.inits
