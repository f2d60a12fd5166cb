"""Decoder step models (docs/llm.md, "The step model") built in ONNX with seeded random weights.

One call of a step model runs S tokens starting at the absolute position `position` against a static
KV cache of T = max_context rows per layer, and returns the logits and the cache with rows
[position, position + S) replaced:

    inputs   input_ids int64 [1, S], position int64 [1], cache.{i}.key / cache.{i}.value float32 [1, H_kv, T, D]
    outputs  logits float32 [1, S, vocab], cache_out.{i}.key / cache_out.{i}.value (the cache's shapes)

The weights depend on the seed and the shapes only, never on S: `gpt2_step(seq_len=8)` and
`gpt2_step(seq_len=1)` with the same other arguments are the prefill and decode instances of one model.
The cache is written with ScatterND (indices (0, head, position) per row) and the causal mask is built
from the positions with Less + Where, two forms TVM 0.27's ONNX importer reads as onnxruntime runs them.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEP_KEY = "tvm_npu.step"  # the metadata entry that describes a step model (docs/llm.md)
MASKED = -1e9  # a masked score: exp underflows to 0 in float32, as -inf would, without inf arithmetic


class _Step:
    """The graph of one step model under construction: nodes, initializers, fresh names, seeded weights."""

    def __init__(self, seed: int, seq_len: int, max_context: int, kv_heads: int, head_dim: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.S, self.T, self.H_kv, self.D = seq_len, max_context, kv_heads, head_dim

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def const(self, value, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, np.int64), "shape")

    def weight(self, shape, scale: float | None = None, prefix: str = "w") -> str:
        """A seeded normal weight; `scale` defaults to 1 / sqrt(fan-in), which keeps activations O(1)."""
        scale = 1.0 / np.sqrt(shape[0]) if scale is None else scale
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), prefix)

    def gain(self, width: int) -> str:
        return self.const((1.0 + 0.1 * self.rng.standard_normal(width)).astype(np.float32), "gamma")

    def bias(self, width: int) -> str:
        return self.const((0.1 * self.rng.standard_normal(width)).astype(np.float32), "beta")

    def op(self, op: str, inputs: list, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def positions(self) -> str:
        """int64 [S]: position + s, the absolute position of each token."""
        return self.op("Add", ["position", self.const(np.arange(self.S, dtype=np.int64), "steps")])

    def causal_mask(self, pos: str) -> str:
        """float32 [S, T]: 0 where cache row t <= the token's position, MASKED after it."""
        rows = self.op("Unsqueeze", [pos, self.ints(1)])  # [S, 1]
        later = self.op("Less", [rows, self.const(np.arange(self.T, dtype=np.int64)[None, :], "rows")])
        return self.op("Where", [later, self.const(np.float32(MASKED)), self.const(np.float32(0.0))])

    def heads(self, x: str, n: int) -> str:
        """[1, S, n * D] -> [1, n, S, D]."""
        return self.op("Transpose", [self.op("Reshape", [x, self.ints(1, self.S, n, self.D)])], perm=[0, 2, 1, 3])

    def scatter_indices(self, pos: str) -> str:
        """int64 [1, H_kv, S, 3]: the (0, head, position) of each row this step writes."""
        shape = (1, self.H_kv, self.S, 1)
        zero = np.zeros(shape, np.int64)
        head = np.broadcast_to(np.arange(self.H_kv, dtype=np.int64)[None, :, None, None], shape).copy()
        rows = self.op("Expand", [self.op("Reshape", [pos, self.ints(1, 1, self.S, 1)]), self.ints(*shape)])
        return self.op("Concat", [self.const(zero, "zero"), self.const(head, "head"), rows], axis=3)

    def attention(self, i: int, q: str, k: str, v: str, mask: str, idx: str, heads: int) -> str:
        """Write k, v [1, H_kv, S, D] into layer i's cache, attend q [1, heads, S, D] to it: [1, S, heads * D]."""
        keys = self.op("ScatterND", [f"cache.{i}.key", idx, k])
        values = self.op("ScatterND", [f"cache.{i}.value", idx, v])
        self.nodes += [
            helper.make_node("Identity", [keys], [f"cache_out.{i}.key"]),
            helper.make_node("Identity", [values], [f"cache_out.{i}.value"]),
        ]
        group = heads // self.H_kv
        if group > 1:  # repeat_kv as torch exports it: Unsqueeze -> Expand -> Reshape
            full = (1, self.H_kv, group, self.T, self.D)
            keys, values = (
                self.op(
                    "Reshape",
                    [
                        self.op("Expand", [self.op("Unsqueeze", [x, self.ints(2)]), self.ints(*full)]),
                        self.ints(1, heads, self.T, self.D),
                    ],
                )
                for x in (keys, values)
            )
        scores = self.op("MatMul", [q, self.op("Transpose", [keys], perm=[0, 1, 3, 2])])
        scores = self.op("Add", [self.op("Div", [scores, self.const(np.float32(np.sqrt(self.D)))]), mask])
        ctx = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), values])  # [1, heads, S, D]
        merged = self.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        return self.op("Reshape", [merged, self.ints(1, self.S, heads * self.D)])

    def model(self, name: str, layers: int, vocab: int, logits: str, opset: int) -> onnx.ModelProto:
        f32 = TensorProto.FLOAT
        cache = [1, self.H_kv, self.T, self.D]
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, self.S]),
            helper.make_tensor_value_info("position", TensorProto.INT64, [1]),
        ]
        outputs = [helper.make_tensor_value_info("logits", f32, [1, self.S, vocab])]
        for i in range(layers):
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(f"cache.{i}.{kind}", f32, cache))
                outputs.append(helper.make_tensor_value_info(f"cache_out.{i}.{kind}", f32, cache))
        self.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
        step = {
            "layers": layers,
            "kv_heads": self.H_kv,
            "head_dim": self.D,
            "max_context": self.T,
            "vocab": vocab,
            "seq_len": self.S,
        }
        helper.set_model_props(model, {STEP_KEY: json.dumps(step)})
        onnx.checker.check_model(model)
        return model


