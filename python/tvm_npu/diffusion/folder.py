"""A Stable Diffusion folder as optimum's ONNX exporter writes it (`optimum-cli export onnx --model
<diffusers folder> out/`): model_index.json, text_encoder/model.onnx, unet/model.onnx (+ model.onnx_data
for big models), vae_decoder/model.onnx, each with its config.json, tokenizer/ and
scheduler/scheduler_config.json.

`read(folder)` checks the parts and returns what `compile` needs: the three ONNX models with the text
encoder's sequence axis (dynamic in optimum's exports) fixed to its max_position_embeddings, the
scheduler, the VAE's scaling factor and the tokenizer. What is missing or not runnable is a coded error
naming the file and what to change.
"""

from __future__ import annotations

import os

import onnx

from ..contract.errors import NPUError
from .config_json import read_json
from .scheduler import DDIM

PARTS = ("text_encoder", "unet", "vae_decoder")
SCHEDULERS = ("DDIMScheduler",)  # samplers this pipeline runs exactly (scheduler.py)


def is_folder(path) -> bool:
    return isinstance(path, str | os.PathLike) and os.path.isfile(os.path.join(path, "model_index.json"))


def _pin(model: onnx.ModelProto, name: str, axis: int, value: int) -> None:
    """Fix a symbolic dim of input `name` (optimum's "sequence_length") to `value`."""
    for vi in model.graph.input:
        if vi.name == name and len(vi.type.tensor_type.shape.dim) > axis:
            dim = vi.type.tensor_type.shape.dim[axis]
            if not dim.HasField("dim_value"):
                dim.Clear()
                dim.dim_value = value


def read(folder, scheduler: DDIM | None = None) -> dict:
    """{"text_encoder", "unet", "vae_decoder": ModelProto, "scheduler": DDIM, "vae_scaling_factor",
    "positions", "tokenizer": tokenizer folder}; NPUError for a part missing or not runnable."""
    folder = os.fspath(folder)
    index = read_json(os.path.join(folder, "model_index.json"))
    if "text_encoder_2" in index or "transformer" in index:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"{folder}: a {index.get('_class_name', '?')} (SDXL / SD3: two text encoders or a transformer); "
            "this pipeline runs Stable Diffusion 1.x / 2.x (one CLIP text encoder, a UNet)",
        )
    need = [f"{p}/model.onnx" for p in PARTS] + [f"{p}/config.json" for p in ("text_encoder", "vae_decoder")]
    need += ["scheduler/scheduler_config.json", "tokenizer"]
    missing = [n for n in need if not os.path.exists(os.path.join(folder, n))]
    if missing:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"{folder}: missing {missing}; export the whole pipeline with optimum "
            "(optimum-cli export onnx --model <diffusers folder> <out>) or pass the three ONNX files",
        )
    if scheduler is None:
        kind = (index.get("scheduler") or [None, None])[-1]
        if kind not in SCHEDULERS:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"{folder}/model_index.json: scheduler {kind!r}; this pipeline samples with DDIM only: pass "
                f"scheduler=tvm_npu.diffusion.DDIM.from_config('{folder}/scheduler/scheduler_config.json') to "
                "run DDIM on its betas (a different sampler, so a different image)",
            )
        scheduler = DDIM.from_config(os.path.join(folder, "scheduler", "scheduler_config.json"))
    te_cfg = read_json(os.path.join(folder, "text_encoder", "config.json"))
    positions = te_cfg.get("max_position_embeddings")
    if not isinstance(positions, int) or positions < 1:
        raise NPUError("ERR_INVALID_MODEL", f"{folder}/text_encoder/config.json: no max_position_embeddings")
    vae_cfg = read_json(os.path.join(folder, "vae_decoder", "config.json"))
    from ..frontend.onnx import read_model

    models = {p: read_model(os.path.join(folder, p, "model.onnx")) for p in PARTS}
    te = models["text_encoder"]
    _pin(te, te.graph.input[0].name, 1, positions)
    _pin(models["unet"], "encoder_hidden_states", 1, positions)
    return {
        **models, "scheduler": scheduler, "positions": positions,
        "vae_scaling_factor": float(vae_cfg.get("scaling_factor", 0.18215)),
        "tokenizer": os.path.join(folder, "tokenizer"),
    }  # fmt: skip
