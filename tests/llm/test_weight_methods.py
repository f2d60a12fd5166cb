"""tvm_npu.llm.compile(weights="int4", weight_method="gptq" | "awq", calibration=...) against an independent
reference: TVM llvm running the same weight-quantized decode step in its own host loop (the codes chosen
on the prefill step's calibration chunks, as llm.compile chooses them, then given to the decode step);
and the argument errors."""

import numpy as np
import pytest

import tvm_npu
from llm.reference import BUILDERS, S, T
from llm.test_int8_weights import _compiled_and_checked
from tvm_npu.contract.errors import NPUError
from tvm_npu.llm import weight_calibration
from tvm_npu.quantization import quantize_weights_int4

CALIBRATION = [np.random.default_rng(i).integers(0, 256, 40) for i in range(4)]


def _quantizer(method):
    """The decode step quantized as llm.compile does: codes from the prefill step's calibration chunks."""
    prefill = tvm_npu.from_onnx(BUILDERS["llama"](seq_len=S, max_context=T))
    info = dict(layers=2, kv_heads=2, head_dim=16, max_context=T, vocab=256, seq_len=S)
    data = weight_calibration.batches(weight_calibration.check(CALIBRATION, 256), info)
    memo: dict = {}
    quantize_weights_int4(prefill, 32, method=method, calibration_data=data, progress=False, memo=memo)
    return lambda mod: quantize_weights_int4(mod, 32, method=method, progress=False, memo=memo)[0]


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_calibrated_int4_matches_the_quantized_model(method):
    lm = _compiled_and_checked(
        "llama", _quantizer(method), weights="int4", group_size=32, weight_method=method, calibration=CALIBRATION
    )
    assert lm.meta["weight_method"] == method
    # prefill and decode hold the same codes: the runtime keeps one copy
    mem = lm.memory()
    assert mem["weights_resident_bytes"] < 0.6 * mem["weights_bytes"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(weights="int4", weight_method="spqr"), "weight_method='spqr'"),
        (dict(weights="fp16", weight_method="awq", calibration=CALIBRATION), 'pass weights="int4"'),
        (dict(weights="int4", weight_method="gptq"), "needs calibration"),
        (dict(weights="int4", weight_method="awq", calibration=np.zeros(4, np.int64)), "non-empty list"),
        (dict(weights="int4", calibration=CALIBRATION), "calibration= chooses"),
    ],
)
def test_bad_weight_method_arguments_are_coded(kwargs, match):
    with pytest.raises(NPUError, match=match) as err:
        tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S, **kwargs)
    assert err.value.code == "ERR_INVALID_CONFIG"
