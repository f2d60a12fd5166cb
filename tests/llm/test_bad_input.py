"""Bad input to tvm_npu.llm: a coded NPUError, and the cache and the sequence left as they were."""

import numpy as np
import pytest

import tvm_npu
from llm.reference import T
from tvm_npu.models.decoder import gpt2_step


def _state(lm):
    return lm.length, [c.copy() for c in lm.cache()]


def _unchanged(lm, before):
    length, cache = before
    assert lm.length == length
    assert all(np.array_equal(a, b) for a, b in zip(lm.cache(), cache))


CASES = {
    "prompt longer than max_context": ("prefill", np.zeros(T + 1, np.int64), "ERR_LLM_CONTEXT"),
    "prompt token >= vocab": ("prefill", np.array([1, 256, 3]), "ERR_LLM_TOKEN"),
    "prompt token < 0": ("prefill", np.array([-1]), "ERR_LLM_TOKEN"),
    "float prompt": ("prefill", np.array([1.0, 2.0]), "ERR_SHAPE_MISMATCH"),
    "2-D prompt": ("prefill", np.ones((1, 3), np.int64), "ERR_SHAPE_MISMATCH"),
    "empty prompt": ("prefill", np.zeros(0, np.int64), "ERR_SHAPE_MISMATCH"),
    "decode token >= vocab": ("decode", 256, "ERR_LLM_TOKEN"),
    "decode token < 0": ("decode", -3, "ERR_LLM_TOKEN"),
    "decode float token": ("decode", 2.0, "ERR_SHAPE_MISMATCH"),
    "decode array token": ("decode", np.array([1, 2]), "ERR_SHAPE_MISMATCH"),
    "generate past max_context": ("generate", np.arange(40), "ERR_LLM_CONTEXT"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_coded_and_leaves_the_cache(lm, case):
    method, arg, code = CASES[case]
    lm.prefill(np.array([5, 6, 7]))
    lm.decode(9)
    before = _state(lm)
    with pytest.raises(tvm_npu.NPUError) as info:
        if method == "generate":
            lm.generate(arg, max_new_tokens=8)  # 40 + 8 - 1 rows > 44
        else:
            getattr(lm, method)(arg)
    assert info.value.code == code, str(info.value)
    _unchanged(lm, before)
    assert lm.decode(10).shape == (lm.vocab,)  # the sequence goes on


def test_decode_before_prefill(lm):
    before = _state(lm)
    with pytest.raises(tvm_npu.NPUError) as info:
        lm.decode(1)
    assert info.value.code == "ERR_LLM_STATE"
    _unchanged(lm, before)


def test_decode_past_max_context(lm):
    lm.prefill(np.arange(T))
    before = _state(lm)
    with pytest.raises(tvm_npu.NPUError) as info:
        lm.decode(1)
    assert info.value.code == "ERR_LLM_CONTEXT" and str(T) in str(info.value)
    _unchanged(lm, before)


@pytest.mark.parametrize("kw", [dict(weights="int2"), dict(weights="int4", group_size=48)])
def test_unknown_weights_dtype_or_group_is_refused(kw):
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.compile(gpt2_step, max_context=16, **kw)
    assert info.value.code == "ERR_INVALID_CONFIG" and str(list(kw.values())[-1]) in str(info.value)


def test_max_context_other_than_the_step_models():
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.compile(gpt2_step(seq_len=1, max_context=16), max_context=32)
    assert info.value.code == "ERR_LLM_CONTEXT"


def test_step_model_without_metadata():
    model = gpt2_step(seq_len=1, max_context=16)
    del model.metadata_props[:]
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.compile(model)
    assert info.value.code == "ERR_INVALID_MODEL" and "tvm_npu.step" in str(info.value)


def test_prefill_bucket_longer_than_max_context():
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.compile(gpt2_step, max_context=16, prefill_len=17)
    assert info.value.code == "ERR_LLM_CONTEXT" and "17" in str(info.value)
