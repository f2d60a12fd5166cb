"""Lowering by registry (backend/lower/): every composite of the pattern table finds the lowering of its
family, fused variants included, and a composite without one is a clear error, not a wrong layer."""

import pytest

from tvm_npu.backend.lower.registry import lowering_for
from tvm_npu.contract.errors import NPUError
from tvm_npu.partition import patterns

FAMILIES = {
    "npu.conv2d_bias_relu": "lower_conv",
    "npu.qdense_bias_clip": "lower_conv",
    "npu.qadd_relu": "lower_add",
    "npu.eltwise_multiply_clip": "lower_eltwise",
    "npu.qrequantize": "lower_requantize",
    "npu.leaky_relu": "lower_unary",
    "npu.qhardswish": "lower_unary",
    "npu.softmax": "lower_softmax",
    "npu.softmax_masked": "lower_softmax",
    "npu.softmax_scaled": "lower_softmax",
    "npu.layer_norm": "lower_norm",
    "npu.rms_norm": "lower_norm",
    "npu.qglobal_avg_pool": "lower_pool",
    "npu.qreshape": "lower_reshape",
    "npu.slice_rows": "lower_slice_rows",
    "npu.qconcat": "lower_concat",
    "npu.qoutput_reshape": "lower_staging",
}


def test_every_composite_has_a_lowering():
    names = {name for name, *_ in patterns.table()}
    assert set(FAMILIES) <= names
    for name in names:
        assert callable(lowering_for(name)), name


@pytest.mark.parametrize("name, family", sorted(FAMILIES.items()))
def test_fused_variants_find_their_family(name, family):
    assert lowering_for(name).__name__ == family


def test_unknown_composite_is_an_error():
    with pytest.raises(NPUError, match="no lowering is registered for composite npu.qfft_relu"):
        lowering_for("npu.qfft_relu")
