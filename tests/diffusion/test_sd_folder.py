"""A Stable Diffusion folder in optimum's layout (model_index.json, text_encoder/ unet/ vae_decoder/
model.onnx + config.json, tokenizer/, scheduler/), made here from the tiny diffusers exports (optimum itself
does not install beside the project's pins: docs/diffusion.md): it compiles and its image is onnxruntime's
loop on the same files; its CLIP tokenizer's ids are transformers' CLIPTokenizer's; bad folders are coded
errors."""

import json
import os
import shutil

import numpy as np
import pytest

import tvm_npu.diffusion as diffusion
from tvm_npu.contract.errors import NPUError

WORDS = "a photo of a cat sitting on the red chair , an astronaut riding a horse on mars oil painting 4k"


def _tokenizer_folder(path, positions: int):
    """A CLIP BPE trained on WORDS by `tokenizers`, saved by transformers' CLIPTokenizer."""
    transformers = pytest.importorskip("transformers")
    tk = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    tok = tk.Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=["<|startoftext|>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), end_of_word_suffix="</w>",
                                  show_progress=False)  # fmt: skip
    tok.train_from_iterator([WORDS] * 4, trainer)
    raw = path.parent / (path.name + "_raw")
    raw.mkdir()
    tok.model.save(str(raw))
    ref = transformers.CLIPTokenizer(str(raw / "vocab.json"), str(raw / "merges.txt"), pad_token="<|endoftext|>",
                                     model_max_length=positions)  # fmt: skip
    ref.save_pretrained(str(path))
    return ref


@pytest.fixture(scope="module")
def sd_folder(diffusers_export, tmp_path_factory):
    from tvm_npu.models import diffusers_export as de

    root = tmp_path_factory.mktemp("sd") / "sd"
    # the tokenizer's vocabulary (330) and special ids (0, 1)
    encoder = de.export_text_encoder(str(root.parent / "te.onnx"), batch=2, vocab=330, bos_eos=(0, 1))
    files = {"text_encoder": encoder, "unet": diffusers_export("unet", batch=2),
             "vae_decoder": diffusers_export("vae_decoder")}  # fmt: skip
    for part, f in files.items():
        (root / part).mkdir(parents=True)
        shutil.copy(f, root / part / "model.onnx")
    (root / "text_encoder" / "config.json").write_text(json.dumps({"max_position_embeddings": de.SEQ}))
    (root / "vae_decoder" / "config.json").write_text(json.dumps({"scaling_factor": 0.18215}))
    (root / "unet" / "config.json").write_text(json.dumps({"sample_size": de.LATENT}))
    (root / "scheduler").mkdir()
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps(
        {"_class_name": "DDIMScheduler", "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
         "clip_sample": False, "set_alpha_to_one": False, "steps_offset": 1}))  # fmt: skip
    (root / "model_index.json").write_text(
        json.dumps(
            {
                "_class_name": "StableDiffusionPipeline",
                "scheduler": ["diffusers", "DDIMScheduler"],
                "text_encoder": ["transformers", "CLIPTextModel"],
                "unet": ["diffusers", "UNet2DConditionModel"],
            }
        )
    )
    _tokenizer_folder(root / "tokenizer", de.SEQ)
    return root, files


def _code(call) -> str:
    with pytest.raises(NPUError) as err:
        call()
    return err.value.code


