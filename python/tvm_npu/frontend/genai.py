"""onnxruntime-genai model folders as step models (docs/llm_import.md, "onnxruntime-genai folders").

onnxruntime-genai's model builder writes a folder: `genai_config.json` (the model's token ids, context
length, search defaults, and the decoder's file and I/O names) and `model.onnx`, whose inputs are
`input_ids` [B, S], `attention_mask` [B, P + S] and `past_key_values.{i}.key/value` [B, H_kv, P,
"kv_cache_dim"], with onnxruntime's contrib ops in each layer: GroupQueryAttention (the cache append,
RoPE and attention in one op, positions from `seqlens_k` / `total_sequence_length`, which the graph
computes from `attention_mask`), SimplifiedLayerNormalization (in the default domain) and
SkipSimplifiedLayerNormalization, MatMul or MatMulNBits.

`to_step_model` rewrites it into the step model of docs/llm_import.md: every GroupQueryAttention over
the static cache (genai_attention.py), the norms as RMSNormalization (genai_norms.py), the
attention_mask arithmetic gone (checked first: it must compute each sequence's length - 1 and the
total length, the only meaning the rewrite gives it), `position` and `cache.{i}.*` in, `cache_out.{i}.*`
out. MatMulNBits stays: the importer keeps its codes (frontend/blockwise.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..contract.errors import NPUError
from . import decoder_fold, genai_attention, genai_bare, genai_norms

CONFIG = "genai_config.json"
STEP_KEY = "tvm_npu.step"


def is_folder(path) -> bool:
    """True when `path` is a directory holding a genai_config.json."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(path, CONFIG))


def read_config(folder) -> dict:
    """The folder's genai_config.json (coded errors for a missing or unreadable one)."""
    path = os.path.join(folder, CONFIG)
    try:
        with open(path) as f:
            config = json.load(f)
        config["model"]["decoder"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise NPUError(
            "ERR_INVALID_MODEL", f"{path} is not an onnxruntime-genai config (model.decoder): {err}"
        ) from None
    return config


def generation(config: dict) -> dict:
    """What a caller of the compiled model needs from the config: token ids, context length, search."""
    model = config["model"]
    keep = ("bos_token_id", "eos_token_id", "pad_token_id", "context_length", "vocab_size", "type")
    return {**{k: model[k] for k in keep if k in model}, "search": dict(config.get("search", {}))}


def _names(config: dict) -> dict:
    dec = config["model"]["decoder"]
    names = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
        **dec.get("inputs", {}),
    }
    names.update({"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"})
    names.update(dec.get("outputs", {}))
    return names


def config_of(model) -> dict | None:
    """The onnxruntime-genai config of `model`: a folder's genai_config.json, the one beside a decoder file
    it names, or what a decoder with GroupQueryAttention (a path or a ModelProto) implies without one
    (genai_bare.py); None for anything else."""
    if is_folder(model):
        return read_config(model)
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        folder = genai_bare.beside(model)
        if folder is not None:
            return read_config(folder)
        try:
            model = onnx.load(os.fspath(model), load_external_data=False)
        except Exception:  # noqa: BLE001 - not an ONNX file: not ours to say
            return None
    if isinstance(model, onnx.ModelProto) and genai_bare.has_gqa(model):
        return genai_bare.config(model)
    return None


def _load(source) -> tuple[onnx.ModelProto, dict]:
    """(the decoder, its config) of a folder, a decoder file or a ModelProto (a copy: the rewrite edits it)."""
    if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
        config = read_config(source)  # a folder, or nothing there: coded ERR_INVALID_MODEL when unreadable
    else:
        config = config_of(source)
    if config is None:
        raise _missing("no genai_config.json and no GroupQueryAttention node")
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model, config
    if is_folder(source):
        path = os.path.join(source, config["model"]["decoder"].get("filename", "model.onnx"))
    else:
        path = os.fspath(source)
    try:
        return onnx.load(path), config
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise NPUError("ERR_INVALID_MODEL", f"cannot read the decoder {path}: {err}") from None


def _missing(what: str) -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"{what}: not the decoder onnxruntime-genai's model builder writes (input_ids, attention_mask, "
        "past_key_values.{i}.* in; logits, present.{i}.* out; one GroupQueryAttention per layer)",
    )


