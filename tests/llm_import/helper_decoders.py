"""Decoder-with-past ONNX models written op by op with `onnx.helper`, as users who do not go through
torch write them: optimum's I/O names (`input_ids`, `attention_mask`, `position_ids`,
`past_key_values.{i}.key/value` -> `logits`, `present.{i}.key/value`), batch / sequence / past symbolic,
`logits` declared [1, "sequence_length", vocab]. Numpy seeded random weights.

Two layouts: "gpt2" (LayerNorm, learned positions, Gelu MLP, multi-head attention) and "llama" (RMSNorm
written out as Pow / ReduceMean / Sqrt / Div, RoPE from position_ids, grouped-query attention repeated
as Unsqueeze -> Expand -> Reshape, SwiGLU MLP). The mask is causal AND attention_mask, built from the
shapes (Shape -> Range -> LessOrEqual), additive with float32's minimum.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = dict(layers=2, d_model=64, heads=4, kv_heads=2, vocab=256, positions=128, window=None, einsum=False)
SIZES["attention_op"] = False


class _Builder:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self.k = rng, [], [], 0

    def const(self, value, dtype=None, name=None):
        self.k += 1
        name = name or f"c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def weight(self, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type, *inputs, outputs=None, **attrs):
        self.k += 1
        out = outputs or [f"t{self.k}"]
        self.nodes.append(helper.make_node(op_type, list(inputs), out, name=f"{op_type}_{self.k}", **attrs))
        return out[0] if len(out) == 1 else out


def _mask(b: _Builder) -> str:
    """[B, 1, S, T] additive mask: 0 where row t is seen by query s (t <= T - S + s and
    attention_mask[t] == 1), float32 min elsewhere."""
    i64 = np.int64
    s = b.op("Gather", b.op("Shape", "input_ids"), b.const(1, i64), axis=0)
    t = b.op("Gather", b.op("Shape", "attention_mask"), b.const(1, i64), axis=0)
    rows = b.op("Unsqueeze", b.op("Range", b.op("Sub", t, s), t, b.const(1, i64)), b.const([1], i64))  # [S, 1]
    cols = b.op("Range", b.const(0, i64), t, b.const(1, i64))  # [T]
    causal = b.op("LessOrEqual", cols, rows)  # [S, T]
    pad = b.op("Cast", b.op("Unsqueeze", "attention_mask", b.const([1, 2], i64)), to=TensorProto.BOOL)
    keep = b.op("And", causal, pad)  # [B, 1, S, T]
    hidden = np.finfo(np.float32).min
    return b.op("Where", keep, b.const(0.0, np.float32), b.const(hidden, np.float32))


def _heads(b: _Builder, x: str, heads: int, dim: int) -> str:
    """[B, S, heads * dim] -> [B, heads, S, dim]."""
    return b.op("Transpose", b.op("Reshape", x, b.const([0, 0, heads, dim], np.int64)), perm=[0, 2, 1, 3])


def _append(b: _Builder, past: str, new: str, present: str, window: int | None) -> str:
    """Concat(past, new, axis=2) returned as `present`; with a `window`, inside the crop Slices of
    transformers' sliding-window DynamicCache: the past's last window - 1 rows, the result's last window."""
    if window is None:
        return b.op("Concat", past, new, outputs=[present], axis=2)
    i64, big = np.int64, np.iinfo(np.int64).max
    crop = b.op("Slice", past, b.const([1 - window], i64), b.const([big], i64), b.const([2], i64))
    out = b.op("Concat", crop, new, axis=2)
    b.op("Slice", out, b.const([-window], i64), b.const([big], i64), b.const([2], i64), outputs=[present])
    return out


def _attention(b: _Builder, i: int, q: str, k: str, v: str, mask: str, cfg: dict) -> str:
    """q [B, H, S, D], the new k / v [B, H_kv, S, D]: the cache append, repeat_kv, softmax(q k^T / sqrt(D)
    + mask) v, heads merged to [B, S, H * D]."""
    heads, kv_heads, dim = cfg["heads"], cfg["kv_heads"], cfg["d_model"] // cfg["heads"]
    keys, values = (_append(b, f"past_key_values.{i}.{n}", x, f"present.{i}.{n}", cfg["window"])
                    for n, x in (("key", k), ("value", v)))  # fmt: skip
    if kv_heads != heads:  # repeat_kv: [B, H_kv, T, D] -> [B, H_kv, g, T, D] -> [B, H, T, D]
        g = heads // kv_heads
        keys, values = (
            b.op(
                "Reshape",
                b.op("Expand", b.op("Unsqueeze", x, b.const([2], np.int64)), b.const([1, 1, g, 1, 1], np.int64)),
                b.const([0, heads, -1, dim], np.int64),
            )
            for x in (keys, values)
        )
    if cfg["einsum"]:  # Q x K^T as a MatMul with a transposed operand, written as Einsum
        scores = b.op("Einsum", q, keys, equation="bhqd,bhkd->bhqk")
    else:
        scores = b.op("MatMul", q, b.op("Transpose", keys, perm=[0, 1, 3, 2]))
    scores = b.op("Mul", scores, b.const(1.0 / np.sqrt(dim), np.float32))
    probs = b.op("Softmax", b.op("Add", scores, mask), axis=-1)
    pv = b.op("Einsum", probs, values, equation="bhqk,bhkd->bhqd") if cfg["einsum"] else b.op("MatMul", probs, values)
    out = b.op("Transpose", pv, perm=[0, 2, 1, 3])
    return b.op("Reshape", out, b.const([0, 0, heads * dim], np.int64))


