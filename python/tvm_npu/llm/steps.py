"""The two step models an LLM compiles (prefill at the bucket length, decode at 1), from what the user gave.

`model` is one of:

- a callable `model(seq_len=S, max_context=T)` returning a step model: the cleanest form, since one
  builder gives both instances (e.g. `functools.partial(tvm_npu.models.decoder.gpt2_step, layers=2)`);
- a pair `(prefill, decode)` of step models (decode at seq_len 1, the same max_context);
- one step model at seq_len 1: it serves both steps (a prompt is prefilled one token per call);
- a Hugging Face decoder-with-past export (ONNX ModelProto or path, inputs `past_key_values.*` or cache
  inputs of other names that frontend/decoder_pasts.py finds, lengths symbolic): the frontend's
  `to_step_model` specializes it to each step (docs/llm_import.md);
- a Hugging Face checkpoint folder (config.json + model.safetensors): exported to such an export first
  (frontend/hf_folder.py; needs the `llm` extra).
- an onnxruntime-genai folder (a directory with genai_config.json): frontend/genai.py rewrites its
  model.onnx to each step; max_context defaults to the config's context_length.

A step model is an ONNX ModelProto, a path to one, or a Relax IRModule whose `main` has the step
signature; each carries the `tvm_npu.step` metadata (docs/llm.md). An ONNX step model at seq_len S
cannot be re-specialized to another S here (its shapes are baked into its constants); a
decoder-with-past export can, since its lengths are symbolic.
"""

from __future__ import annotations

import json
import os
import tempfile

import onnx
import tvm

from ..contract.errors import NPUError
from ..frontend import decoder_pasts, genai, hf_folder
from ..frontend.decoder import to_step_model
from ..frontend.onnx import from_onnx
from ..models.decoder import STEP_KEY, step_info

INFO_KEYS = ("layers", "kv_heads", "head_dim", "max_context", "vocab", "seq_len")


def _info_of(mod: tvm.IRModule) -> dict | None:
    attrs = mod.attrs
    if attrs is None or STEP_KEY not in attrs:
        return None
    return json.loads(str(attrs[STEP_KEY]))


def _read_onnx(model):
    """`model` as a ModelProto when it is a path (coded errors for what is not a readable ONNX file)."""
    if isinstance(model, (str, os.PathLike)):
        if os.path.isdir(model):
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{model} is a folder but not a model folder: a Hugging Face checkpoint holds config.json and "
                "model.safetensors, an onnxruntime-genai folder genai_config.json and model.onnx",
            )
        if not os.path.isfile(model):
            raise NPUError("ERR_INVALID_MODEL", f"no step model at {model}")
        try:
            return onnx.load(os.fspath(model))
        except Exception as err:  # noqa: BLE001  (onnx raises DecodeError, ValueError, ...)
            raise NPUError("ERR_INVALID_MODEL", f"{model} is not an ONNX model: {err}") from None
    return model


def _hf_folder(folder) -> onnx.ModelProto:
    """The decoder-with-past export of a Hugging Face checkpoint folder, made in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="tvm_npu_hf_") as tmp:
        return onnx.load(hf_folder.export_folder(folder, os.path.join(tmp, "decoder_with_past.onnx")))


def _decoder_with_past(model):
    """A builder over `to_step_model` when `model` is a decoder-with-past export (or a Hugging Face
    checkpoint folder, exported first), else None."""
    if hf_folder.is_hf_folder(model):
        model = _hf_folder(model)
    model = _read_onnx(model)
    if not isinstance(model, onnx.ModelProto):
        return None
    named = any(i.name.startswith("past_key_values.") for i in model.graph.input)
    if not named and not decoder_pasts.find(model.graph):  # other names: the cache inputs by data flow
        return None
    return lambda seq_len, max_context: to_step_model(model, max_context=max_context, seq_len=seq_len)


def _genai_builder(model):
    """A builder over `genai.to_step_model` for an onnxruntime-genai folder or its decoder (a file, with
    or without its genai_config.json beside it, or a ModelProto: genai.config_of)."""
    return lambda seq_len, max_context: genai.to_step_model(model, max_context=max_context, seq_len=seq_len)


def generation(model) -> dict | None:
    """The token ids, context length and search defaults of an onnxruntime-genai folder (or its decoder:
    what the graph gives), else None."""
    config = None if callable(model) or isinstance(model, (tvm.IRModule, tuple, list)) else genai.config_of(model)
    return genai.generation(config) if config is not None else None


def load_step(model) -> tuple[tvm.IRModule, dict]:
    """(the Relax module, its step metadata) of one step model (ModelProto, path or IRModule)."""
    if isinstance(model, tvm.IRModule):
        info = _info_of(model)
        mod = model
    else:
        model = _read_onnx(model)
        if not isinstance(model, onnx.ModelProto):
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"a step model is an ONNX ModelProto, a path to one or a Relax IRModule, not {type(model).__name__}",
            )
        info = step_info(model)
        mod = from_onnx(model)
    if info is None or any(k not in info for k in INFO_KEYS):
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"the step model has no complete {STEP_KEY!r} metadata (ONNX metadata_props or a Relax module "
            f"attr: a JSON with {list(INFO_KEYS)}); build it with tvm_npu.models.decoder or add it (docs/llm.md)",
        )
    info = {k: int(info[k]) for k in INFO_KEYS}
    _check_signature(mod, info)
    return mod, info


def _check_signature(mod: tvm.IRModule, info: dict) -> None:
    """`main`'s parameters against the metadata: input_ids [1, S], position [1], the cache per layer."""
    L, H, T, D, S = (info[k] for k in ("layers", "kv_heads", "max_context", "head_dim", "seq_len"))
    want = [((1, S), "int64"), ((1,), "int64")] + [((1, H, T, D), "float32")] * (2 * L)
    got = []
    for p in mod["main"].params:
        shape = getattr(p.ty, "shape", None)
        dims = None if shape is None else tuple(int(d) if hasattr(d, "value") else None for d in shape)
        got.append((dims, str(getattr(p.ty, "dtype", "?"))))
    if got != want:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"the step model's inputs {got} are not the step signature its metadata {info} gives: "
            f"input_ids [1, S] int64, position [1] int64, then key and value [1, H_kv, T, D] float32 per layer",
        )


