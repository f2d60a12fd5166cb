"""tvm_npu.llm.compile on a Hugging Face decoder-with-past export itself (the issue's API, the importer
inside): greedy tokens and every logits vector against onnxruntime running the export with its growing
past, the reference loop of test_step_model.py. The export gets the resident cache
(test_kv_resident.py)."""

import numpy as np
import pytest

from llm_import.test_step_model import ARCHS, PROMPT, _kv, _Reference
from tvm_npu.frontend import to_step_model

NEW = 20


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHS)
def test_llm_compile_takes_the_export_and_generates_onnxruntime_greedy_tokens(hf_export, hf_llm, arch, attn):
    """Both of transformers' attention forms: written out, and torch's scaled_dot_product_attention."""
    path, lm = hf_export(arch, attn), hf_llm(arch, attn)
    assert lm.resident
    ref = _Reference(path, *_kv(to_step_model(path, 32, 1)))
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0][0, -1]
    tokens, ref_tokens = [], []
    for _ in range(NEW):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref(np.array([[ref_tokens[-1]]], np.int64))[0][0, -1]
    assert tokens == ref_tokens
    lm.reset()
    assert lm.generate(np.array(PROMPT, np.int64), max_new_tokens=NEW).tolist() == ref_tokens
