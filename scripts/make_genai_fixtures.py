"""Make the onnxruntime-genai fixture folders of tests/llm_import/test_genai_folders.py.

onnxruntime-genai's model builder writes the on-device LLM folders most people download (model.onnx,
genai_config.json, tokenizer files). This script builds tiny seeded Hugging Face models (Llama, Qwen2,
Mistral, Phi-3: 2 layers, d 64, 4 heads, 2 KV heads, vocab 256), saves each with a byte-level
tokenizer to a local folder, runs the builder on it (fp32 and int4, CPU) and keeps the output in
tests/fixtures/genai/<family>-<precision>/. Beside each folder's model it records onnxruntime-genai's
own greedy tokens for a fixed prompt (reference.json), a second reference besides onnxruntime running
the same model.onnx in the tests.

The builder needs torch, transformers and onnxruntime-genai (0.18), which the project's environment
does not pin, so it runs in its own environment:

    python3 -m venv /work/venv-genai   # or any venv with onnxruntime-genai==0.18.*, torch, transformers
    /work/venv-genai/bin/python scripts/make_genai_fixtures.py [--out tests/fixtures/genai] [families...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAMILIES = ("llama", "qwen2", "mistral", "phi3")
PRECISIONS = ("fp32", "int4")
PROMPT = [1, 17, 42, 99, 7, 200, 3]  # token ids: the fixed prompt of every reference
MAX_LENGTH = len(PROMPT) + 16  # 16 greedy tokens after the prompt
CONTEXT = 64  # max_position_embeddings: the folder's context_length (small rope caches)
# Each family its own weights. Phi-3 at seed 3 has a near-tie on its int4 greedy path (top-2 logits
# 2e-3 apart, one fp16 step): the NPU's fp16 logits cannot order them, so it takes seed 13.
SEED = 0
KEEP = ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json", "tokenizer_config.json")


# --large: the decode-roofline model of docs/llm_import.md (benchmarks/llm_decode.py's shape), not committed
LARGE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, vocab_size=2048, max_position_embeddings=256)


def _config(family: str, large: bool = False):
    import transformers

    common = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=CONTEXT,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    cls = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "mistral": transformers.MistralConfig,
        "phi3": transformers.Phi3Config,
    }[family]
    # Mistral keeps its default sliding window (4096, beyond the context: GroupQueryAttention's local_window_size)
    # Phi-3's fused gate_up_proj is [2 x intermediate, d]: at 2 x 128 = 256 = vocab the builder takes it
    # for the LM head (it finds the head by shape), so Phi-3 gets intermediate 96
    extra = {"phi3": dict(original_max_position_embeddings=CONTEXT, intermediate_size=96)}
    return cls(**{**common, **extra.get(family, {}), **(LARGE if large else {})})


def _tokenizer():
    """A byte-level BPE tokenizer of exactly 256 tokens (the 256 bytes, no merges) as a transformers
    fast tokenizer, with <s> / </s> / <pad> as the byte tokens 1 / 2 / 0 would be ambiguous: they are
    the special tokens of ids 1, 2, 0 instead of those bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    specials = {0: "<pad>", 1: "<s>", 2: "</s>"}
    inverse = {i: ch for ch, i in vocab.items()}
    for i, name in specials.items():
        del vocab[inverse[i]]
        vocab[name] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    return fast


def _hf_folder(family: str, folder: str, large: bool = False) -> None:
    import torch
    import transformers

    torch.manual_seed(SEED + FAMILIES.index(family) + (10 if family == "phi3" else 0))  # see SEED
    model = transformers.AutoModelForCausalLM.from_config(_config(family, large)).eval()
    with torch.no_grad():  # larger weights than the init's 0.02 so that the greedy tokens vary
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
    model.save_pretrained(folder)
    _tokenizer().save_pretrained(folder)


def _build(hf: str, out: str, precision: str, cache: str) -> None:
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", hf, "-o", out, "-p", precision]
    cmd += ["-e", "cpu", "-c", cache]
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})


def _reference(folder: str) -> dict:
    """onnxruntime-genai's greedy tokens for PROMPT (the whole sequence, prompt included)."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=MAX_LENGTH)
    gen = og.Generator(model, params)
    gen.append_tokens(PROMPT)
    while not gen.is_done():
        gen.generate_next_token()
    sequence = [int(t) for t in gen.get_sequence(0)]
    return {"prompt": PROMPT, "max_length": MAX_LENGTH, "sequence": sequence, "onnxruntime_genai": og.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "genai"))
    parser.add_argument("--large", action="store_true", help="4 layers, d 256, vocab 2048, context 256")
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            hf = os.path.join(tmp, family)
            _hf_folder(family, hf, args.large)
            for precision in PRECISIONS:
                out = os.path.abspath(os.path.join(args.out, f"{family}-{precision}"))
                built = os.path.join(tmp, f"{family}-{precision}")
                _build(hf, built, precision, os.path.join(tmp, "cache"))
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                for name in KEEP:
                    if os.path.exists(os.path.join(built, name)):
                        shutil.copy(os.path.join(built, name), out)
                with open(os.path.join(out, "reference.json"), "w") as f:
                    json.dump(_reference(out), f)
                    f.write("\n")
                size = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
                print(f"{out}: {size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