def _check_builder(builder) -> None:
    """NPUError(ERR_INVALID_MODEL) unless `builder` takes seq_len= and max_context= (a builder with
    another signature raised its own TypeError from inside compile)."""
    import inspect  # pylint: disable=import-outside-toplevel

    try:
        inspect.signature(builder).bind(seq_len=1, max_context=1)
    except TypeError:
        raise NPUError(
            "ERR_INVALID_MODEL",
            "a step-model builder is called as builder(seq_len=S, max_context=T) and returns a step model "
            "(e.g. functools.partial(tvm_npu.models.decoder.gpt2_step, layers=2)); this one does not take those",
        ) from None
    except ValueError:  # no signature to read (a builtin): let the call say
        return


def resolve(model, max_context: int | None, prefill_len: int | None) -> tuple:
    """((prefill module, info), (decode module, info)) for `model` (see the module docstring)."""
    plain = not callable(model) and not isinstance(model, (tvm.IRModule, tuple, list))
    config = genai.config_of(model) if plain else None
    if config is not None and max_context is None and config["model"].get("context_length"):
        max_context = int(config["model"]["context_length"])
    if plain:
        model = _genai_builder(model) if config is not None else (_decoder_with_past(model) or model)
    if callable(model) and not isinstance(model, tvm.IRModule):
        if max_context is None:
            raise NPUError("ERR_LLM_CONTEXT", "give max_context= (the static cache's rows) with a step-model builder")
        S = min(32, max_context) if prefill_len is None else prefill_len
        if not 1 <= S <= max_context:
            raise NPUError(
                "ERR_LLM_CONTEXT", f"prefill_len {prefill_len}: give a bucket of 1 to max_context ({max_context})"
            )
        _check_builder(model)
        steps = [load_step(model(seq_len=s, max_context=max_context)) for s in (S, 1)]
    elif isinstance(model, (tuple, list)) and len(model) == 2:
        steps = [load_step(m) for m in model]
    else:
        step = load_step(model)
        if step[1]["seq_len"] != 1:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"one step model at seq_len {step[1]['seq_len']} cannot decode: give (prefill, decode) step "
                f"models, the decode one at seq_len 1, or a builder callable(seq_len, max_context)",
            )
        steps = [step, step]
    (_, pre), (_, dec) = steps
    if not 1 <= pre["seq_len"] <= pre["max_context"]:
        raise NPUError("ERR_INVALID_MODEL", f"the prefill step's seq_len {pre['seq_len']} is not 1 to max_context")
    if dec["seq_len"] != 1:
        raise NPUError("ERR_INVALID_MODEL", f"the decode step model has seq_len {dec['seq_len']}, not 1")
    same = {k: (pre[k], dec[k]) for k in INFO_KEYS if k != "seq_len" and pre[k] != dec[k]}
    if same:
        raise NPUError("ERR_INVALID_MODEL", f"the prefill and decode step models disagree on {same}")
    if max_context is not None and max_context != dec["max_context"]:
        raise NPUError(
            "ERR_LLM_CONTEXT",
            f"max_context {max_context}, but the step models' static cache has {dec['max_context']} rows: "
            "build them for that max_context (a longer context means recompiling)",
        )
    if prefill_len is not None and prefill_len != pre["seq_len"]:
        raise NPUError(
            "ERR_LLM_CONTEXT", f"prefill_len {prefill_len}, but the prefill step model has seq_len {pre['seq_len']}"
        )
    return steps[0], steps[1]
