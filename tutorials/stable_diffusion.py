"""Image generation on the NPU: a Stable-Diffusion-shaped text encoder + UNet on the NPU, the VAE decoder
on the CPU, a DDIM denoising loop that listens to the thermal policy.

The three models are transformers' CLIPTextModel and diffusers' UNet2DConditionModel and AutoencoderKL,
built from small configs with seeded random weights (nothing is downloaded; a real model's ONNX files
work the same way) and exported as users export them (torch.onnx.export, static shapes, opset 17).
`tvm_npu.diffusion.compile` builds them into one pipeline; the tutorial runs a guided generation,
checks the image against the same loop run with onnxruntime and diffusers' own DDIMScheduler, writes
the PNG, prints the cycles per stage and per step, and runs once more on a hot die, whose thermal policy
cuts the steps.

Needs the optional extras: pip install ".[llm,diffusion,test]"   (torch, transformers, diffusers; onnxruntime)
Run: python tutorials/stable_diffusion.py [--quick] [--out DIR]
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

import tvm_npu.diffusion
from tvm_npu.models import diffusers_export

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true", help="4 steps and a 4x4 latent (the test's run)")
parser.add_argument("--out", default="sd_out", help="folder for the exports, image.png and summary.json")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
steps, latent, guidance, seed = (4, 4, 7.5, 0) if args.quick else (20, 8, 7.5, 0)

# Step 1: the three ONNX files. Batch 2: classifier-free guidance runs the negative and the real prompt
# together through the text encoder and the UNet.
files = (
    diffusers_export.export_text_encoder(str(out / "text_encoder.onnx"), batch=2),
    diffusers_export.export_unet(str(out / "unet.onnx"), batch=2, latent=latent),
    diffusers_export.export_vae_decoder(str(out / "vae_decoder.onnx"), latent=latent),
)

# Step 2: one pipeline. Text encoder + UNet become one NPU library (the UNet's cross-attention K / V of
# the prompt an entry of its own, run once per image); the VAE decoder is built for the CPU.
pipe = tvm_npu.diffusion.compile(*files)
for entry, placements in pipe.meta["placements"].items():
    npu = sum(p["device"] == "npu" for p in placements)
    print(f"{entry}: {npu} of {len(placements)} ops on the NPU")

# Step 3: a prompt's ids as the tokenizer writes them (bos, tokens, eos, padded to the 8 positions) and
# the empty prompt's, the negative of plain classifier-free guidance.
bos, eos, pad = diffusers_export.VOCAB - 2, diffusers_export.VOCAB - 1, 1
prompt = np.array([bos, 12, 40, 7, 55, eos, pad, pad])
empty = np.array([bos, eos, pad, pad, pad, pad, pad, pad])
image = pipe.generate(prompt, steps=steps, guidance=guidance, seed=seed, negative_ids=empty)
Image.fromarray(image).save(out / "image.png")
prof = pipe.profile()
print(f"wrote {out / 'image.png'} ({image.shape[1]}x{image.shape[0]})")
print(
    f"text encoder: {prof['encode_cycles']} NPU cycles; prompt K / V (once): {prof['prompt_cycles']}; "
    f"UNet: {prof['denoise_cycles']} over {steps} steps"
)
for s in prof["steps"]:
    print(f"  step {s['step']} (t={s['t']}): {s['cycles']} cycles")


# Step 4: the reference, onnxruntime on the same files with diffusers' own sampler.
def onnxruntime_image() -> np.ndarray:
    import diffusers
    import onnxruntime as ort
    import torch

    te, unet, vae = (ort.InferenceSession(f, providers=["CPUExecutionProvider"]) for f in files)
    emb = te.run(None, {"input_ids": np.stack([empty, prompt]).astype(np.int64)})[0]
    sched = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                    clip_sample=False, set_alpha_to_one=False, steps_offset=1)  # fmt: skip
    sched.set_timesteps(steps)
    x = np.random.default_rng(seed).standard_normal((1, 4, latent, latent)).astype(np.float32)
    for t in sched.timesteps:
        feed = {"sample": np.concatenate([x, x]), "timestep": np.full(2, float(t), np.float32),
                "encoder_hidden_states": emb}  # fmt: skip
        eps = unet.run(None, feed)[0]
        eps = eps[:1] + guidance * (eps[1:] - eps[:1])
        x = sched.step(torch.from_numpy(eps), t, torch.from_numpy(x)).prev_sample.numpy()
    dec = vae.run(None, {"latent_sample": x / 0.18215})[0]
    return (np.clip(dec[0] / 2 + 0.5, 0, 1).transpose(1, 2, 0) * 255).round().astype(np.uint8)


ref = onnxruntime_image()
mse = float(np.mean((image.astype(np.float64) - ref) ** 2))
psnr = math.inf if mse == 0 else 10 * math.log10(255**2 / mse)
print(f"against onnxruntime + diffusers' DDIMScheduler: PSNR {psnr:.1f} dB")

# Step 5: the same request on a die that is already hot (80 C): the policy lowers the clock and cuts the
# remaining steps by 5 (never below 10 in all).
pipe.generate(prompt, steps=20, guidance=guidance, seed=seed, negative_ids=empty,
              thermal_policy=tvm_npu.diffusion.StepPolicy(), start_c=80.0)  # fmt: skip
hot = pipe.profile()["thermal"]
print(f"hot die: {len(hot)} of 20 steps run, at {hot[0]['mhz']:.0f} MHz (cut {hot[0]['cut']} at step 0)")

on_npu = {e: sum(p["device"] == "npu" for p in v) for e, v in pipe.meta["placements"].items()}
summary = {"psnr_db": psnr, "steps": steps, "profile": prof, "hot_steps": len(hot), "hot_mhz": hot[0]["mhz"],
           "placements": on_npu}  # fmt: skip
(out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
