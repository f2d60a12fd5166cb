"""The prompt's cross-attention K / V computed once per image (issue 34): the pipeline with the UNet split
at encoder_hidden_states (ir/split_invariant.py) against the same loop on onnxruntime; its per-step NPU
cycles and MACs against the unsplit pipeline's, by at least the K / V dense layers' share counted from
their shapes; and the prompt entry run once per image. (The split against the unsplit UNet on TVM's
llvm build: test_split_unet_llvm.py.)"""

import numpy as np
import pytest

import tvm_npu.diffusion as diffusion
from tvm_npu import runtime
from tvm_npu.frontend import diffusion as diffusion_import

from .kv_macs import EHS, macs
from .test_pipeline import GUIDANCE, SEED, STEPS, _onnxruntime_image, _psnr


@pytest.fixture(scope="module")
def files(diffusers_export):
    return (diffusers_export("text_encoder", batch=2), diffusers_export("unet", batch=2),
            diffusers_export("vae_decoder"))  # fmt: skip


@pytest.fixture(scope="module")
def unet(files):
    return diffusion_import.from_onnx(files[1], batch=2, latent=8)


@pytest.fixture(scope="module")
def prompt():
    from tvm_npu.models import diffusers_export as de

    rng = np.random.default_rng(0)
    ids = rng.integers(2, de.VOCAB - 2, de.SEQ)
    neg = np.full(de.SEQ, 1)
    ids[0] = neg[0] = de.VOCAB - 2  # bos
    return ids, neg


@pytest.fixture(scope="module")
def pipes(files):
    return diffusion.compile(*files), diffusion.compile(*files, hoist_prompt=False)


def _step_macs(pipe) -> int:
    return sum(runtime.profile_of(m)["total"]["macs"] for m in pipe._modules["denoise"]) // STEPS


def test_the_prompt_runs_once_and_every_step_costs_less(pipes, files, prompt, unet):
    hoisted, whole = pipes
    ids, neg = prompt
    image = hoisted.generate(ids, steps=STEPS, guidance=GUIDANCE, seed=SEED, negative_ids=neg)
    after, after_macs = hoisted.profile(), _step_macs(hoisted)
    # once per image: every region of the prompt entry called once, whatever the steps
    assert hoisted.meta["entries"] == ["encode", "prompt", "denoise"]
    prompt_modules = hoisted._modules["prompt"]
    assert prompt_modules and [runtime.profile_of(m)["calls"] for m in prompt_modules] == [1] * len(prompt_modules)
    assert after["prompt_cycles"] > 0 and len(after["steps"]) == STEPS
    psnr = _psnr(image, _onnxruntime_image(files, ids, neg))
    assert psnr >= 35.0, psnr
    whole.generate(ids, steps=STEPS, guidance=GUIDANCE, seed=SEED, negative_ids=neg)
    before, before_macs = whole.profile(), _step_macs(whole)
    assert "prompt" not in whole.meta["entries"] and before["prompt_cycles"] == 0
    kv, total = macs(unet["main"], EHS), macs(unet["main"])
    assert before_macs - after_macs == kv  # the runtime's MAC count per step: exactly the K / V denses
    cyc_before, cyc_after = before["steps"][0]["cycles"], after["steps"][0]["cycles"]
    # by at least the K / V denses' share of the step's MACs
    assert cyc_before - cyc_after >= cyc_before * kv / total, (cyc_before, cyc_after, kv, total)
    assert sum(runtime.profile_of(m)["total"]["macs"] for m in hoisted._modules["prompt"]) == kv
    print(f"per-step cycles {cyc_before} -> {cyc_after} (prompt {after['prompt_cycles']} once); "
          f"K/V MACs {kv} of {total}; PSNR {psnr:.1f} dB")  # fmt: skip


def test_a_second_image_runs_the_prompt_again_once(pipes, prompt):
    hoisted, _ = pipes
    ids, neg = prompt
    calls = []
    vm = hoisted._vm

    class Counting:
        def __getitem__(self, name):
            calls.append(name)
            return vm[name]

    hoisted._vm = Counting()
    try:
        hoisted.generate(ids, steps=3, guidance=GUIDANCE, seed=0, negative_ids=neg)
        hoisted.generate(neg, steps=2, guidance=GUIDANCE, seed=0, negative_ids=neg)
    finally:
        hoisted._vm = vm
    assert calls.count("prompt") == 2 and calls.count("encode") == 2