def _check(d: int, heads: int, kv_heads: int, seq_len: int, max_context: int) -> None:
    if d % heads or heads % kv_heads or not 1 <= seq_len <= max_context:
        raise ValueError(
            f"d {d} must be a multiple of heads {heads}, heads of kv_heads {kv_heads}, and "
            f"1 <= seq_len {seq_len} <= max_context {max_context}"
        )


def gpt2_step(
    layers: int = 2,
    d: int = 64,
    heads: int = 4,
    ffn: int = 256,
    vocab: int = 256,
    max_context: int = 64,
    seq_len: int = 1,
    gelu: str = "tanh",
    tied: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """A GPT-2-like step model (opset 20): token + learned position embeddings; per block LayerNorm, one
    fused QKV projection (MatMul + bias, split in three), causal attention over the cache, the output
    projection, a residual; LayerNorm, MLP with GELU (`gelu` "tanh" or "erf"), a residual; a final
    LayerNorm and the LM head (the token embedding transposed when `tied`, else its own weight)."""
    _check(d, heads, heads, seq_len, max_context)
    if gelu not in ("tanh", "erf"):
        raise ValueError(f"gelu must be 'tanh' or 'erf', not {gelu!r}")
    D = d // heads
    g = _Step(seed, seq_len, max_context, heads, D)
    wte = g.weight((vocab, d), scale=0.5, prefix="wte")
    wpe = g.weight((max_context, d), scale=0.1, prefix="wpe")
    pos = g.positions()
    x = g.op("Add", [g.op("Gather", [wte, "input_ids"]), g.op("Gather", [wpe, pos])])  # [1, S, d]
    mask, idx = g.causal_mask(pos), g.scatter_indices(pos)

    def layer_norm(x):
        return g.op("LayerNormalization", [x, g.gain(d), g.bias(d)], axis=-1, epsilon=1e-5)

    def dense(x, cin, cout):
        return g.op("Add", [g.op("MatMul", [x, g.weight((cin, cout))]), g.bias(cout)])

    for i in range(layers):
        qkv = dense(layer_norm(x), d, 3 * d)
        q, k, v = (g.name(n) for n in ("q", "k", "v"))
        g.nodes.append(helper.make_node("Split", [qkv, g.ints(d, d, d)], [q, k, v], axis=-1))
        att = g.attention(i, g.heads(q, heads), g.heads(k, heads), g.heads(v, heads), mask, idx, heads)
        x = g.op("Add", [x, dense(att, d, d)])
        hidden = g.op("Gelu", [dense(layer_norm(x), d, ffn)], approximate="tanh" if gelu == "tanh" else "none")
        x = g.op("Add", [x, dense(hidden, ffn, d)])
    head = g.op("Transpose", [wte], perm=[1, 0]) if tied else g.weight((d, vocab), prefix="lm_head")
    logits = g.op("MatMul", [layer_norm(x), head])
    return g.model("gpt2_step", layers, vocab, logits, opset=20)


def rope_tables(max_context: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [max_context, head_dim] of Llama's rotary embedding (rotate_half form: the angle of
    pair j, position p is p * theta^(-2j / head_dim), repeated over both halves)."""
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(max_context, dtype=np.float64)[:, None] * inv[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def llama_step(
    layers: int = 2,
    d: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    vocab: int = 256,
    max_context: int = 64,
    seq_len: int = 1,
    seed: int = 0,
) -> onnx.ModelProto:
    """A Llama-like step model (opset 23): token embedding; per block RMSNorm, Q / K / V projections
    without bias (K and V for `kv_heads` heads: grouped-query attention), RoPE on Q and K (rotate_half;
    cos / sin rows gathered at each token's position; the cache holds keys after RoPE), causal attention,
    the output projection, a residual; RMSNorm, the SiLU-gated MLP down(SiLU(x W1) * (x W3)), a residual;
    a final RMSNorm and an untied LM head."""
    _check(d, heads, kv_heads, seq_len, max_context)
    D = d // heads
    g = _Step(seed, seq_len, max_context, kv_heads, D)
    wte = g.weight((vocab, d), scale=0.5, prefix="wte")
    pos = g.positions()
    x = g.op("Gather", [wte, "input_ids"])  # [1, S, d]
    mask, idx = g.causal_mask(pos), g.scatter_indices(pos)
    cos_t, sin_t = rope_tables(max_context, D)
    cos, sin = (g.op("Gather", [g.const(t, "rope"), pos]) for t in (cos_t, sin_t))  # [S, D], broadcast per head
    half = D // 2

    def rope(x):  # x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x2, x1)
        x1, x2 = g.name("x1"), g.name("x2")
        g.nodes.append(helper.make_node("Split", [x, g.ints(half, half)], [x1, x2], axis=-1))
        rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])

    def rms_norm(x):
        return g.op("RMSNormalization", [x, g.gain(d)], axis=-1, epsilon=1e-6)

    def dense(x, cin, cout):
        return g.op("MatMul", [x, g.weight((cin, cout))])

    for i in range(layers):
        h = rms_norm(x)
        q = rope(g.heads(dense(h, d, d), heads))
        k = rope(g.heads(dense(h, d, kv_heads * D), kv_heads))
        v = g.heads(dense(h, d, kv_heads * D), kv_heads)
        x = g.op("Add", [x, dense(g.attention(i, q, k, v, mask, idx, heads), d, d)])
        h = rms_norm(x)
        gate = dense(h, d, ffn)
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])  # SiLU as torch exports it
        x = g.op("Add", [x, dense(g.op("Mul", [act, dense(h, d, ffn)]), ffn, d)])
    logits = dense(rms_norm(x), d, vocab)
    return g.model("llama_step", layers, vocab, logits, opset=23)


def step_info(model: onnx.ModelProto) -> dict | None:
    """The `tvm_npu.step` metadata of an ONNX step model (layers, kv_heads, head_dim, max_context, vocab,
    seq_len), or None when it has none."""
    for prop in model.metadata_props:
        if prop.key == STEP_KEY:
            return json.loads(prop.value)
    return None