def _check_lengths(model: onnx.ModelProto, consts: dict, gqa: list, mask: str) -> None:
    """seqlens_k and total_sequence_length of every GroupQueryAttention must be computed from the
    attention mask and constants only, as sum(mask) - 1 and its length: evaluated for two masks."""
    graph = model.graph
    wanted = sorted({n.input[k] for n in gqa for k in (5, 6)})
    known, nodes = {mask, *consts}, []
    for node in graph.node:
        ins = [i for i in node.input if i]
        if node.op_type != "GroupQueryAttention" and ins and all(i in known for i in ins):
            nodes.append(node)
            known.update(node.output)
    if any(w not in known for w in wanted):
        raise _missing("seqlens_k / total_sequence_length not computed from attention_mask alone")
    used = {i for n in nodes for i in n.input}
    sub = helper.make_graph(
        nodes,
        "lengths",
        [helper.make_tensor_value_info(mask, TensorProto.INT64, [1, None])],
        [helper.make_empty_tensor_value_info(w) for w in wanted],
        [numpy_helper.from_array(v, k) for k, v in consts.items() if k in used and k != mask],
    )
    evaluator = ReferenceEvaluator(helper.make_model(sub, opset_imports=list(model.opset_import)))
    for length in (3, 7):
        got = dict(zip(wanted, evaluator.run(None, {mask: np.ones((1, length), np.int64)})))
        for n in gqa:
            seqlens, total = (np.asarray(got[n.input[k]]).reshape(-1) for k in (5, 6))
            if seqlens.tolist() != [length - 1] or total.tolist() != [length]:
                raise _missing(f"{n.name}: seqlens_k / total_sequence_length are not sum(mask) - 1 and len(mask)")


def _layers(model: onnx.ModelProto, names: dict) -> tuple[int, int]:
    inputs = {i.name: i for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    for key in ("input_ids", "attention_mask"):
        if names[key] not in inputs:
            raise _missing(f"no graph input {names[key]}")
    if names["logits"] not in outputs:
        raise _missing(f"no graph output {names['logits']}")
    layers = 0
    while names["past_key_names"] % layers in inputs:
        layers += 1
    for i in range(layers):
        for key in ("past_value_names", "present_key_names", "present_value_names"):
            if names[key] % i not in set(inputs) | outputs:
                raise _missing(f"no {names[key] % i} for layer {i} of {layers}")
    if not layers:
        raise _missing(f"no input {names['past_key_names'] % 0}")
    past = inputs[names["past_key_names"] % 0].type.tensor_type
    if past.elem_type != TensorProto.FLOAT:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{names['past_key_names'] % 0} is {helper.tensor_dtype_to_np_dtype(past.elem_type)}: the step model's "
            "cache is float32; build the folder with -p fp32 or -p int4 (the builder's fp16 / bf16 are not read)",
        )
    dims = past.shape.dim
    if len(dims) != 4 or not dims[1].dim_value:
        raise _missing(f"{names['past_key_names'] % 0} is not [batch, kv_heads, past, head_dim]")
    return layers, dims[1].dim_value


def _head_dim(config: dict, gqa: onnx.NodeProto) -> int:
    dec = config["model"]["decoder"]
    if dec.get("head_size"):
        return int(dec["head_size"])
    heads = next(a.i for a in gqa.attribute if a.name == "num_heads")
    return int(dec["hidden_size"]) // heads


