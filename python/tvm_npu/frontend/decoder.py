"""Import of the standard ONNX decoder-with-past export into the step model (docs/llm_import.md).

The export (torch.onnx of a Hugging Face GPT-2 / Llama, or any model with the same interface): inputs
`input_ids`, `attention_mask`, `position_ids`, `past_key_values.{i}.key/value`; outputs `logits`,
`present.{i}.key/value`; batch, sequence and past lengths symbolic. Cache inputs and outputs of other
names are found by data flow and renamed to these first (decoder_pasts.py). The step model: one decoder step of
S tokens against a static cache of T = max_context rows, inputs `input_ids` [1, S], `position` [1],
`cache.{i}.key/value` [1, H_kv, T, D]; outputs `logits` [1, S, vocab], `cache_out.{i}.key/value`.

The rewrites, one file each: a sliding window's crops around the appends removed (decoder_crops.py); the
symbolic dims fixed (batch 1, S, past T - S) and the shape arithmetic folded (decoder_fold.py); each
past's cache append, found by data flow in one of the forms of decoder_forms.APPENDS, turned into a
cache write at `position` (decoder_cache.py); the mask rebuilt from `position` (decoder_mask.py); each
K^T form of decoder_forms.KEY_TRANSPOSES rewritten to the 4-D Transpose the resident cache recognises.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..contract.errors import NPUError
from . import contrib, decoder_cache, decoder_crops, decoder_fold, decoder_mask, decoder_pasts, decoder_positions
from .decoder_forms import KEY_TRANSPOSES
from .decoder_forms.common import Context

STEP_KEY = "tvm_npu.step"


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    try:
        return onnx.load(model)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise NPUError("ERR_INVALID_MODEL", f"cannot read the ONNX model {model!r}: {err}") from None


def _layers(model: onnx.ModelProto) -> int:
    names = {i.name for i in model.graph.input}
    outs = {o.name for o in model.graph.output}
    for name in ("input_ids", "attention_mask"):  # no position_ids: decoder_positions.py finds the positions
        if name not in names:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"no graph input {name}; export the decoder with input_ids, attention_mask, position_ids and "
                "past_key_values.{i}.key/value (the standard decoder-with-past interface)",
            )
    layers = 0
    while f"past_key_values.{layers}.key" in names:
        layers += 1
    for i in range(layers):
        for name in (f"past_key_values.{i}.value",):  # the presents: found by data flow (decoder_cache.py)
            if name not in names:
                raise NPUError("ERR_OP_NOT_SUPPORTED", f"no {name} for layer {i} of {layers}")
    if layers == 0 or "logits" not in outs:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED", "no past_key_values.0.key input or no logits output: not a decoder-with-past"
        )
    return layers


def _kv_shape(model: onnx.ModelProto) -> tuple[int, int]:
    past = next(i for i in model.graph.input if i.name == "past_key_values.0.key")
    dims = past.type.tensor_type.shape.dim
    if len(dims) != 4 or not dims[1].HasField("dim_value") or not dims[3].HasField("dim_value"):
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            "past_key_values.0.key is not [batch, kv_heads, past, head_dim] with static kv_heads and head_dim",
        )
    return dims[1].dim_value, dims[3].dim_value


def _specialize(model: onnx.ModelProto, seq: int, total: int) -> None:
    """Fix every input shape: batch 1, S = seq, attention over total = T rows, past T - S."""
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in ("input_ids", "position_ids"):
            fixed = [1, seq]
        elif vi.name == "attention_mask":
            fixed = [1, total]
        elif vi.name.startswith("past_key_values."):
            fixed = [1, dims[1].dim_value, total - seq, dims[3].dim_value]
        else:
            continue
        if len(dims) != len(fixed):
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"input {vi.name} has rank {len(dims)}, not {len(fixed)}")
        for d, v in zip(dims, fixed):
            d.Clear()
            d.dim_value = v
    del model.graph.value_info[:]
    for out in model.graph.output:  # their symbolic dims would contradict the fixed ones
        out.type.tensor_type.ClearField("shape")


def _interface(model: onnx.ModelProto, layers: int, heads: int, dim: int, seq: int, total: int) -> None:
    """Graph inputs and outputs in the step model's order (the vocabulary still symbolic: _vocab)."""
    graph = model.graph
    cache = [helper.make_tensor_value_info(f"cache.{i}.{kv}", TensorProto.FLOAT, [1, heads, total, dim])
             for i in range(layers) for kv in ("key", "value")]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
        helper.make_tensor_value_info("position", TensorProto.INT64, [1]),
        *cache,
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, "vocab"])]
    outputs += [
        helper.make_tensor_value_info(v.name.replace("cache.", "cache_out."), TensorProto.FLOAT, [1, heads, total, dim])
        for v in cache
    ]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.output[:]
    graph.output.extend(outputs)
    decoder_fold.remove_dead(model)
    read = {i for n in graph.node for i in n.input}
    for gone in ("attention_mask", *(f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value"))):
        if gone in read:
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{gone} is still read after the rewrite: an unmapped use")


def _key_transposes(model: onnx.ModelProto) -> None:
    """Every K^T form of decoder_forms.KEY_TRANSPOSES rewritten to the 4-D Transpose(0, 1, 3, 2) the
    resident cache recognises."""
    values = decoder_fold.constants(model.graph)
    for form in KEY_TRANSPOSES:
        ctx = Context.of(model.graph, values, decoder_fold.static_shapes(model), 0)
        if form.rewrite(model, ctx):
            decoder_fold.remove_dead(model)


def _declared_vocab(model: onnx.ModelProto) -> int:
    """The static last dim the export declares for `logits` (0 when symbolic or absent); read before
    _specialize clears the outputs' shapes."""
    out = next((o for o in model.graph.output if o.name == "logits"), None)
    dims = out.type.tensor_type.shape.dim if out is not None else []
    return dims[-1].dim_value if len(dims) == 3 and dims[-1].HasField("dim_value") else 0


# Ops between the LM head and `logits` that keep the last dim (Gemma2's final softcap: Div, Tanh, Mul).
_ELEMENTWISE = {"Div", "Mul", "Add", "Sub", "Tanh", "Cast", "Identity"}


def _head_vocab(model: onnx.ModelProto) -> int:
    """N of the LM head producing `logits`: MatMul / Gemm with a weight initializer, or MatMulNBits (its
    attribute N), behind elementwise ops with constants; 0 when there is none."""
    producer = {o: n for n in model.graph.node for o in n.output}
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    node = producer.get("logits")
    for _ in range(16):
        if node is None or node.op_type not in _ELEMENTWISE:
            break
        computed = [i for i in node.input if i and i not in weights]
        node = producer.get(computed[0]) if len(computed) == 1 else None
    if node is None:
        return 0
    attrs = {a.name: a.i for a in node.attribute}
    if node.op_type == "MatMulNBits":
        return int(attrs.get("N", 0))
    w = weights.get(node.input[1]) if len(node.input) > 1 else None
    if node.op_type == "MatMul" and w is not None and len(w) == 2:
        return w[1]
    if node.op_type == "Gemm" and w is not None and len(w) == 2:
        return w[0] if attrs.get("transB", 0) else w[1]
    return 0


def _vocab(model: onnx.ModelProto, declared: int) -> int:
    """The logits' last dimension: the one the export declares, else the one shape inference proves,
    else the LM head's N (ONNX's shape inference does not know onnxruntime's contrib ops, and a graph
    written by hand may not declare it)."""
    vocab = declared or decoder_fold.static_shapes(model).get("logits", (0,))[-1] or _head_vocab(model)
    if vocab:
        return vocab
    raise NPUError(
        "ERR_OP_NOT_SUPPORTED",
        "the logits output 'logits' has no static vocabulary dimension: the export declares none, shape "
        "inference proves none and it is not computed by an LM head (MatMul / Gemm with a weight, "
        "MatMulNBits); declare logits as [batch, sequence, vocab] with a static vocab",
    )


def to_step_model(model: onnx.ModelProto | str | os.PathLike, max_context: int, seq_len: int) -> onnx.ModelProto:
    """The step model (S = seq_len tokens against a static cache of max_context rows) of a Hugging Face
    style ONNX decoder-with-past export (a ModelProto or a path). The input is not changed.

    Raises NPUError: ERR_INVALID_MODEL for a file that is not ONNX; ERR_INVALID_CONFIG for seq_len or
    max_context out of range; ERR_OP_NOT_SUPPORTED naming the pattern that is missing when the graph is
    not a decoder-with-past this importer can map (no Concat of a past along the sequence axis, a mask
    that is not causal-and-padding, an input missing, ...).
    """
    integers = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (seq_len, max_context))
    if not (integers and 1 <= seq_len <= max_context):
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"seq_len {seq_len!r} and max_context {max_context!r}: need integers with 1 <= seq_len <= max_context",
        )
    model = contrib.expand(_load(model))  # ONNX's Attention: its in-op append becomes the Concat form
    decoder_pasts.standardize(model)  # other exporters' cache names: found by data flow, renamed
    layers = _layers(model)
    heads, dim = _kv_shape(model)
    declared = _declared_vocab(model)
    computed = decoder_positions.rewrite(model, seq_len, _specialize)  # positions computed in the graph
    crops = decoder_crops.remove(model, seq_len, max_context, _specialize)  # sliding windows: {layer: W < T}
    _specialize(model, seq_len, max_context)
    decoder_fold.fold(model)
    values = decoder_fold.constants(model.graph)
    shapes = decoder_fold.static_shapes(model)
    decoder_cache.write_caches(model, layers, heads, seq_len, Context.of(model.graph, values, shapes, max_context))
    decoder_mask.rebuild_mask(model, values, seq_len, max_context, crops)
    if not computed:
        decoder_cache.position_ids(model, seq_len)
    _interface(model, layers, heads, dim, seq_len, max_context)
    _key_transposes(model)
    vocab = _vocab(model, declared)
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = vocab
    step = dict(layers=layers, kv_heads=heads, head_dim=dim, max_context=int(max_context), vocab=vocab)
    step["seq_len"] = int(seq_len)
    del model.metadata_props[:]
    helper.set_model_props(model, {STEP_KEY: json.dumps(step)})
    try:
        light = decoder_fold.light_copy(model)
        onnx.checker.check_model(light)
        onnx.shape_inference.infer_shapes(light, strict_mode=True)
    except Exception as err:  # noqa: BLE001 - a rewrite that breaks the graph is reported, coded
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"the rewritten step model does not check: {err}") from None
    return model
