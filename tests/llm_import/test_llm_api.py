"""tvm_npu.llm.compile on a Hugging Face decoder-with-past export itself (the issue's API, the importer
inside): greedy tokens and every logits vector against onnxruntime running the export with its growing
past, the reference loop of test_step_model.py."""

import numpy as np
import pytest

import tvm_npu
from llm_import.test_step_model import ARCHS, PROMPT, _kv, _Reference
from tvm_npu.frontend import to_step_model

NEW = 10


@pytest.mark.parametrize("arch", ARCHS)
def test_llm_compile_takes_the_export_and_generates_onnxruntime_greedy_tokens(hf_export, arch):
    path = hf_export(arch)
    lm = tvm_npu.llm.compile(path, max_context=32, prefill_len=8)
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
