"""Fixtures of the diffusion tests: the tiny diffusers exports (models/diffusers_export.py), written once
per session; the tests skip without torch, transformers or diffusers (pip install '.[llm,diffusion]')."""

import pytest


@pytest.fixture(scope="session")
def diffusers_export(tmp_path_factory):
    """export(name, **kwargs) -> path of the export `name` ("text_encoder", "unet", "vae_decoder") with
    those keyword arguments (batch=, dynamic=, ...), made once per session."""
    pytest.importorskip("torch", reason="needs torch to export the models (pip install '.[llm,diffusion]')")
    pytest.importorskip("transformers", reason="needs transformers for CLIPTextModel (pip install '.[llm]')")
    pytest.importorskip("diffusers", reason="needs diffusers for the UNet and VAE (pip install '.[diffusion]')")
    from tvm_npu.models import diffusers_export

    folder = tmp_path_factory.mktemp("diffusers_exports")
    made = {}

    def get(name: str, **kwargs) -> str:
        key = (name, *sorted(kwargs.items()))
        if key not in made:
            stem = "_".join([name, *(f"{k}{v}" for k, v in sorted(kwargs.items()))])
            export = getattr(diffusers_export, f"export_{name}")
            made[key] = export(str(folder / f"{stem}.onnx"), **kwargs)
        return made[key]

    return get
