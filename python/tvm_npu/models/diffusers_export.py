"""The three models of a Stable-Diffusion-shaped pipeline, tiny and with seeded weights, exported to ONNX
the way users export them: transformers' `CLIPTextModel`, diffusers' `UNet2DConditionModel` and the
decoder of diffusers' `AutoencoderKL`, each by `torch.onnx.export` at opset 17 (docs/diffusion.md).

torch, transformers and diffusers are the optional extra `diffusion` (with `llm`); they are imported
inside the functions only, never by the rest of tvm_npu. Nothing is downloaded: the weights are random,
seeded by `torch.manual_seed`, so the same call writes the same file.

The exporter is torch.onnx's TorchScript one (`dynamo=False`), though torch 2.13's default is
`dynamo=True`: it is what diffusers' and optimum's ONNX conversion scripts and most user scripts of
Stable Diffusion call, and what writes the shape arithmetic (Shape -> Gather -> Expand of the timestep,
Reshape of computed shapes) that frontend/diffusion.py folds. Static shapes by default (no dynamic
axes), as the issue's user exports them; `dynamic=True` names batch, height and width symbolic, as
diffusers' conversion script does, for frontend/diffusion.py to specialise.
"""

from __future__ import annotations

import os

# The tiny sizes: one cross-attention down block and one plain, 8 groups per GroupNorm, a latent of 8x8x4,
# a prompt of 8 tokens of width 32.
SEQ = 8
TEXT_WIDTH = 32
LATENT = 8
LATENT_CHANNELS = 4
VOCAB = 100


def text_encoder(seed: int = 0, vocab: int = VOCAB, bos_eos: tuple[int, int] | None = None):
    """transformers' CLIPTextModel (2 layers, width 32, 4 heads, 8 positions), seeded, eval mode; `bos_eos`
    the begin / end token ids (default the vocabulary's last two)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.CLIPTextConfig(
        vocab_size=vocab,
        hidden_size=TEXT_WIDTH,
        intermediate_size=2 * TEXT_WIDTH,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=SEQ,
        # CLIP's defaults (49406, 49407) lie outside a tiny vocabulary
        bos_token_id=(bos_eos or (vocab - 2, vocab - 1))[0],
        eos_token_id=(bos_eos or (vocab - 2, vocab - 1))[1],
        pad_token_id=1,
        attn_implementation="eager",
    )
    return transformers.CLIPTextModel(config).eval()


def unet(seed: int = 0, sample_size: int = LATENT):
    """diffusers' UNet2DConditionModel: block_out_channels (32, 64), one layer per block, cross-attention
    to width-32 text, heads of 8 channels at both widths (4 heads at 32, 8 at 64: diffusers' attention_head_dim
    is the head count; 8 fp16 channels are the 16-byte head slices MATMUL addresses, format 1.8), 8 GroupNorm
    groups; seeded, eval mode."""
    import diffusers
    import torch

    torch.manual_seed(seed)
    return diffusers.UNet2DConditionModel(
        sample_size=sample_size,
        in_channels=LATENT_CHANNELS,
        out_channels=LATENT_CHANNELS,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        cross_attention_dim=TEXT_WIDTH,
        attention_head_dim=(4, 8),
        norm_num_groups=8,
    ).eval()


def vae(seed: int = 0):
    """diffusers' AutoencoderKL: block_out_channels (16, 32), one layer per block, 8 GroupNorm groups,
    4 latent channels (an 8x8 latent decodes to a 16x16 image); seeded, eval mode."""
    import diffusers
    import torch

    torch.manual_seed(seed)
    return diffusers.AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(16, 32),
        layers_per_block=1,
        latent_channels=LATENT_CHANNELS,
        norm_num_groups=8,
        sample_size=2 * LATENT,
    ).eval()


def _export(module, args: tuple, path: str, inputs: list, outputs: list, axes: dict | None) -> str:
    """torch.onnx.export (TorchScript exporter, opset 17) to a temporary file beside `path`, renamed."""
    import torch

    tmp = path + ".part"
    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            tmp,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    os.replace(tmp, path)
    return path


def export_text_encoder(
    path: str, batch: int = 1, seed: int = 0, vocab: int = VOCAB, bos_eos: tuple[int, int] | None = None
) -> str:
    """The text encoder to `path`: input `input_ids` [batch, 8] int64, output `last_hidden_state`
    [batch, 8, 32] (the UNet's encoder_hidden_states); `vocab` and `bos_eos` as text_encoder's."""
    import torch

    model = text_encoder(seed, vocab, bos_eos)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids).last_hidden_state

    ids = torch.randint(0, vocab, (batch, SEQ), generator=torch.Generator().manual_seed(seed))
    return _export(Encoder(), (ids,), path, ["input_ids"], ["last_hidden_state"], None)


def export_unet(path: str, batch: int = 1, latent: int = LATENT, seed: int = 0, dynamic: bool = False) -> str:
    """The UNet to `path`: inputs `sample` [batch, 4, latent, latent], `timestep` [batch] float32 (as
    diffusers' conversion script), `encoder_hidden_states` [batch, 8, 32]; output `out_sample`. With
    `dynamic`, batch, height and width are symbolic (diffusers' script's dynamic_axes)."""
    import torch

    model = unet(seed, latent)

    class Denoiser(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, sample, timestep, encoder_hidden_states):
            return self.model(sample, timestep, encoder_hidden_states, return_dict=False)[0]

    g = torch.Generator().manual_seed(seed)
    args = (
        torch.randn(batch, LATENT_CHANNELS, latent, latent, generator=g),
        torch.full((batch,), 981.0),
        torch.randn(batch, SEQ, TEXT_WIDTH, generator=g),
    )
    axes = None
    if dynamic:
        axes = {"sample": {0: "batch", 2: "height", 3: "width"}, "timestep": {0: "batch"}}
        axes.update({"encoder_hidden_states": {0: "batch"}, "out_sample": {0: "batch", 2: "height", 3: "width"}})
    inputs = ["sample", "timestep", "encoder_hidden_states"]
    return _export(Denoiser(), args, path, inputs, ["out_sample"], axes)


def export_vae_decoder(path: str, batch: int = 1, latent: int = LATENT, seed: int = 0) -> str:
    """The VAE's decoder (post_quant_conv + decoder, AutoencoderKL.decode) to `path`: input
    `latent_sample` [batch, 4, latent, latent], output `sample` [batch, 3, 2 latent, 2 latent]."""
    import torch

    model = vae(seed)

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, latent_sample):
            return self.model.decode(latent_sample, return_dict=False)[0]

    z = torch.randn(batch, LATENT_CHANNELS, latent, latent, generator=torch.Generator().manual_seed(seed))
    return _export(Decoder(), (z,), path, ["latent_sample"], ["sample"], None)
