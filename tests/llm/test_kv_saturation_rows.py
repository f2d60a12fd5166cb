"""The int8 KV cache's saturation counts come from the runtime's staging (its per-input "clamped_inputs",
docs/npu.md section 2), which sees every row a region call stages: a prefill chunk's padding rows and the rows
a moved last chunk writes again are staged too, and llm/kv_saturation.py takes them off (the last call's
"clamped_rows"). Against the written cache (tests/llm/test_kv_saturation.py's state count): the runtime's raw
sums are every staged row's, the LLM's only the real tokens', and both differ where those rows saturate."""

import warnings

import numpy as np

from llm.test_kv_saturation import _capture, _moved_last_chunk, _narrow, _state_count
from tvm_npu import runtime
from tvm_npu.llm import KVSaturationWarning


def _raw(lm, step: str) -> np.ndarray:
    """[L, 2, H_kv]: what each attention region's staging clamped over the step's calls, every row."""
    H = lm.meta["step"]["kv_heads"]
    mods = lm._runners[step].kv_modules
    return np.array(
        [
            np.reshape(runtime.profile_of(mods[i])["total"]["clamped_inputs"][1 : 1 + 2 * H], (2, H))
            for i in sorted(mods)
        ]
    )


def test_padding_and_rewritten_rows_are_staged_but_not_counted():
    """42 tokens (T 44, S 8): chunks at 0 .. 32, then one at 36 whose rows 36..39 are written again and whose
    rows 42, 43 are padding. The raw sums are the state's over every row written ([0, 44): the padding rows
    are in the cache until a decode overwrites them) plus rows 36..39 once more; the LLM's the state's over
    [0, 42). The padding and the rewritten rows saturate here, so counting them would show."""
    lm, calls = _moved_last_chunk()
    got = np.array(lm.profile()["prefill"]["kv_saturated"])
    real, padding, again = (_state_count(lm, calls, lo, hi) for lo, hi in ((0, 42), (42, 44), (36, 40)))
    np.testing.assert_array_equal(got, real)
    np.testing.assert_array_equal(_raw(lm, "prefill"), real + padding + again)
    assert padding.sum() > 0 and again.sum() > 0


def test_a_prompt_in_one_padded_chunk_counts_its_tokens_only():
    """3 tokens in one chunk of 8: rows 3..7 are padding; the decodes after it (one row a call) count all."""
    lm = _narrow("llama")
    calls = _capture(lm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KVSaturationWarning)
        lm.prefill(np.array([200, 17, 99]))
        prefill = np.array(lm.profile()["prefill"]["kv_saturated"])
        padding = _state_count(lm, calls, 3, 8)  # before the decodes overwrite rows 3, 4
        np.testing.assert_array_equal(prefill, _state_count(lm, calls, 0, 3))
        np.testing.assert_array_equal(_raw(lm, "prefill"), prefill + padding)
        assert padding.sum() > 0
        calls.clear()
        for token in (3, 250):
            lm.decode(token)
    decode = np.array(lm.profile()["decode"]["kv_saturated"])
    np.testing.assert_array_equal(decode, _state_count(lm, calls, 3, 5))
    np.testing.assert_array_equal(decode, _raw(lm, "decode"))
