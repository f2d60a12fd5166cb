"""Text in and text out for the LLM commands: the tokenizer beside a model folder, `tvm-npu eval` (perplexity,
top-1 agreement and KL divergence against the float model, measured on the NPU; docs/llm.md "Quality").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..contract.errors import NPUError


def find_tokenizer(model: str, explicit: str | None = None):
    """The tokenizer of `model`: `explicit` (a tokenizer.json), else the tokenizer.json in the model's folder
    (a Hugging Face or onnxruntime-genai folder, or the folder an ONNX file is in); None when there is none."""
    from ..frontend import hf_folder

    if explicit is not None:
        if not Path(explicit).is_file():
            raise NPUError("ERR_INVALID_CONFIG", f"--tokenizer {explicit!r} does not exist")
        return _from_file(explicit)
    folder = Path(model) if Path(model).is_dir() else Path(model).parent
    return hf_folder.tokenizer(str(folder))


def _from_file(path: str):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as err:  # noqa: BLE001 - tokenizers raises its own Exception type
        raise NPUError("ERR_INVALID_MODEL", f"{path} is not a tokenizers file: {err}") from None


def encode(tok, text: str, what: str) -> np.ndarray:
    """`text` as token ids; ERR_INVALID_CONFIG for an empty text or one the tokenizer maps to nothing or to
    its unknown token (characters it has no token for: a byte-level tokenizer has one for every byte)."""
    if not text.strip():
        raise NPUError("ERR_INVALID_CONFIG", f"{what} is empty: give some text")
    enc = tok.encode(text)
    unk = [t for t, i in zip(enc.tokens, enc.ids) if tok.id_to_token(i) in ("<unk>", "[UNK]")]
    if unk or not enc.ids:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"{what}: the tokenizer has no token for {len(unk)} piece(s) of it (first {unk[:1]}): remove those "
            "characters or use the model's own tokenizer",
        )
    return np.asarray(enc.ids, np.int64)


def cmd_eval(args) -> int:
    """Compile MODEL, read --text FILE, print the perplexity on the NPU, the float model's, the top-1
    agreement and the KL divergence (with a progress bar over the windows)."""
    from .. import llm
    from ..frontend import hf_folder
    from ..llm import quality, reference

    tok = find_tokenizer(args.model, args.tokenizer)
    if tok is None:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"no tokenizer.json beside {args.model}: give one with --tokenizer, or use a model folder that has one",
        )
    path = Path(args.text)
    if not path.is_file():
        what = "is a folder, not a text file" if path.is_dir() else "does not exist"
        raise NPUError("ERR_INVALID_CONFIG", f"--text {args.text!r} {what}")
    # What can be checked before the compile is, so that a typo costs no build. A negative --max-tokens
    # would slice from the end (all but the last N tokens): refused, as is one that leaves nothing to score.
    if args.max_tokens is not None and args.max_tokens < 2:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"--max-tokens {args.max_tokens}: give at least 2 (each token after the first is scored)",
        )
    if args.max_context is not None and args.max_context >= 1:
        quality.check_stride(args.stride, args.max_context)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise NPUError("ERR_INVALID_CONFIG", f"--text {args.text}: not readable UTF-8 text ({err})") from None
    ids = encode(tok, text, f"--text {args.text}")
    if args.max_tokens is not None:
        ids = ids[: args.max_tokens]
    options = {k: getattr(args, k) for k in ("config", "prefill_len", "weights", "group_size", "kv_dtype")}
    lm = llm.compile(args.model, max_context=args.max_context, **options)
    ref = None
    if not args.no_reference:
        ref = reference.torch_logits(args.model) if hf_folder.is_hf_folder(args.model) else None
        ref = ref or reference.onnxruntime_logits(args.model)
    ev = llm.perplexity(lm, ids, stride=args.stride, reference=ref, step=args.step, progress=True)
    print(f"model: {args.model} ({args.weights} weights, {lm.meta['kv_dtype']} KV cache, max_context {lm.max_context})")
    print(ev.summary())
    return 0
