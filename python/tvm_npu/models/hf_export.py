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
    if arch == "llama":
        return transformers.LlamaConfig(
            vocab_size=sizes["vocab"],
            hidden_size=sizes["d_model"],
            intermediate_size=2 * sizes["d_model"],
            num_hidden_layers=sizes["layers"],
            num_attention_heads=sizes["heads"],
            num_key_value_heads=2,
            max_position_embeddings=128,
            attn_implementation=attn,
        )
    raise ValueError(arch)


def build_model(arch: str, seed: int = 0, attn: str = "eager", **sizes):
    """The `arch` ("gpt2" or "llama") causal LM with seeded weights; `sizes` override TINY's (layers,
    d_model, heads, vocab)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = _config(arch, attn, sizes)
    model = (transformers.GPT2LMHeadModel if arch == "gpt2" else transformers.LlamaForCausalLM)(config)
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


def export(arch: str, path: str, seed: int = 0, attn: str = "eager", **sizes) -> str:
    """Export the tiny `arch` ("gpt2" or "llama") decoder-with-past to `path` (opset 17), its attention
    written out ("eager") or as torch's scaled_dot_product_attention ("sdpa", transformers' default)."""
    return export_model(build_model(arch, seed, attn, **sizes), path)


def export_model(model, path: str) -> str:
    """Export the transformers causal LM `model` (eval mode, float32) as a decoder-with-past to `path`
    (opset 17), written to a temporary file beside it and renamed."""
    import torch

    cfg = model.config
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    past_len, seq = 3, 2
    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    mask = torch.ones(1, past_len + seq, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + seq).unsqueeze(0)
    past = [torch.randn(1, kv_heads, past_len, head_dim) for _ in range(2 * layers)]
    names_past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    names_present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"}}
    axes["position_ids"] = {0: "batch", 1: "sequence"}
    axes.update({n: {0: "batch", 2: "past_sequence"} for n in names_past})
    axes.update({n: {0: "batch", 2: "total_sequence"} for n in names_present})
    axes["logits"] = {0: "batch", 1: "sequence"}
    tmp = path + ".part"
    torch.onnx.export(
        _WithPast(model),
        (ids, mask, pos, *past),
        tmp,
        input_names=["input_ids", "attention_mask", "position_ids", *names_past],
        output_names=["logits", *names_present],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )
    os.replace(tmp, path)
    return path
