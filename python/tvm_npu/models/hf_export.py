"""Hugging Face decoder-with-past ONNX exports of small GPT-2 and Llama models: the importer's test
fixtures and the LLM tutorial's models (torch + transformers, the optional extra `llm`; imported only
when called).

The export is what users ship: inputs `input_ids`, `attention_mask`, `position_ids`,
`past_key_values.{i}.key/value`; outputs `logits`, `present.{i}.key/value`; batch, sequence and past
lengths symbolic. Weights are seeded random (nothing can be downloaded from a model hub here).
"""

from __future__ import annotations

import os

TINY = dict(layers=2, d_model=64, heads=4, vocab=256)


# The families beyond GPT-2: (transformers config class, its extra settings). Every one gets the same tiny
# sizes, 2 KV heads and head_dim = d_model / heads (Gemma's default 256 would dwarf the model).
_FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),  # RMSNorm on q and k per head before RoPE
    "mistral": ("MistralConfig", {}),  # sliding_window 4096 (its default): crop Slices around the append
    "phi3": ("Phi3Config", {"pad_token_id": 0}),  # fused qkv and gate/up projections
    # untied heads: a tied tiny random Gemma repeats its prompt's last token forever
    "gemma": (
        "GemmaConfig",
        {"tie_word_embeddings": False},
    ),  # embeddings scaled by sqrt(d), RMSNorm's (1 + w), GeLU-tanh MLP
    # softcaps: tanh(scores / 50) * 50 before the mask, tanh(logits / 30) * 30 after the head
    "gemma2": (
        "Gemma2Config",
        {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "tie_word_embeddings": False},
    ),
}
ARCHS = ("gpt2", *_FAMILIES)


def _config(arch: str, attn: str, sizes: dict):
    import transformers

    sizes = {**TINY, **sizes}
    if arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=sizes["vocab"],
            n_positions=128,
            n_embd=sizes["d_model"],
            n_layer=sizes["layers"],
            n_head=sizes["heads"],
            attn_implementation=attn,
        )
    if arch not in _FAMILIES:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHS)}")
    name, extra = _FAMILIES[arch]
    return getattr(transformers, name)(
        vocab_size=sizes["vocab"],
        hidden_size=sizes["d_model"],
        intermediate_size=2 * sizes["d_model"],
        num_hidden_layers=sizes["layers"],
        num_attention_heads=sizes["heads"],
        num_key_value_heads=2,
        head_dim=sizes["d_model"] // sizes["heads"],
        max_position_embeddings=128,
        attn_implementation=attn,
        **{**extra, **sizes.get("config", {})},
    )


def build_model(arch: str, seed: int = 0, attn: str = "eager", **sizes):
    """The `arch` (one of ARCHS) causal LM with seeded weights; `sizes` override TINY's (layers, d_model,
    heads, vocab; `config` a dict of further config settings, e.g. {"sliding_window": 8})."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = _config(arch, attn, sizes)
    model = transformers.AutoModelForCausalLM.from_config(config)
    # Random init is small around zero; scale the weights up a little so the logits spread and greedy
    # decoding picks tokens by clear margins (ties would make the greedy-token comparison fragile).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(2.5)
    return model.eval()


class _WithPast:
    """forward(input_ids, attention_mask, position_ids, k0, v0, k1, v1, ...) over a DynamicCache, the
    flat signature of the standard export (transformers 5 takes only Cache objects as the past)."""

    def __new__(cls, model):
        import torch
        import transformers

        class WithPast(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, position_ids, *past):
                cache = transformers.DynamicCache(config=model.config)
                for i in range(len(past) // 2):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                # `cache=`: the keyword that replaces `past_key_values` (deprecated in 5.24, gone in 5.40)
                out = self.model(
                    input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache
                )
                flat = []
                for layer in cache.layers:  # updated in place: the past with this call's keys appended
                    flat += [layer.keys, layer.values]
                return (out.logits, *flat)

        return WithPast()


def _example(cfg, batch: int):
    """Example inputs (ids, mask, positions, *past) of `batch` rows: 2 new tokens after a past of 3."""
    import torch

    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    past_len, seq = 3, 2
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + seq).unsqueeze(0).expand(batch, seq).contiguous()
    past = [torch.randn(batch, kv_heads, past_len, head_dim) for _ in range(2 * cfg.num_hidden_layers)]
    return ids, mask, pos, *past


def export(
    arch: str, path: str, seed: int = 0, attn: str = "eager", exporter: str = "torchscript", opset=None, **sizes
) -> str:
    """Export the tiny `arch` decoder-with-past to `path`, its attention written out ("eager") or as
    torch's scaled_dot_product_attention ("sdpa", transformers' default), by torch.onnx's TorchScript
    exporter (`exporter="torchscript"`, opset 17, dynamic_axes) or its dynamo exporter ("dynamo", torch's
    default; opset 18, dynamic_shapes of torch.export.Dim.AUTO from an example batch of 2: dynamo does
    not convert dynamic_axes, and a batch of 1 would be specialized). `opset`: the dynamo exporter's
    opset instead of 18 (23 and later write sdpa as ONNX's Attention op)."""
    return export_model(build_model(arch, seed, attn, **sizes), path, exporter, opset)


def _length(kind: str, name: str, windowed: bool) -> str:
    """The name of a past / present input's length: shared, or its layer's own with a sliding window."""
    return f"{kind}_sequence_{name.split('.')[1]}" if windowed else f"{kind}_sequence"


def export_model(model, path: str, exporter: str = "torchscript", opset=None) -> str:
    """Export the transformers causal LM `model` (eval mode, float32) as a decoder-with-past to `path` by
    `exporter` (as `export` says), written to a temporary file beside it and renamed."""
    import torch

    if exporter not in ("torchscript", "dynamo"):
        raise ValueError(f"exporter {exporter!r}: 'torchscript' or 'dynamo'")
    cfg = model.config
    layers = cfg.num_hidden_layers
    names_past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    names_present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    names = dict(input_names=["input_ids", "attention_mask", "position_ids", *names_past])
    names["output_names"] = ["logits", *names_present]
    tmp = path + ".part"
    if exporter == "dynamo":
        auto = torch.export.Dim.AUTO
        past = tuple({0: auto, 2: auto} for _ in names_past)  # forward's *past: one element, a tuple
        shapes = ({0: auto, 1: auto}, {0: auto, 1: auto}, {0: auto, 1: auto}, past)
        program = torch.onnx.export(
            _WithPast(model), _example(cfg, 2), dynamic_shapes=shapes, opset_version=opset or 18, dynamo=True, **names
        )
        program.save(tmp)
    else:
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"}}
        axes["position_ids"] = {0: "batch", 1: "sequence"}
        # a sliding window's layer keeps at most W - 1 past rows while a global layer's grow: lengths named
        # per layer (onnxruntime refuses two lengths under one name), else the optimum-style shared names
        windowed = getattr(cfg, "sliding_window", None) is not None
        axes.update({n: {0: "batch", 2: _length("past", n, windowed)} for n in names_past})
        axes.update({n: {0: "batch", 2: _length("total", n, windowed)} for n in names_present})
        axes["logits"] = {0: "batch", 1: "sequence"}
        torch.onnx.export(
            _WithPast(model), _example(cfg, 1), tmp, dynamic_axes=axes, opset_version=17, dynamo=False, **names
        )
    os.replace(tmp, path)
    return path
