"""Attention (ONNX's own, opset 23 and 24, ai.onnx domain): what torch.onnx.export(dynamo=True,
opset_version >= 23) writes for scaled_dot_product_attention, and what decoders with the KV append inside
the op use. TVM 0.27's importer reads every node called "Attention" as com.microsoft's op; `expand`
rewrites each of ONNX's into the standard ops it is defined by, before the import (from_onnx) and before
the decoder import (decoder.py), where the existing forms then recognise its cache append (the Concat)
and its attention (the resident cache of partition/kv_cache_check.py):

- Q, K, V 4-D [B, H, S, D] as given; 3-D [B, S, H * D] split into `q_num_heads` / `kv_num_heads` heads
  (Reshape [0, 0, H, -1], Transpose) and Y merged back;
- with past_key / past_value: present = Concat(past, new, axis=2), the attention over it;
- grouped-query (kv heads < q heads): the keys and values repeated as Unsqueeze -> Expand -> Reshape;
- scores = Q x K^T * scale (default 1 / sqrt(head size)); with softcap c > 0, c * tanh(scores / c);
- then the bias: a float attn_mask added, a boolean one as Where(mask, 0, -inf), is_causal's bottom-right
  mask (query s sees key t <= s + past length) as -inf above it; softmax over the keys; a row that sees
  no key is zero, as ONNX defines it (Where(IsNaN(P), 0, P), sdpa's guard); Y = P x V.

Refused, coded: qk_matmul_output read, nonpad_kv_seqlen given, a softmax_precision other than float32,
a mask whose last dim is not the total length (ONNX pads it with -inf; onnxruntime refuses it), tensors
other than float32, and is_causal where the lengths are not static.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import Writer, expand_nodes
from .registry import contrib_op

_WINDOW = "refused: -1 (no window) only; a banded window (opset 25) is not imported"
SPEC = OnnxOp(
    ("relax.matmul", "relax.nn.softmax", "relax.concat", "relax.where"),
    {
        "is_causal": imported("1: query s sees key t <= s + past length (bottom-right); needs static lengths"),
        "kv_num_heads": imported("the K / V heads of 3-D inputs"),
        "q_num_heads": imported("the Q heads of 3-D inputs (a multiple of kv_num_heads)"),
        "qk_matmul_output_mode": imported("no effect: the qk_matmul_output output is refused"),
        "scale": refused(
            "the scores' factor, > 0 (onnxruntime refuses others); default 1 / sqrt(head size)",
            lambda v: not v > 0,
            "ERR_INVALID_MODEL",
        ),
        "softcap": refused("0 (none) or c > 0: c * tanh(scores / c)", lambda v: v < 0, "ERR_INVALID_MODEL"),
        "softmax_precision": refused(
            "1 (float32) only: the import computes the softmax in float32; drop the attribute or set 1",
            lambda v: v != 1,
        ),
        "left_window_size": refused(_WINDOW, lambda v: v != -1),
        "right_window_size": refused(_WINDOW, lambda v: v != -1),
    },
    {
        "Q": imported("float32 [B, H, S, D] or [B, S, H * D]"),
        "K": imported("float32 [B, H_kv, S_kv, D] or [B, S_kv, H_kv * D]"),
        "V": imported("float32 [B, H_kv, S_kv, Dv] or [B, S_kv, H_kv * Dv]"),
        "attn_mask": imported("boolean (True: seen) or float32 (added), broadcast to [B, H, S, total]"),
        "past_key": imported("[B, H_kv, P, D]: present_key = Concat(past_key, K, axis=2)"),
        "past_value": imported("[B, H_kv, P, Dv]: present_value = Concat(past_value, V, axis=2)"),
        "nonpad_kv_seqlen": refused(
            "refused: an external cache with padding; append the cache with past_key / past_value or mask "
            "the padding with attn_mask"
        ),
    },
    {
        "Y": imported("[B, H, S, Dv] or [B, S, H * Dv], as Q"),
        "present_key": imported("[B, H_kv, P + S_kv, D]"),
        "present_value": imported("[B, H_kv, P + S_kv, Dv]"),
        "qk_matmul_output": refused("refused when read: the import gives Y and the presents only"),
    },
)
contrib_op("", "Attention", SPEC)(None)


def _refuse(node: onnx.NodeProto, what: str, code: str = "ERR_OP_NOT_SUPPORTED") -> NPUError:
    return NPUError(code, f"Attention node {node.name or node.output[0]!r} (ai.onnx domain): {what}")


def _known(node, value, what: str) -> int:
    if value is None:
        raise _refuse(node, f"the {what} is not static; give the model's inputs fixed shapes")
    return int(value)


def _static(node, dims, axis: int, what: str) -> int:
    return _known(node, dims[axis] if dims is not None and len(dims) > abs(axis) else None, what)


def _geometry(node: onnx.NodeProto, attrs: dict, types: dict) -> dict:
    """Rank, heads, head sizes of one node, checked as ONNX defines them."""
    names = list(node.input) + [""] * (7 - len(node.input))
    for i, what in ((0, "Q"), (1, "K"), (2, "V"), (4, "past_key"), (5, "past_value")):
        if names[i] and types.get(names[i], (0, None))[0] not in (TensorProto.FLOAT, 0):
            raise _refuse(node, f"{what} is not float32; tvm_npu imports this op in float32 (export in fp32)")
    dims = {i: types.get(names[i], (0, None))[1] for i in range(3)}
    rank = len(dims[0]) if dims[0] is not None else None
    if rank not in (3, 4) or any(d is None or len(d) != rank for d in dims.values()):
        raise _refuse(node, "Q, K and V must all be 3-D or all 4-D with known ranks", "ERR_INVALID_MODEL")
    if bool(names[4]) != bool(names[5]):
        raise _refuse(node, "past_key and past_value go together: give both or neither", "ERR_INVALID_MODEL")
    if rank == 3:
        h, h_kv = int(attrs.get("q_num_heads", 0)), int(attrs.get("kv_num_heads", 0))
        if h <= 0 or h_kv <= 0:
            raise _refuse(node, "3-D inputs need q_num_heads and kv_num_heads", "ERR_INVALID_MODEL")
        widths = [dims[i][2] for i in range(3)]
        for width, n, what in zip(widths, (h, h_kv, h_kv), "QKV"):
            if width is not None and width % n:
                raise _refuse(node, f"{what}'s width {width} does not split into {n} heads", "ERR_INVALID_MODEL")
        d = widths[0] // h if widths[0] is not None else None
        dv = widths[2] // h_kv if widths[2] is not None else None
    else:
        h = _static(node, dims[0], 1, "query's head count")
        h_kv = _static(node, dims[1], 1, "key's head count")
        d, dv = dims[0][3], dims[2][3]
    if names[5] and dv is None:
        dv = (types.get(names[5], (0, None))[1] or [None] * 4)[3]
    if h % h_kv:
        raise _refuse(node, f"{h} query heads are no multiple of {h_kv} key / value heads", "ERR_INVALID_MODEL")
    return dict(names=names, rank=rank, h=h, h_kv=h_kv, d=d, dv=dv, dims=dims)


def _causal(w: Writer, node, geo: dict, types: dict) -> str:
    """[S, T] bias: 0 where key t <= s + P (P the past length, 0 without a past), -inf above."""
    q, k, past = geo["dims"][0], geo["dims"][1], geo["names"][4]
    seq_axis = 2 if geo["rank"] == 4 else 1
    why = "length of is_causal=1 (a decoder-with-past: give attn_mask the causal-and-padding mask instead)"
    S = _static(node, q, seq_axis, f"query's {why}")
    P = _static(node, types.get(past, (0, None))[1], 2, f"past's {why}") if past else 0
    T = P + _static(node, k, seq_axis, f"key's {why}")
    seen = np.arange(T)[None, :] <= np.arange(S)[:, None] + P
    return w.const(np.where(seen, 0.0, -np.inf), np.float32)


def _mask(w: Writer, node, geo: dict, types: dict) -> str:
    """The additive bias of attn_mask (a boolean one as 0 / -inf)."""
    name = geo["names"][3]
    elem, dims = types.get(name, (0, None))
    k, past, seq_axis = geo["dims"][1], geo["names"][4], 2 if geo["rank"] == 4 else 1
    P = (types.get(past, (0, None))[1] or [None] * 4)[2] if past else 0
    S_kv = k[seq_axis] if k is not None else None
    last = dims[-1] if dims else None
    if last is not None and P is not None and S_kv is not None and last != P + S_kv:
        what = f"attn_mask covers {last} keys of {P + S_kv}; give it the total length"
        raise _refuse(node, what, "ERR_INVALID_MODEL")
    if elem == TensorProto.BOOL:
        return w.op("Where", name, w.const(0.0, np.float32), w.const(-np.inf, np.float32))
    if elem != TensorProto.FLOAT:
        raise _refuse(node, "attn_mask is neither boolean nor float32")
    return name


def _expand_node(node: onnx.NodeProto, types: dict) -> Writer:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    geo = _geometry(node, attrs, types)
    names, h, h_kv = geo["names"], geo["h"], geo["h_kv"]
    outs = list(node.output) + [""] * (3 - len(node.output))
    w = Writer(node)
    q, k, v = names[:3]
    if geo["rank"] == 3:
        q, k, v = w.heads(q, h), w.heads(k, h_kv), w.heads(v, h_kv)
    if names[4]:
        keys = w.op("Concat", names[4], k, out=outs[1] or None, axis=2)
        values = w.op("Concat", names[5], v, out=outs[2] or None, axis=2)
    else:
        keys, values = k, v
        for out, x in ((outs[1], k), (outs[2], v)):
            if out:
                w.op("Identity", x, out=out)
    if h != h_kv:
        g = h // h_kv
        d, dv = _known(node, geo["d"], "head size"), _known(node, geo["dv"], "value head size")
        keys, values = w.repeat(keys, g, h, d), w.repeat(values, g, h, dv)
    scale = attrs.get("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(_known(node, geo["d"], "head size"))
    scores = w.op("MatMul", q, w.op("Transpose", keys, perm=[0, 1, 3, 2]))
    scores = w.op("Mul", scores, w.const(scale, np.float32))
    cap = float(attrs.get("softcap", 0.0))
    if cap > 0:
        c = w.const(cap, np.float32)
        scores = w.op("Mul", w.op("Tanh", w.op("Div", scores, c)), c)
    bias = [_mask(w, node, geo, types)] if names[3] else []
    if int(attrs.get("is_causal", 0)):
        bias.append(_causal(w, node, geo, types))
    if bias:
        scores = w.op("Add", scores, bias[0] if len(bias) == 1 else w.op("Add", *bias))
    probs = w.op("Softmax", scores, axis=-1)
    if bias:  # a query that sees no key: exp sums to 0, NaN; ONNX (and onnxruntime) give a zero row
        probs = w.op("Where", w.op("IsNaN", probs), w.const(0.0, np.float32), probs)
    if geo["rank"] == 3:
        w.merge(w.op("MatMul", probs, values), out=outs[0])
    else:
        w.op("MatMul", probs, values, out=outs[0])
    return w


def expand(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every ai.onnx Attention node replaced by the standard ops of the module docstring (a
    copy; `model` itself when it has none); NPUError naming the node and what to change for a refused form."""
    return expand_nodes(model, "Attention", SPEC, _expand_node)
