#!/usr/bin/env bash
# Make tests/fixtures/sd_optimum: a Stable Diffusion folder as optimum's ONNX exporter writes it
# (`optimum-cli export onnx --model <diffusers folder> out/`), from a tiny seeded diffusers
# StableDiffusionPipeline: the UNet and VAE of python/tvm_npu/models/diffusers_export.py, its CLIP text
# encoder with a vocabulary of its own (a byte-level BPE trained by the `tokenizers` library on a fixed
# word list, saved as vocab.json / merges.txt and loaded by transformers' CLIPTokenizer) and 16 positions,
# a DDIMScheduler with Stable Diffusion 1.x's settings.
#
# optimum-onnx needs transformers 4.x, which cannot share the project's environment (transformers 5), so
# this script makes its own venv (VENV, default /work/venv-optimum) from the package index.
# The install resolves with diffusers 0.35.* (diffusers 0.42 needs huggingface-hub >= 1.32, optimum-onnx's
# transformers 4.57 needs < 1.0): pip picked diffusers 0.35.2, huggingface-hub 0.36.2, transformers 4.57.6,
# optimum 2.1.0, optimum-onnx 0.1.0, onnxruntime 1.32.0, torch 2.13.0+cpu. torch==2.13.0 resolves from this
# machine's index; elsewhere add --index-url https://download.pytorch.org/whl/cpu (and --extra-index-url
# https://pypi.org/simple) for the CPU wheel.
# NOT YET RUN past the install: the export itself and tests/fixtures/sd_optimum are still to do; until
# then tests/diffusion/test_sd_folder.py builds the layout itself from the tiny exports.
#
#     bash scripts/export_optimum_sd.sh [OUT]        # OUT: default tests/fixtures/sd_optimum
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/tests/fixtures/sd_optimum}
venv=${VENV:-/work/venv-optimum}
if [ ! -x "$venv/bin/optimum-cli" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install "optimum-onnx==0.1.*" "torch==2.13.0" onnx onnxruntime "diffusers==0.35.*"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$venv/bin/python" - "$here" "$work/sd" <<'EOF'
import importlib.util
import json
import sys

import diffusers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers, Regex

here, folder = sys.argv[1], sys.argv[2]
# models/diffusers_export.py imports nothing of tvm_npu at its top: load the file, not the package (no TVM here)
spec = importlib.util.spec_from_file_location("de", f"{here}/python/tvm_npu/models/diffusers_export.py")
de = importlib.util.module_from_spec(spec)
spec.loader.exec_module(de)

# A CLIP byte-level BPE trained on a fixed word list: 256 byte symbols, merges up to 400 entries in all.
WORDS = ("a photo of a cat sitting on the red chair , an astronaut riding a horse on mars in the style of van "
         "gogh oil painting portrait of an old man with glasses photograph high quality 4k detailed sunset over "
         "the sea mountains forest city at night dog bird flower blue green yellow")
tok = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                       normalizers.Lowercase()])
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                         behavior="removed", invert=True),
    pre_tokenizers.ByteLevel(add_prefix_space=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), end_of_word_suffix="</w>",
                              show_progress=False)
tok.train_from_iterator([WORDS] * 4, trainer)
tok.model.save(folder + "_tok")
tokenizer = transformers.CLIPTokenizer(folder + "_tok/vocab.json", folder + "_tok/merges.txt",
                                       pad_token="<|endoftext|>", model_max_length=16)
vocab = len(tokenizer.get_vocab())

torch.manual_seed(0)
te = transformers.CLIPTextModel(transformers.CLIPTextConfig(
    vocab_size=vocab, hidden_size=de.TEXT_WIDTH, intermediate_size=2 * de.TEXT_WIDTH, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=16,
    bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
)).eval()
scheduler = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                    clip_sample=False, set_alpha_to_one=False, steps_offset=1)
pipe = diffusers.StableDiffusionPipeline(
    vae=de.vae(0), text_encoder=te, tokenizer=tokenizer, unet=de.unet(0), scheduler=scheduler,
    safety_checker=None, feature_extractor=None, requires_safety_checker=False)
pipe.save_pretrained(folder)
print("vocab", vocab, json.dumps(tokenizer("a photo of a cat").input_ids))
EOF

"$venv/bin/optimum-cli" export onnx --model "$work/sd" --task text-to-image "$work/onnx"
rm -rf "$out"
mkdir -p "$out"
cp -r "$work/onnx/." "$out/"
du -sh "$out"
find "$out" -type f | sort