def _attention_op(b: _Builder, i: int, q: str, k: str, v: str, mask: str, cfg: dict) -> str:
    """ONNX's Attention (opset 23) with the cache append inside it: past_key / past_value in,
    present_key / present_value out as present.{i}.*, the additive mask as attn_mask, its own
    grouped-query heads. 3-D q / k / v [B, S, n * D] (GPT-2's layout here) give Y [B, S, H * D]; 4-D
    (Llama's, after RoPE) give [B, H, S, D], merged to [B, S, H * D]."""
    heads, kv_heads, dim = cfg["heads"], cfg["kv_heads"], cfg["d_model"] // cfg["heads"]
    pasts = [f"past_key_values.{i}.{n}" for n in ("key", "value")]
    outs = [f"attn{i}/y", f"present.{i}.key", f"present.{i}.value"]
    heads_attrs = dict(q_num_heads=heads, kv_num_heads=kv_heads) if cfg["arch"] == "gpt2" else {}
    y = b.op("Attention", q, k, v, mask, *pasts, outputs=outs, **heads_attrs)[0]
    if cfg["arch"] == "gpt2":
        return y
    return b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.const([0, 0, heads * dim], np.int64))


def _layernorm(b: _Builder, x: str, d: int) -> str:
    scale = b.const(1.0 + 0.1 * b.rng.standard_normal(d).astype(np.float32))
    return b.op("LayerNormalization", x, scale, b.weight(d, scale=0.1), axis=-1, epsilon=1e-5)


def _rmsnorm(b: _Builder, x: str, d: int) -> str:
    """x / sqrt(mean(x^2) + eps) * w, written out as Llama's exports do."""
    ms = b.op("ReduceMean", b.op("Pow", x, b.const(2.0, np.float32)), b.const([-1], np.int64), keepdims=1)
    norm = b.op("Div", x, b.op("Sqrt", b.op("Add", ms, b.const(1e-6, np.float32))))
    return b.op("Mul", norm, b.const(1.0 + 0.1 * b.rng.standard_normal(d).astype(np.float32)))


def _rope_tables(b: _Builder, dim: int) -> tuple[str, str]:
    """cos, sin [B, 1, S, D] of position_ids (rotate-half layout, base 10000)."""
    inv = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    pos = b.op("Unsqueeze", b.op("Cast", "position_ids", to=TensorProto.FLOAT), b.const([2], np.int64))
    freqs = b.op("Mul", pos, b.const(inv.reshape(1, 1, -1)))  # [B, S, D/2]
    emb = b.op("Unsqueeze", b.op("Concat", freqs, freqs, axis=-1), b.const([1], np.int64))
    return b.op("Cos", emb), b.op("Sin", emb)


