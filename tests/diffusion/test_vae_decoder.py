"""The decoder of diffusers' AutoencoderKL (tiny, seeded; AutoencoderKL.decode), exported at static
shapes, built for the NPU: the image against onnxruntime on the same file.

Its mid-block attention split it into 7 NPU regions; with its 3-D GroupNorm as the map's
(group_norm_forms/channels_by_length.py), its tokens views as the pixels-as-rows permute
(rewrite/tokens_view.py) and its float-to-float cast dropped (rewrite/identity_casts.py), 5. What still
splits it: the attention scale's sqrt of a shape constant (CPU until the frontend folds it: then 3) and the
two 32-channel permutes (a pixel of 64 bytes, not a whole aligned row: NPU_E_LAYOUT)."""

import tvm_npu
from tvm_npu.frontend import diffusion

from .reference import assert_close, feeds, npu, onnxruntime, placement


def test_vae_decoder_matches_onnxruntime(diffusers_export):
    path = diffusers_export("vae_decoder")
    inputs = feeds(path)
    report = tvm_npu.BuildReport()
    got = npu(diffusion.from_onnx(path, batch=1, latent=8), inputs, report)
    assert got.shape == (1, 3, 16, 16)
    err = assert_close(got, onnxruntime(path, inputs))
    print(f"VAE decoder: max error {err:.2e}; {placement(report)}")
    assert report.mac_percent() >= 99.0
    assert report.fallback_cost()["regions"] <= 5, report.table()
    cpu = {p.op for p in report.placements if p.device != "npu"}
    assert not cpu & {"relax.nn.layer_norm", "relax.astype"}, report.table()  # the GroupNorm and the cast
    # the attention's scale 1 / sqrt(Shape(q)[-1]) is a constant (frontend/static_fold.py, issue 34)
    assert not [p for p in report.placements if p.op == "relax.sqrt"]
