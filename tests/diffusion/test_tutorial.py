"""tutorials/stable_diffusion.py as a user runs it (--quick): the guided image against onnxruntime with
diffusers' sampler, the PNG written, the hot die's run cut (issue 34)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_stable_diffusion_tutorial_writes_onnxruntimes_image(tmp_path):
    for module in ("torch", "transformers", "diffusers"):
        pytest.importorskip(module, reason=f"needs {module} (pip install '.[llm,diffusion]')")
    from PIL import Image

    res = subprocess.run(
        [sys.executable, str(ROOT / "tutorials" / "stable_diffusion.py"), "--quick", "--out", str(tmp_path / "sd")],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "sd" / "summary.json").read_text())
    assert summary["psnr_db"] >= 35.0
    assert len(summary["profile"]["steps"]) == 4 and summary["profile"]["encode_cycles"] > 0
    assert summary["hot_steps"] == 15 and summary["placements"]["denoise"] > 0
    image = Image.open(tmp_path / "sd" / "image.png")
    assert image.size == (8, 8) and image.mode == "RGB"
    assert "against onnxruntime + diffusers' DDIMScheduler: PSNR" in res.stdout