def _rope(b: _Builder, x: str, cos: str, sin: str, dim: int) -> str:
    half = b.const([dim // 2, dim // 2], np.int64)
    x1, x2 = b.op("Split", x, half, axis=-1, outputs=[f"{x}/x1", f"{x}/x2"])
    rotated = b.op("Concat", b.op("Neg", x2), x1, axis=-1)
    return b.op("Add", b.op("Mul", x, cos), b.op("Mul", rotated, sin))


def _gpt2_layer(b: _Builder, i: int, x: str, mask: str, cfg: dict) -> str:
    d, heads = cfg["d_model"], cfg["heads"]
    h = _layernorm(b, x, d)
    if cfg["attention_op"]:  # the 3-D form: the op splits the heads
        q, k, v = (b.op("MatMul", h, b.weight(d, d)) for _ in range(3))
        x = b.op("Add", x, b.op("MatMul", _attention_op(b, i, q, k, v, mask, cfg), b.weight(d, d)))
    else:
        q, k, v = (_heads(b, b.op("MatMul", h, b.weight(d, d)), heads, d // heads) for _ in range(3))
        x = b.op("Add", x, b.op("MatMul", _attention(b, i, q, k, v, mask, cfg), b.weight(d, d)))
    h = b.op("Add", b.op("MatMul", _layernorm(b, x, d), b.weight(d, 4 * d)), b.weight(4 * d, scale=0.1))
    gelu = b.op("Mul", b.op("Mul", h, b.const(0.5, np.float32)),
                b.op("Add", b.op("Erf", b.op("Div", h, b.const(np.sqrt(2.0), np.float32))),
                     b.const(1.0, np.float32)))  # fmt: skip
    return b.op("Add", x, b.op("MatMul", gelu, b.weight(4 * d, d)))


def _llama_layer(b: _Builder, i: int, x: str, mask: str, rope: tuple, cfg: dict) -> str:
    d, heads, kv_heads = cfg["d_model"], cfg["heads"], cfg["kv_heads"]
    dim = d // heads
    h = _rmsnorm(b, x, d)
    q = _rope(b, _heads(b, b.op("MatMul", h, b.weight(d, d)), heads, dim), *rope, dim)
    k = _rope(b, _heads(b, b.op("MatMul", h, b.weight(d, kv_heads * dim)), kv_heads, dim), *rope, dim)
    v = _heads(b, b.op("MatMul", h, b.weight(d, kv_heads * dim)), kv_heads, dim)
    attention = _attention_op if cfg["attention_op"] else _attention
    x = b.op("Add", x, b.op("MatMul", attention(b, i, q, k, v, mask, cfg), b.weight(d, d)))
    h = _rmsnorm(b, x, d)
    gate, up = b.op("MatMul", h, b.weight(d, 2 * d)), b.op("MatMul", h, b.weight(d, 2 * d))
    act = b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", gate)), up)
    return b.op("Add", x, b.op("MatMul", act, b.weight(2 * d, d)))


def build(arch: str, seed: int = 0, **sizes) -> onnx.ModelProto:
    """The `arch` ("gpt2" or "llama") decoder-with-past; `sizes` override SIZES (GPT-2 uses heads KV
    heads; `window` an int: the cache append inside sliding-window crop Slices, the mask still causal;
    `einsum` True: attention's Q x K^T and P x V as Einsum; `attention_op` True: each layer's attention
    and its cache append as one ONNX Attention node, opset 23)."""
    cfg = {**SIZES, **sizes, "arch": arch}
    if arch == "gpt2":
        cfg["kv_heads"] = cfg["heads"]
    b = _Builder(np.random.default_rng(seed))
    d, dim, L = cfg["d_model"], cfg["d_model"] // cfg["heads"], cfg["layers"]
    x = b.op("Gather", b.weight(cfg["vocab"], d, scale=1.0), "input_ids", axis=0)
    mask = _mask(b)
    if arch == "gpt2":
        x = b.op("Add", x, b.op("Gather", b.weight(cfg["positions"], d, scale=0.3), "position_ids", axis=0))
        for i in range(L):
            x = _gpt2_layer(b, i, x, mask, cfg)
        x = _layernorm(b, x, d)
    elif arch == "llama":
        rope = _rope_tables(b, dim)
        for i in range(L):
            x = _llama_layer(b, i, x, mask, rope, cfg)
        x = _rmsnorm(b, x, d)
    else:
        raise ValueError(arch)
    b.op("MatMul", x, b.weight(d, cfg["vocab"]), outputs=["logits"])
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch_size", s])
            for n, s in (("input_ids", "sequence_length"), ("attention_mask", "total_sequence_length"),
                         ("position_ids", "sequence_length"))]  # fmt: skip
    kv = [(i, n) for i in range(L) for n in ("key", "value")]
    past = [helper.make_tensor_value_info(f"past_key_values.{i}.{n}", TensorProto.FLOAT,
                                          ["batch_size", cfg["kv_heads"], "past_sequence_length", dim])
            for i, n in kv]  # fmt: skip
    present = [helper.make_tensor_value_info(f"present.{i}.{n}", TensorProto.FLOAT,
                                             ["batch_size", cfg["kv_heads"], "total_sequence_length", dim])
               for i, n in kv]  # fmt: skip
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "sequence_length", cfg["vocab"]])
    graph = helper.make_graph(b.nodes, f"{arch}_with_past", ints + past, [logits, *present], b.inits)
    opset = 23 if cfg["attention_op"] else 18  # ONNX's Attention is opset 23's
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if cfg["attention_op"] else 8
    onnx.checker.check_model(model)
    return model


def save(arch: str, path: str, seed: int = 0, **sizes) -> str:
    onnx.save(build(arch, seed, **sizes), path)
    return path
