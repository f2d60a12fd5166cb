"""GroupQueryAttention (com.microsoft), as onnxruntime's CPU kernel computes it, for float32 tensors.

Inputs: query [B, S, H * D] (or packed Q, K, V [B, S, (H + 2 H_kv) D] with key and value absent), key
and value [B, S, H_kv * D], past_key / past_value [B, H_kv, P, D], seqlens_k int32 [B] (each sequence's
total length - 1), total_sequence_length (a constant here), cos_cache / sin_cache [positions, R / 2].
For batch row b the new tokens sit at positions p_b + s with p_b = seqlens_k[b] + 1 - S:

- with `do_rotary`, Q and K rotate by the table rows at those positions (the first R of D features;
  halves, or interleaved pairs with `rotary_interleaved`);
- present_key / present_value [B, H_kv, max(P, total_sequence_length), D]: the past's rows below p_b,
  the S new rows at p_b.., zeros after them (onnxruntime's kernel writes the same);
- each query head h attends with KV head h // (H / H_kv) to the present rows t <= p_b + s (and, with
  `local_window_size` w > 0, t > p_b + s - w), scores times `scale` (0: 1 / sqrt(D)), with `softcap`
  c > 0 first c * tanh(scores / c); output [B, S, H * D].

Batch rows whose first prompt is padded (seqlens_k + 1 < S with no past) are not given onnxruntime's
meaning here (it special-cases them); the step model of an onnxruntime-genai folder (frontend/genai.py)
does not use this converter: it rewrites the op over the static cache before the import.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir.prim.expr import IntImm
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ...ir.values import constant_value
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import require_float32, shape_of, where
from .registry import MS_DOMAIN, contrib_op

MASKED = -1e9  # a hidden score: exp underflows to 0 in float32, as -inf would, without inf arithmetic
_UNSUPPORTED = "refused: not in the onnxruntime-genai builder's graphs; export without it"

SPEC = OnnxOp(
    ("relax.matmul", "relax.nn.softmax", "relax.take", "relax.gather_elements", "relax.where"),
    {
        "num_heads": imported("H, the query heads"),
        "kv_num_heads": imported("H_kv, the key / value heads (H a multiple of it)"),
        "scale": imported("the scores' factor; 0 (default): 1 / sqrt(head size)"),
        "local_window_size": refused(
            "-1 (no window) or a window w > 0 of the w rows ending at each query", lambda v: v == 0 or v < -1
        ),
        "softcap": refused("0 (none) or c > 0: c * tanh(scores / c)", lambda v: v < 0),
        "do_rotary": imported("1: rotate Q and K by cos_cache / sin_cache at each token's position"),
        "rotary_interleaved": imported("1: rotate interleaved pairs; 0: halves"),
        "smooth_softmax": refused(_UNSUPPORTED, lambda v: v != 0),
        "qk_output": refused(_UNSUPPORTED, lambda v: v != 0),
        "causal": refused("1 (the default) only: the import's mask is causal", lambda v: v != 1),
        "qk_norm_epsilon": imported("no effect: q_norm_weight / k_norm_weight are refused"),
        "q_norm_epsilon": imported("no effect: q_norm_weight is refused"),
        "k_norm_epsilon": imported("no effect: k_norm_weight is refused"),
        "kv_cache_bit_width": refused("refused: a quantized KV cache; export a float32 one", lambda v: v != 0),
        "sliding_window_cache": refused(
            "0 (the default) only: the import's past holds the whole sequence", lambda v: v != 0
        ),
        "k_quant_type": refused("NONE only: a quantized KV cache", lambda v: _text(v) != "NONE"),
        "v_quant_type": refused("NONE only: a quantized KV cache", lambda v: _text(v) != "NONE"),
    },
    {
        "query": imported("[B, S, H * D] or packed [B, S, (H + 2 H_kv) * D]"),
        "key": imported("[B, S, H_kv * D]; absent: packed in query"),
        "value": imported("[B, S, H_kv * D]; absent: packed in query"),
        "past_key": imported("[B, H_kv, P, D]"),
        "past_value": imported("[B, H_kv, P, D]"),
        "seqlens_k": imported("int32 [B]: total length - 1 per sequence"),
        "total_sequence_length": imported(
            "int32, a constant (the present's length is max(P, it)); a past of run-time length must have at "
            "most that many rows"
        ),
        "cos_cache": imported("[positions, R / 2], with do_rotary"),
        "sin_cache": imported("[positions, R / 2], with do_rotary"),
        "position_ids": refused(_UNSUPPORTED),
        "attention_bias": refused(_UNSUPPORTED),
        "head_sink": refused(_UNSUPPORTED),
        "k_scale": refused(_UNSUPPORTED),
        "v_scale": refused(_UNSUPPORTED),
        "q_norm_weight": refused(_UNSUPPORTED),
        "k_norm_weight": refused(_UNSUPPORTED),
        "query_seqlens": refused(_UNSUPPORTED),
    },
    {
        "output": imported("[B, S, H * D]"),
        "present_key": imported("[B, H_kv, max(P, total), D]"),
        "present_value": imported("[B, H_kv, max(P, total), D]"),
        "output_qk": refused(_UNSUPPORTED),
    },
)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _slice(x, axis: int, begin: int, end: int):
    return relax.op.strided_slice(x, axes=[axis], begin=[begin], end=[end])


def _rotate(x, cos, sin, shape: list[int], rot: int, interleaved: bool):
    """RoPE of x [B, n, S, D] (`shape`) on its first `rot` features; cos / sin [B, 1, S, rot / 2]."""
    half, dim, shape = rot // 2, shape[3], shape[:3]
    part = _slice(x, 3, 0, rot) if rot < dim else x
    if interleaved:
        pairs = relax.op.reshape(part, [*shape, half, 2])
        x1, x2 = (relax.op.squeeze(_slice(pairs, 4, k, k + 1), [4]) for k in (0, 1))
    else:
        x1, x2 = _slice(part, 3, 0, half), _slice(part, 3, half, rot)
    r1 = relax.op.subtract(relax.op.multiply(x1, cos), relax.op.multiply(x2, sin))
    r2 = relax.op.add(relax.op.multiply(x2, cos), relax.op.multiply(x1, sin))
    if interleaved:
        out = relax.op.reshape(relax.op.stack([r1, r2], axis=4), [*shape, rot])
    else:
        out = relax.op.concat([r1, r2], axis=3)
    return relax.op.concat([out, _slice(x, 3, rot, dim)], axis=3) if rot < dim else out


def _past_rows(past, place: str) -> int | None:
    """P of the past [B, H_kv, P, D] (0 without one; None when only P is not static, as for an empty
    past, whose 0 TVM's importer reads as a symbolic dim)."""
    if past is None:
        return 0
    shape = getattr(past.ty, "shape", None)
    dims = list(shape.values) if shape is not None and hasattr(shape, "values") else []
    if len(dims) == 4 and all(isinstance(d, IntImm) for i, d in enumerate(dims) if i != 2):
        return int(dims[2]) if isinstance(dims[2], IntImm) else None
    return shape_of(past, "past_key", place)[2]


def _fit(past, B: int, H_kv: int, T: int, D: int):
    """A past of run-time length P <= T as its first T rows, zeros after P (the rows the present keeps
    are below p_b = total - S < T anyway)."""
    padded = relax.op.concat([past, relax.const(np.zeros((B, H_kv, T, D), np.float32))], axis=2)
    return relax.op.strided_slice(padded, axes=[2], begin=[0], end=[T], assume_inbound=True)  # T rows, static


def _heads(x, B: int, S: int, n: int, D: int):
    return relax.op.permute_dims(relax.op.reshape(x, [B, S, n, D]), [0, 2, 1, 3])


def _present(bb, past, new, start, B: int, H_kv: int, P: int, S: int, T: int, D: int):
    """[B, H_kv, T, D]: past rows below start[b], new rows start[b]..start[b] + S - 1, zeros after."""
    if past is None or P == 0:
        past = relax.const(np.zeros((B, H_kv, T, D), np.float32))
    elif T > P:
        past = relax.op.concat([past, relax.const(np.zeros((B, H_kv, T - P, D), np.float32))], axis=2)
    rel = relax.op.subtract(relax.const(np.arange(T)[None, :], "int64"), start)  # [B, T]
    idx = relax.op.clip(rel, 0, S - 1)
    idx = relax.op.broadcast_to(relax.op.reshape(idx, [B, 1, T, 1]), [B, H_kv, T, D])
    rows = relax.op.gather_elements(new, idx, axis=2)
    written = relax.op.logical_and(
        relax.op.greater_equal(rel, relax.const(0, "int64")), relax.op.less(rel, relax.const(S, "int64"))
    )
    before = relax.op.reshape(relax.op.less(rel, relax.const(0, "int64")), [B, 1, T, 1])
    kept = relax.op.where(before, past, relax.const(0.0, "float32"))
    return bb.normalize(relax.op.where(relax.op.reshape(written, [B, 1, T, 1]), rows, kept))


@contrib_op(MS_DOMAIN, "GroupQueryAttention", SPEC)
class GroupQueryAttention(onnx_frontend.OnnxOpConverter):
    """Grouped-query attention with its own KV append and RoPE (see the module docstring)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where("GroupQueryAttention", attr)
        inputs = list(inputs) + [None] * (9 - len(inputs))
        q, k, v, past_k, past_v, seqlens, total, cos, sin = inputs[:9]
        H, H_kv = int(attr.get("num_heads", 0)), int(attr.get("kv_num_heads", 0))
        if H <= 0 or H_kv <= 0 or H % H_kv:
            raise NPUError(
                "ERR_INVALID_MODEL", f"{place}: num_heads {H} must be a positive multiple of kv_num_heads {H_kv}"
            )
        for name, t in (("query", q), ("key", k), ("value", v), ("past_key", past_k), ("past_value", past_v)):
            if t is not None:
                require_float32(t, name, place)
        B, S, width = shape_of(q, "query", place)
        D = width // (H + 2 * H_kv) if k is None else width // H
        P = _past_rows(past_k, place)
        count = constant_value(total) if total is not None else None
        if count is None or count.size != 1 or seqlens is None:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{place}: input total_sequence_length is not a constant (or seqlens_k is absent); give the "
                "model's inputs fixed shapes so that it folds, the present's length depends on it",
            )
        T = max(P or 0, int(count.reshape(-1)[0]))
        if P is None:  # a past of run-time length (TVM reads a 0 dim so): at most total rows, fitted to them
            past_k, past_v = (_fit(x, B, H_kv, T, D) for x in (past_k, past_v))
            P = T
        if k is None:
            k, v = _slice(q, 2, H * D, (H + H_kv) * D), _slice(q, 2, (H + H_kv) * D, width)
            q = _slice(q, 2, 0, H * D)
        q, k, v = _heads(q, B, S, H, D), _heads(k, B, S, H_kv, D), _heads(v, B, S, H_kv, D)
        start = relax.op.subtract(
            relax.op.reshape(relax.op.astype(seqlens, "int64"), [B, 1]), relax.const(S - 1, "int64")
        )  # [B, 1]: p_b
        pos = bb.normalize(relax.op.add(start, relax.const(np.arange(S)[None, :], "int64")))  # [B, S]
        if int(attr.get("do_rotary", 0)):
            if cos is None or sin is None:
                raise NPUError("ERR_INVALID_MODEL", f"{place}: do_rotary=1 without cos_cache and sin_cache")
            rot = 2 * shape_of(cos, "cos_cache", place)[1]
            if rot > D:
                raise NPUError("ERR_INVALID_MODEL", f"{place}: cos_cache rotates {rot} features of a {D}-wide head")
            cs, sn = (relax.op.reshape(relax.op.take(t, pos, axis=0), [B, 1, S, rot // 2]) for t in (cos, sin))
            interleaved = bool(attr.get("rotary_interleaved", 0))
            q = bb.normalize(_rotate(q, cs, sn, [B, H, S, D], rot, interleaved))
            k = bb.normalize(_rotate(k, cs, sn, [B, H_kv, S, D], rot, interleaved))
        keys = _present(bb, past_k, k, start, B, H_kv, P, S, T, D)
        values = _present(bb, past_v, v, start, B, H_kv, P, S, T, D)
        rk, rv = (relax.op.repeat(x, H // H_kv, axis=1) if H_kv < H else x for x in (keys, values))
        scale = float(attr.get("scale", 0.0)) or 1.0 / float(np.sqrt(D))
        scores = relax.op.multiply(relax.op.matmul(q, relax.op.permute_dims(rk, [0, 1, 3, 2])), relax.const(scale))
        cap = float(attr.get("softcap", 0.0))
        if cap > 0:
            c = relax.const(cap, "float32")
            scores = relax.op.multiply(relax.op.tanh(relax.op.divide(scores, c)), c)
        rows = relax.const(np.arange(T)[None, None, None, :], "int64")
        at = relax.op.reshape(pos, [B, 1, S, 1])
        hidden = relax.op.less(at, rows)
        window = int(attr.get("local_window_size", -1))
        if window > 0:
            start_row = relax.op.subtract(at, relax.const(window - 1, "int64"))
            hidden = relax.op.logical_or(hidden, relax.op.less(rows, start_row))
        scores = relax.op.where(hidden, relax.const(MASKED, "float32"), scores)
        ctx = relax.op.matmul(relax.op.nn.softmax(scores, axis=-1), rv)  # [B, H, S, D]
        out = relax.op.reshape(relax.op.permute_dims(ctx, [0, 2, 1, 3]), [B, S, H * D])
        return relax.Tuple([bb.normalize(out), keys, values])
