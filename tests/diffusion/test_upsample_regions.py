"""diffusers' Upsample2D (F.interpolate(scale_factor=2, mode="nearest") -> ONNX Resize, asymmetric + floor)
on the NPU (issue 34): in the tiny VAE decoder and UNet every resize runs as npu.resize, in the region of
the conv that follows it, so an up block no longer cuts the NPU region in two. The VAE test measures
before -> after in one session by refusing factor 2 (resize_constraints.MAX_FACTOR = 1: the partition as it
was); so measured, the VAE decoder goes from 133 to 134 of 156 ops on the NPU, 8 to 7 NPU regions and
167,936 to 126,976 boundary bytes; the UNet (after only here, its builds are slow) 378 -> 379 of 476 ops,
43 -> 42 regions, 1,370,752 -> 1,350,272 boundary bytes."""

import tvm_npu
from tvm_npu.frontend import diffusion
from tvm_npu.partition import resize_constraints

from .reference import assert_close, feeds, npu, onnxruntime


def _resizes(report):
    return [p for p in report.placements if p.op == "relax.image.resize2d"]


def _assert_in_conv_regions(report):
    resizes = _resizes(report)
    assert resizes and all(p.device == "npu" and p.composite == "npu.resize" for p in resizes), report.table()
    conv_regions = {p.region for p in report.placements if p.op == "relax.nn.conv2d" and p.device == "npu"}
    assert all(p.region in conv_regions for p in resizes), report.table()
    return resizes


def test_vae_decoder_upsamples_on_the_npu(diffusers_export, monkeypatch):
    path = diffusers_export("vae_decoder")
    mod = diffusion.from_onnx(path, batch=1, latent=8)
    before = tvm_npu.BuildReport()
    with monkeypatch.context() as m:
        m.setattr(resize_constraints, "MAX_FACTOR", 1)
        tvm_npu.build(mod, target="npu", report=before)
    assert [p.device for p in _resizes(before)] == ["cpu"] * len(_resizes(before))
    inputs = feeds(path)
    after = tvm_npu.BuildReport()
    got = npu(mod, inputs, after)
    resizes = _assert_in_conv_regions(after)
    cpu = [sum(p.device == "cpu" for p in r.placements) for r in (before, after)]
    regions = [r.fallback_cost()["regions"] for r in (before, after)]
    assert cpu[1] == cpu[0] - len(resizes), (cpu, regions)
    assert regions[1] == regions[0] - len(resizes), (cpu, regions)
    assert_close(got, onnxruntime(path, inputs))


def test_unet_upsamples_on_the_npu(diffusers_export):
    path = diffusers_export("unet")
    report = tvm_npu.BuildReport()
    tvm_npu.build(diffusion.from_onnx(path, batch=1, latent=8), target="npu", report=report)
    _assert_in_conv_regions(report)
