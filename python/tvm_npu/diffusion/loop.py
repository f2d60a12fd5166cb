"""The denoising loop: noise -> `steps` UNet calls, each followed by a DDIM step on the CPU -> latents.

Written against three callables so that the same loop runs the NPU build, TVM's CPU build or
onnxruntime (the reference a test holds the pipeline to):

    embed()                      -> the prompt's text embedding, as the UNet takes it (any array type:
                                    the NPU pipeline keeps it a device tensor, never copied to numpy)
    unet(latents [B, C, h, w], t) -> the noise prediction [B, C, h, w] (numpy)

With classifier-free guidance (B = 2: the negative prompt's row first, then the prompt's) the two
predictions combine as eps = eps_neg + guidance * (eps_prompt - eps_neg), as diffusers'
StableDiffusionPipeline does. `thermal` (a diffusion.thermal_steps.ThermalLoop) may shorten the run and
picks each step's clock; without it the plan is run as it is.
"""

from __future__ import annotations

import numpy as np

from .scheduler import DDIM


def run(unet, latents: np.ndarray, plan: np.ndarray, scheduler: DDIM, guidance: float, batch: int,
        thermal=None, on_step=None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(the final latents [1, C, h, w], the plan that ran). `on_step(i, t)` is called after each step."""
    x = np.asarray(latents, np.float32)
    i = 0
    while i < len(plan):
        if thermal is not None:
            plan, _ = thermal.begin(i, plan, scheduler.replan)
        t, s = int(plan[i, 0]), int(plan[i, 1])
        eps = np.asarray(unet(np.concatenate([x] * batch) if batch > 1 else x, t), np.float32)
        if batch == 2:
            eps = eps[0:1] + np.float32(guidance) * (eps[1:2] - eps[0:1])
        x = scheduler.step(eps, t, s, x)
        if thermal is not None:
            thermal.end()
        if on_step is not None:
            on_step(i, t)
        i += 1
    return x, plan


def to_image(decoded: np.ndarray) -> np.ndarray:
    """A VAE decoder's output [1, 3, H, W] in [-1, 1] as an image uint8 [H, W, 3] (diffusers'
    VaeImageProcessor: x / 2 + 0.5, clipped, times 255, rounded)."""
    img = np.clip(np.asarray(decoded, np.float32)[0] / 2 + 0.5, 0.0, 1.0)
    return (img.transpose(1, 2, 0) * 255).round().astype(np.uint8)
