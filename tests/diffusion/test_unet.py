"""diffusers' UNet2DConditionModel (tiny, seeded) built for the NPU against onnxruntime on the same file:
the static export at batch 1 through the plain tvm_npu.from_onnx (the shape arithmetic of the GEGLU's
chunk folded on need, frontend/shape_fold.py: before, the build failed with an uncoded AssertionError),
and the export with dynamic axes specialised to batch 2 (classifier-free guidance) and a latent of 4 by
frontend/diffusion.py."""

import numpy as np

import tvm_npu
from tvm_npu.frontend import diffusion, shape_fold

from .reference import assert_close, feeds, npu, onnxruntime, placement


def test_static_unet_batch1_matches_onnxruntime(diffusers_export):
    path = diffusers_export("unet")
    mod = tvm_npu.from_onnx(path)
    assert shape_fold.unknown_shapes(mod) == 0
    inputs = feeds(path)
    report = tvm_npu.BuildReport()
    err = assert_close(npu(mod, inputs, report), onnxruntime(path, inputs))
    print(f"UNet batch 1: max error {err:.2e}; {placement(report)}")
    assert report.mac_percent() >= 99.0


def test_dynamic_unet_at_batch2_matches_onnxruntime(diffusers_export):
    """Batch 2 and a latent of 4x4, not the 8x8 the export was traced at: both fixed by the import."""
    path = diffusers_export("unet", dynamic=True)
    mod = diffusion.from_onnx(path, batch=2, latent=4)
    rng = np.random.default_rng(0)
    inputs = {
        "sample": rng.standard_normal((2, 4, 4, 4)).astype(np.float32),
        "timestep": np.full((2,), 321.0, np.float32),  # one step: both halves of the guidance batch
        "encoder_hidden_states": rng.standard_normal((2, 8, 32)).astype(np.float32),
    }
    report = tvm_npu.BuildReport()
    got = npu(mod, inputs, report)
    want = onnxruntime(path, inputs)
    assert want.shape == (2, 4, 4, 4)
    err = assert_close(got, want)
    print(f"UNet batch 2, latent 4: max error {err:.2e}; {placement(report)}")
    # One region (issue 34: at most 4): each ResNet block's per-image time embedding [2, C, 1, 1] is an
    # ELTWISE b read at its image's row (tests/backend/test_per_image_bias.py); before, 10 regions.
    assert report.fallback_cost()["regions"] == 1, report.table()
