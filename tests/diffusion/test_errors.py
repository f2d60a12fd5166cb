"""Bad input to the diffusers import: coded NPUErrors, never a traceback from inside TVM (no build
needed: the checks run before the import)."""

import pytest

import tvm_npu
from tvm_npu.frontend import diffusion


def _code(call) -> str:
    with pytest.raises(tvm_npu.NPUError) as err:
        call()
    return err.value.code


def test_latent_other_than_the_static_sample_size(diffusers_export):
    path = diffusers_export("unet")  # static, sample size 8
    with pytest.raises(tvm_npu.NPUError, match="latent height 8 .static., not the 16") as err:
        diffusion.from_onnx(path, batch=1, latent=16)
    assert err.value.code == "ERR_SHAPE_MISMATCH"
    assert _code(lambda: diffusion.from_onnx(path, batch=2)) == "ERR_SHAPE_MISMATCH"


def test_latent_the_unet_cannot_take(diffusers_export):
    path = diffusers_export("unet", dynamic=True)
    # one down-sampling: an odd latent gives skip connections of 4 and 3 rows
    with pytest.raises(tvm_npu.NPUError, match="divisible by its down-sampling factor") as err:
        diffusion.from_onnx(path, batch=1, latent=7)
    assert err.value.code == "ERR_SHAPE_MISMATCH"


def test_symbolic_dims_need_the_sizes(diffusers_export):
    path = diffusers_export("unet", dynamic=True)
    assert _code(lambda: diffusion.from_onnx(path, latent=8)) == "ERR_INVALID_CONFIG"  # batch missing
    assert _code(lambda: diffusion.from_onnx(path, batch=1)) == "ERR_INVALID_CONFIG"  # latent missing


@pytest.mark.parametrize("kwargs", [dict(batch=0), dict(batch=1.5), dict(batch=True), dict(latent=(8, -8))])
def test_bad_sizes(diffusers_export, kwargs):
    path = diffusers_export("unet", dynamic=True)
    assert _code(lambda: diffusion.from_onnx(path, **dict(dict(batch=1, latent=8), **kwargs))) == "ERR_INVALID_CONFIG"


def test_latent_for_a_model_without_one(diffusers_export):
    path = diffusers_export("text_encoder")
    assert _code(lambda: diffusion.from_onnx(path, latent=8)) == "ERR_INVALID_CONFIG"


def test_not_onnx(tmp_path):
    bad = tmp_path / "unet.onnx"
    bad.write_bytes(b"not a model")
    assert _code(lambda: diffusion.from_onnx(str(bad), batch=1)) == "ERR_INVALID_MODEL"
