"""The decoder of diffusers' AutoencoderKL (tiny, seeded; AutoencoderKL.decode), exported at static
shapes, built for the NPU: the image against onnxruntime on the same file."""

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
    # the attention's scale 1 / sqrt(Shape(q)[-1]) is a constant (frontend/static_fold.py, issue 34)
    assert not [p for p in report.placements if p.op == "relax.sqrt"]
