"""tvm_npu.llm.perplexity: teacher-forced log-likelihood through the compiled steps on the reference NPU,
against the float model (torch on the same checkpoint folder) on the same tokens. The reference's NLL,
agreement and KL are recomputed here from torch's logits with numpy, window by window, so the windows'
bookkeeping is checked too."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tvm_npu.llm
from tvm_npu.contract.errors import NPUError
from tvm_npu.llm.quality import windows
from tvm_npu.llm.reference import torch_logits

IDS = np.random.default_rng(3).integers(0, 256, 70).astype(np.int64)  # longer than max_context 32


@given(n=st.integers(2, 300), context=st.integers(2, 64), data=st.data())
def test_windows_score_every_target_once_with_context(n, context, data):
    stride = data.draw(st.integers(1, context))
    scored = []
    for begin, end, first in windows(n, context, stride):
        assert begin < first <= end <= begin + context and end <= n
        assert first - begin >= min(context - stride, first)  # at least context - stride tokens before
        scored += range(first, end)
    assert scored == list(range(1, n))


def _log_softmax(x):
    x = x.astype(np.float64) - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_perplexity_on_the_npu_matches_the_float_model(hf_folder, folder_llm):
    ref = torch_logits(hf_folder)
    ev = tvm_npu.llm.perplexity(folder_llm, IDS, stride=16, reference=ref)
    # The reference side recomputed independently: full-window logits, each target once.
    nll, count, per_token = 0.0, 0, []
    for begin, end, first in windows(IDS.size, 32, 16):
        logp = _log_softmax(ref(IDS[begin:end]))
        t = np.arange(first, end)
        nll -= logp[t - 1 - begin, IDS[t]].sum()
        per_token.append(-logp[t - 1 - begin, IDS[t]])
        count += t.size
    assert ev.tokens == count == IDS.size - 1
    assert ev.reference_nll == pytest.approx(nll / count, rel=1e-9)
    # per token, in text order (what paired comparisons of two builds read), and the change's standard error
    np.testing.assert_allclose(ev.reference_token_nll, np.concatenate(per_token), rtol=1e-9)
    assert ev.token_nll.shape == (count,) and ev.token_nll.mean() == pytest.approx(ev.nll, rel=1e-12)
    d = ev.token_nll - np.concatenate(per_token)
    assert ev.change_stderr == pytest.approx(np.exp(d.mean()) * d.std(ddof=1) / np.sqrt(count), rel=1e-6)
    assert 0 < ev.change_stderr < 5e-3
    # fp16 on the NPU: the perplexity within 0.5% of the float model's, argmax agreeing almost everywhere
    assert abs(ev.perplexity / ev.reference_perplexity - 1) <= 5e-3
    assert ev.top1_agreement >= 0.95
    assert 0 <= ev.kl <= 1e-3
    # each token's KL divergence (Gibbs: never below 0 beyond rounding), in text order, their mean the KL
    assert ev.token_kl.shape == (count,) and ev.token_kl.min() >= -1e-6 and ev.token_kl.mean() == ev.kl


def test_decode_step_scores_as_the_prefill_step(folder_llm):
    """The same window through one decode step per token (the KV cache path) and through the prefill
    buckets: the same log-likelihood up to fp16 rounding."""
    a = tvm_npu.llm.perplexity(folder_llm, IDS[:30], step="prefill")
    b = tvm_npu.llm.perplexity(folder_llm, IDS[:30], step="decode")
    assert a.tokens == b.tokens == 29
    assert b.nll == pytest.approx(a.nll, rel=2e-3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(ids=np.array([], np.int64)), "at least 2 token ids"),
        (dict(ids=np.array([5], np.int64)), "at least 2 token ids"),
        (dict(ids=np.array([[1, 2]], np.int64)), "1-D integer"),
        (dict(ids=IDS, stride=0), "stride=0"),
        (dict(ids=IDS, stride=33), "stride=33"),
        (dict(ids=IDS, stride=2.5), "stride=2.5"),
        (dict(ids=IDS, step="beam"), "step='beam'"),
    ],
)
def test_bad_arguments_are_coded(folder_llm, kwargs, match):
    with pytest.raises(NPUError, match=match) as err:
        tvm_npu.llm.perplexity(folder_llm, **kwargs)
    assert err.value.code == "ERR_INVALID_CONFIG"


def test_a_token_outside_the_vocabulary_is_coded(folder_llm):
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.perplexity(folder_llm, np.array([1, 2, 999], np.int64))
    assert err.value.code == "ERR_LLM_TOKEN"
