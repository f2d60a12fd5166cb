"""Static-shape import of diffusers exports (frontend/diffusion.py, docs/diffusion.md): the text encoder,
UNet and VAE decoder built for the NPU against onnxruntime."""