def test_tokenizer_ids_are_transformers(tmp_path):
    from tvm_npu.diffusion.tokenizer import CLIPTokenizer

    ref = _tokenizer_folder(tmp_path / "tok", 16)
    ours = CLIPTokenizer(tmp_path / "tok", 16)
    for text in ("a photo of a cat", "An  Astronaut riding a horse", "oil painting, 4k", "", "cat"):
        want = ref(text, padding="max_length", max_length=16).input_ids
        assert ours.encode(text) == want, text
    with pytest.raises(NPUError, match="shorten it") as err:
        ours.encode(" ".join(["zebra"] * 10))
    assert err.value.code == "ERR_INVALID_CONFIG"
    # the older layout (vocab.json + merges.txt, SD 1.5's repositories): our own CLIP pipeline of them
    old = tmp_path / "old"
    old.mkdir()
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(tmp_path / "tok_raw" / f, old / f)
    (old / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 16, "pad_token": "<|endoftext|>"}))
    built = CLIPTokenizer(old, 16)
    assert built._tok is not None and not (old / "tokenizer.json").exists()
    for text in ("a photo of a cat", "An  Astronaut riding a horse", "oil painting, 4k", "", "cat zebra!"):
        assert built.encode(text) == ref(text, padding="max_length", max_length=16).input_ids, text


@pytest.fixture(scope="module")
def folder_pipe(sd_folder):
    return diffusion.compile(str(sd_folder[0]))


def test_folder_compiles_to_onnxruntimes_image(sd_folder, folder_pipe):
    from diffusion.test_pipeline import GUIDANCE, SEED, STEPS, _onnxruntime_image, _psnr

    root, files = sd_folder
    pipe = folder_pipe
    ids = np.array(pipe.tokenizer.encode("a cat"))
    neg = np.array(pipe.tokenizer.encode(""))
    image = pipe.generate(prompt="a cat", steps=STEPS, guidance=GUIDANCE, seed=SEED)
    ref = _onnxruntime_image([files["text_encoder"], files["unet"], files["vae_decoder"]], ids, neg)
    assert ref.std() > 5 and _psnr(image, ref) >= 35.0, _psnr(image, ref)
    assert _code(lambda: pipe.generate(prompt=" ".join(["cat"] * 9), steps=STEPS)) == "ERR_INVALID_CONFIG"


def test_bad_folders(sd_folder, tmp_path):
    root, _ = sd_folder
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    index = json.loads((bad / "model_index.json").read_text())
    (bad / "model_index.json").write_text(json.dumps({**index, "scheduler": ["diffusers", "PNDMScheduler"]}))
    assert _code(lambda: diffusion.compile(str(bad))) == "ERR_INVALID_CONFIG"
    (bad / "model_index.json").write_text(json.dumps(index))
    os.remove(bad / "tokenizer" / "tokenizer_config.json")
    with pytest.raises(NPUError, match="tokenizer_config.json") as err:
        diffusion.compile(str(bad))
    assert err.value.code == "ERR_INVALID_MODEL"
    shutil.rmtree(bad / "unet")
    with pytest.raises(NPUError, match="unet/model.onnx") as err:
        diffusion.compile(str(bad))
    assert err.value.code == "ERR_INVALID_MODEL"


def test_diffuse_takes_a_folder_and_a_text_prompt(sd_folder, folder_pipe, tmp_path, monkeypatch, capsys):
    """`tvm-npu diffuse FOLDER --prompt TEXT` writes generate(prompt=TEXT)'s image (the pipeline compiled
    once for the module: compile is handed the folder, and only the folder)."""
    from PIL import Image

    from tvm_npu.tools.cli import main

    root, _ = sd_folder
    seen = []
    monkeypatch.setattr(diffusion, "compile", lambda *a, **k: seen.append(a) or folder_pipe)
    out = tmp_path / "cat.png"
    argv = ["diffuse", str(root), "--prompt", "a cat", "--steps", "2", "--seed", "1", "-o", str(out)]
    assert main(argv) == 0
    assert seen == [(str(root),)]
    want = folder_pipe.generate(prompt="a cat", negative_prompt="", steps=2, guidance=7.5, seed=1)
    assert np.array_equal(np.asarray(Image.open(out)), want)
    assert main([*argv[:-2], "--prompt-ids", "1,2", "-o", str(out)]) == 2  # text and ids: refused
    assert "ERR_INVALID_CONFIG" in capsys.readouterr().err
