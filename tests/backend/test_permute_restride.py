"""backend/plan/restride_plan.py: a permute_dims between an NCHW map and its pixels as rows whose pixel
does not fill whole aligned rows (C x 2 bytes not a multiple of 128: 32 and 40 fp16 channels) is one
strided POOL 1x1 copy per band of map rows on the NPU, map pitch <-> token rows, bit-exact. Checked
against numpy on the permute alone (its output is the copy, nothing else rounds), against onnxruntime
on a transformer-like block, and on diffusers' tiny UNet: its 6 such permutes no longer split it
(7 NPU regions before, 1 now). A pixel narrower than POOL's 16-byte pixel stride still stays on the CPU
with its reason."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu


def _permute_module(shape, axes):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.permute_dims(x, axes))
        bb.emit_func_output(y)
    return bb.get()


def _run(shape, axes):
    # fp16 values in the float32 host form: the NPU's copy must return each of them exactly
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float16).astype(np.float32)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(_permute_module(shape, axes), target="npu", report=report)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return x, got, report


@pytest.mark.parametrize("c", [32, 40])
@pytest.mark.parametrize("n", [1, 2])
def test_narrow_map_to_tokens_is_a_bit_exact_npu_copy(c, n):
    x, got, report = _run((n, c, 4, 6), [0, 2, 3, 1])
    assert [p.device for p in report.placements] == ["npu"], report.table()
    np.testing.assert_array_equal(got, np.transpose(x, (0, 2, 3, 1)))


@pytest.mark.parametrize("c", [32, 40])
@pytest.mark.parametrize("n", [1, 2])
def test_narrow_tokens_to_map_is_a_bit_exact_npu_copy(c, n):
    x, got, report = _run((n, 4, 6, c), [0, 3, 1, 2])
    assert [p.device for p in report.placements] == ["npu"], report.table()
    np.testing.assert_array_equal(got, np.transpose(x, (0, 3, 1, 2)))


def test_pixel_below_pools_16_byte_stride_stays_on_the_cpu_with_its_reason():
    x, got, report = _run((1, 12, 4, 6), [0, 2, 3, 1])  # 24 bytes a pixel
    (p,) = report.placements
    assert p.device == "cpu" and p.code == "NPU_E_LAYOUT", report.table()
    assert "24 bytes a pixel, neither a multiple of 128 nor of 16" in p.reason
    np.testing.assert_array_equal(got, np.transpose(x, (0, 2, 3, 1)))


def test_other_permutations_stay_on_the_cpu_with_their_reason():
    _, _, report = _run((1, 32, 4, 6), [0, 1, 3, 2])
    (p,) = report.placements
    assert p.device == "cpu" and "axes [0, 1, 3, 2]" in p.reason, report.table()


def test_block_with_narrow_pixels_is_one_region_matching_onnxruntime():
    from test_permute_view import _build_and_compare, block_model

    for c in (32, 40):
        report = _build_and_compare(block_model(c), (1, c, 4, 6))
        assert all(p.device == "npu" for p in report.placements), report.table()
        assert report.fallback_cost()["regions"] == 1


def test_tiny_unet_is_one_npu_region_matching_onnxruntime(tmp_path):
    pytest.importorskip("torch", reason="needs torch to export the UNet (pip install '.[diffusion]')")
    pytest.importorskip("diffusers", reason="needs diffusers for the UNet (pip install '.[diffusion]')")
    from diffusion.reference import assert_close, feeds, npu, onnxruntime
    from tvm_npu.models import diffusers_export

    path = diffusers_export.export_unet(str(tmp_path / "unet.onnx"))
    inputs = feeds(path)
    report = tvm_npu.BuildReport()
    err = assert_close(npu(tvm_npu.from_onnx(path), inputs, report), onnxruntime(path, inputs))
    permutes = [p for p in report.placements if p.op == "relax.permute_dims"]
    assert permutes and all(p.device == "npu" for p in permutes), report.table()
    assert {p.composite for p in permutes} == {"npu.permute_view", "npu.matmul_heads"}
    assert report.fallback_cost()["regions"] == 1, (err, report.table())  # 7 before restride_plan.py
