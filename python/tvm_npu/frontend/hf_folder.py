"""A Hugging Face checkpoint folder (config.json + model.safetensors, as `save_pretrained` writes it) as the
input of `tvm_npu.llm.compile`, the way MLC LLM takes one: the causal LM is loaded with transformers and
exported to the standard decoder-with-past ONNX with the documented recipe (models/hf_export.py,
docs/llm_import.md "Making the export"), which the decoder importer then reads like any other export.

torch and transformers are the optional extra `llm`; without them a folder is a coded error saying so.
A `tokenizer.json` beside the weights gives text in and text out (`tokenizer(folder)`).
"""

from __future__ import annotations

import json
import os

from ..contract.errors import NPUError

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def is_hf_folder(path) -> bool:
    """Whether `path` is a folder holding a Hugging Face config.json and weights (and no genai_config.json,
    which makes it an onnxruntime-genai folder)."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return False
    have = set(os.listdir(path))
    return "config.json" in have and "genai_config.json" not in have and any(w in have for w in _WEIGHTS)


def config(folder) -> dict:
    """The folder's config.json as a dict; ERR_INVALID_MODEL when it is not readable JSON."""
    try:
        with open(os.path.join(folder, "config.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise NPUError("ERR_INVALID_MODEL", f"{folder}: config.json is not readable JSON: {err}") from None


def export_folder(folder, path) -> str:
    """Export the causal LM in `folder` to the decoder-with-past ONNX file `path` (float32, opset 17)."""
    try:
        import torch
        import transformers
    except ImportError as err:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"{folder} is a Hugging Face checkpoint folder: reading it needs torch and transformers ({err}); "
            "pip install 'tvm_npu[llm]' (torch's CPU build: see the README), or pass an ONNX export",
        ) from None
    from ..models.hf_export import export_model

    arch = config(folder).get("architectures") or ["?"]
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(os.fspath(folder), dtype=torch.float32)
    except Exception as err:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ...
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise NPUError(
            "ERR_INVALID_MODEL", f"{folder}: transformers cannot load the causal LM ({arch[0]}): {first}"
        ) from None
    model.eval()
    with torch.no_grad():
        return export_model(model, os.fspath(path))


def tokenizer(folder):
    """The folder's tokenizer.json as a `tokenizers.Tokenizer`, or None when there is none."""
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise NPUError(
            "ERR_INVALID_CONFIG", f"{path}: text in and out needs the `tokenizers` library: pip install tokenizers"
        ) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as err:  # noqa: BLE001 - tokenizers raises its own Exception type
        raise NPUError("ERR_INVALID_MODEL", f"{path} is not a tokenizers file: {err}") from None


def special_ids(folder) -> dict:
    """{"eos": [ids], "bos": id or None, "pad": id or None} from config.json / generation_config.json."""
    out: dict = {"eos": [], "bos": None, "pad": None}
    for name in ("config.json", "generation_config.json"):
        file = os.path.join(folder, name)
        if not os.path.isfile(file):
            continue
        try:
            with open(file) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        eos = data.get("eos_token_id")
        if eos is not None:
            out["eos"] = sorted(set(eos if isinstance(eos, list) else [eos]))
        for key in ("bos", "pad"):
            if data.get(f"{key}_token_id") is not None:
                out[key] = data[f"{key}_token_id"]
    return out
