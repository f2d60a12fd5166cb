"""Trained models that ship with tvm_npu, in Hugging Face layout (config.json, model.safetensors,
tokenizer.json): the only language models of the project whose weights were trained, so that the quality of
a quantized build can be measured as perplexity on held-out text (docs/llm.md, "Quality").

Each folder was written by scripts/train_tiny_lm.py, whose log (`train_log.json`) records the arguments,
the versions, the loss curve, the held-out perplexity beside a unigram model's and every file's SHA-256;
`heldout.txt` is the held-out text it was measured on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..contract.errors import NPUError

_ROOT = Path(__file__).resolve().parent / "pretrained"
NAMES = ("tiny-llama", "digits-cnn")


def pretrained(name: str = "tiny-llama", verify: bool = True) -> str:
    """The folder of the shipped model `name`: "tiny-llama" (a 4-layer Llama, d 256, 4 heads / 2 KV heads,
    byte-level BPE of 2048 tokens, trained on Python's documentation topics; for
    `transformers.AutoModelForCausalLM.from_pretrained(folder)` or `tvm_npu.llm.compile(folder, ...)`), or
    "digits-cnn" (digits_cnn.onnx, a CNN trained on scikit-learn's digits; `pretrained_digits`).

    With `verify`, the weights' SHA-256 is checked against the training log first, so a damaged or
    replaced file is ERR_BAD_ARTIFACT rather than a model that writes other text.
    """
    if name not in NAMES or not (_ROOT / name / "train_log.json").is_file():
        shipped = [n for n in NAMES if (_ROOT / n / "train_log.json").is_file()]
        raise NPUError("ERR_INVALID_CONFIG", f"no shipped model {name!r}: the models are {shipped}")
    folder = _ROOT / name
    if verify:
        log = json.loads((folder / "train_log.json").read_text())
        for file, want in log["sha256"].items():
            if not (folder / file).is_file():
                raise NPUError("ERR_BAD_ARTIFACT", f"{folder / file} is missing: reinstall tvm_npu")
            got = hashlib.sha256((folder / file).read_bytes()).hexdigest()
            if got != want:
                raise NPUError(
                    "ERR_BAD_ARTIFACT",
                    f"{folder / file}: SHA-256 {got[:16]}... is not the training log's {want[:16]}...: the "
                    "file is damaged or replaced; reinstall tvm_npu",
                )
    return str(folder)


def heldout_text(name: str = "tiny-llama") -> str:
    """The held-out text of the shipped model `name` (the documentation topics it never saw in training)."""
    return (Path(pretrained(name, verify=False)) / "heldout.txt").read_text()