def to_step_model(folder, max_context: int | None, seq_len: int) -> onnx.ModelProto:
    """The step model (S = seq_len tokens against a static cache of max_context rows; default the
    folder's context_length) of an onnxruntime-genai folder's decoder (`folder`: the folder, its
    model.onnx, or that decoder alone as a path or ModelProto: config_of).

    Raises NPUError: ERR_INVALID_MODEL for a folder without a readable genai_config.json or model;
    ERR_INVALID_CONFIG for seq_len / max_context out of range (max_context above the folder's
    context_length too: the rotary tables end there); ERR_OP_NOT_SUPPORTED naming the node and the
    attribute or input that is not implemented exactly, or the part of the builder's interface that is
    missing.
    """
    model, config = _load(folder)
    names = _names(config)
    T = config["model"].get("context_length") if max_context is None else max_context
    integers = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (seq_len, T))
    if not (integers and 1 <= seq_len <= T):
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"seq_len {seq_len!r} and max_context {T!r}: need integers with 1 <= seq_len <= max_context",
        )
    context = int(config["model"].get("context_length", 0))
    if context and context < T:  # the rotary tables (and the model's training) end there
        raise NPUError(
            "ERR_INVALID_CONFIG", f"max_context {T} exceeds the folder's context_length {context}: give at most that"
        )
    layers, H_kv = _layers(model, names)
    graph = model.graph
    consts = decoder_fold.constants(graph)
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    layer_of = {names["past_key_names"] % i: i for i in range(layers)}
    if len(gqa) != layers or sorted(layer_of.get(n.input[3], -1) for n in gqa) != list(range(layers)):
        raise _missing(f"{len(gqa)} GroupQueryAttention nodes reading the {layers} layers' pasts")
    D = _head_dim(config, gqa[0])
    _check_lengths(model, consts, gqa, names["attention_mask"])
    pos_e = genai_attention.Emitter("step/")
    pos = genai_attention.positions(pos_e, seq_len)
    masks: dict[int, str] = {}
    nodes = []
    for node in graph.node:
        if node.op_type == "GroupQueryAttention":
            i = layer_of[node.input[3]]
            if node.input[4] != names["past_value_names"] % i or list(node.output[1:3]) != [
                names["present_key_names"] % i,
                names["present_value_names"] % i,
            ]:
                raise _missing(f"{node.name} does not read layer {i}'s past value and write its present")
            window = genai_attention.check(node, consts)["local_window_size"]
            if window not in masks:
                masks[window] = genai_attention.causal_mask(pos_e, pos, T, window)
            new, inits = genai_attention.expand(node, i, consts, seq_len, T, D, pos, masks[window])
            nodes += new
            graph.initializer.extend(inits)
        elif node.op_type in genai_norms.OPS:
            nodes += genai_norms.rewrite(node)
        else:
            nodes.append(node)
    graph.initializer.extend(pos_e.inits)
    del graph.node[:]
    graph.node.extend(pos_e.nodes + nodes)
    _interface(model, names, layers, H_kv, D, seq_len, T)
    vocab = model.graph.output[0].type.tensor_type.shape.dim[2].dim_value
    for opset in model.opset_import:  # RMSNormalization is opset 23; ops 18-22 keep their meaning there
        if opset.domain in ("", "ai.onnx"):
            if opset.version < 18:
                raise _missing(f"opset {opset.version} (the builder writes 21 or later)")
            opset.version = max(opset.version, 23)
    step = dict(layers=layers, kv_heads=H_kv, head_dim=D, max_context=int(T), vocab=vocab, seq_len=int(seq_len))
    del model.metadata_props[:]
    helper.set_model_props(model, {STEP_KEY: json.dumps(step)})
    try:
        light = decoder_fold.light_copy(model)
        onnx.checker.check_model(light)
        onnx.shape_inference.infer_shapes(light, strict_mode=True)
    except Exception as err:  # noqa: BLE001 - a rewrite that breaks the graph is reported, coded
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"the rewritten step model does not check: {err}") from None
    return model


def _interface(model: onnx.ModelProto, names: dict, layers: int, H_kv: int, D: int, S: int, T: int) -> None:
    graph = model.graph
    cache = [f"cache.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    ids = helper.make_tensor_value_info(names["input_ids"], TensorProto.INT64, [1, S])
    inputs = [ids, helper.make_tensor_value_info("position", TensorProto.INT64, [1])]
    inputs += [helper.make_tensor_value_info(c, TensorProto.FLOAT, [1, H_kv, T, D]) for c in cache]
    logits = next(o for o in graph.output if o.name == names["logits"])
    vocab = logits.type.tensor_type.shape.dim[2].dim_value if len(logits.type.tensor_type.shape.dim) == 3 else 0
    if not vocab:
        head = next((n for n in graph.node if logits.name in n.output), None)
        vocab = next((a.i for a in head.attribute if a.name == "N"), 0) if head is not None else 0
    if not vocab:
        raise _missing(f"the logits output {logits.name} has no static vocabulary dimension")
    outputs = [helper.make_tensor_value_info(logits.name, TensorProto.FLOAT, [1, S, vocab])]
    outputs += [
        helper.make_tensor_value_info(c.replace("cache.", "cache_out."), TensorProto.FLOAT, [1, H_kv, T, D])
        for c in cache
    ]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.output[:]
    graph.output.extend(outputs)
    del graph.value_info[:]
    decoder_fold.remove_dead(model)
    read = {i for n in graph.node for i in n.input}
    gone = [
        names["attention_mask"],
        *(names[k] % i for i in range(layers) for k in ("past_key_names", "past_value_names")),
    ]
    unmapped = [g for g in gone if g in read]
    if unmapped:
        raise _missing(f"{unmapped[0]} is still read after the rewrite (an unmapped use)")
