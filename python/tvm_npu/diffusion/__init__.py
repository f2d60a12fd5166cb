"""Image generation: a Stable-Diffusion-shaped pipeline (text encoder and UNet on the NPU, the VAE
decoder on the CPU), its DDIM sampler in numpy and the thermal policy the denoising loop obeys
(docs/diffusion.md)."""

from .pipeline import Pipeline, compile, load
from .scheduler import DDIM
from .thermal_steps import StepPolicy, ThermalLoop
