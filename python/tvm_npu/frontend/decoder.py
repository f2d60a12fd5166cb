"""Import of the standard ONNX decoder-with-past export into the step model (docs/llm_import.md).

The export (torch.onnx of a Hugging Face GPT-2 / Llama, or any model with the same interface): inputs
`input_ids`, `attention_mask`, `position_ids`, `past_key_values.{i}.key/value`; outputs `logits`,
`present.{i}.key/value`; batch, sequence and past lengths symbolic. The step model: one decoder step of
S tokens against a static cache of T = max_context rows, inputs `input_ids` [1, S], `position` [1],
`cache.{i}.key/value` [1, H_kv, T, D]; outputs `logits` [1, S, vocab], `cache_out.{i}.key/value`.

Three rewrites, one file each: the symbolic dims fixed (batch 1, S, past T - S) and the shape
arithmetic folded (decoder_fold.py); the mask rebuilt from `position` (decoder_mask.py); each
past/present Concat turned into a cache write at `position` (decoder_cache.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..contract.errors import NPUError
from . import decoder_cache, decoder_fold, decoder_mask

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
    for name in ("input_ids", "attention_mask", "position_ids"):
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
        for name in (f"past_key_values.{i}.value", f"present.{i}.key", f"present.{i}.value"):
            if name not in names | outs:
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
    """Graph inputs and outputs in the step model's order."""
    graph = model.graph
    cache = [helper.make_tensor_value_info(f"cache.{i}.{kv}", TensorProto.FLOAT, [1, heads, total, dim])
             for i in range(layers) for kv in ("key", "value")]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
        helper.make_tensor_value_info("position", TensorProto.INT64, [1]),
        *cache,
    ]
    shapes = decoder_fold.static_shapes(model)
    vocab = shapes.get("logits", (0, 0, 0))[-1]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])]
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


def _vocab(model: onnx.ModelProto) -> int:
    """The logits' last dimension. ONNX's shape inference does not know onnxruntime's contrib ops, so after
    an LM head of MatMulNBits (4-bit exports) it is unknown there: then the head's N says it (and is
    written into the output's type)."""
    out = model.graph.output[0]
    dim = out.type.tensor_type.shape.dim[2]
    if dim.dim_value:
        return dim.dim_value
    head = next((n for n in model.graph.node if out.name in n.output), None)
    if head is not None and head.op_type == "MatMulNBits":
        dim.dim_value = int(next(a.i for a in head.attribute if a.name == "N"))
        return dim.dim_value
    raise NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"the logits output {out.name!r} has no static vocabulary dimension after specialization: export the "
        "model with a static vocabulary (the LM head's output size)",
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
    model = _load(model)
    layers = _layers(model)
    heads, dim = _kv_shape(model)
    _specialize(model, seq_len, max_context)
    decoder_fold.fold(model)
    values = decoder_fold.constants(model.graph)
    decoder_mask.rebuild_mask(model, values, seq_len, max_context)
    decoder_cache.write_caches(model, layers, heads, seq_len)
    decoder_cache.position_ids(model, seq_len)
    _interface(model, layers, heads, dim, seq_len, max_context)
    vocab = _vocab(model)
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
