"""tvm_npu.llm: a decoder's prefill and decode steps compiled for the NPU, with the KV cache between calls.

    import tvm_npu.llm, functools
    from tvm_npu.models.decoder import gpt2_step
    lm = tvm_npu.llm.compile(functools.partial(gpt2_step, layers=2), max_context=64, config="npu-ref")
    logits = lm.prefill(ids)          # np.int64 [n] -> np.float32 [vocab]: the last token's; a new sequence
    logits = lm.decode(token)         # one token appended
    new_ids = lm.generate(ids, max_new_tokens=32, sampler=tvm_npu.llm.top_k(40, seed=0))
    lm.profile()["decode"]["tokens_per_s"]
    lm.export_library("lm.so"); lm = tvm_npu.llm.load("lm.so")
    tvm_npu.llm.perplexity(lm, ids).perplexity   # teacher-forced, on the NPU (llm/quality.py)

The step model (the interface to the importer), the API, the errors and what runs where: docs/llm.md.
"""

from __future__ import annotations

from pathlib import Path

from .kv_saturation import KVSaturationWarning
from .model import LLM, compile
from .quality import Evaluation, perplexity
from .sampling import greedy, top_k, top_p


def load(path) -> LLM:
    """An LLM from a file written by `LLM.export_library` (llm/bundle.py); NPUError(ERR_BAD_ARTIFACT)
    when the file is damaged or not such an artifact."""
    from .bundle import read_bundle

    meta, lib = read_bundle(path)
    lm = LLM(lib, meta)
    lm.artifact = Path(path)  # export_library copies it: a loaded library cannot be written again
    return lm


__all__ = ["LLM", "Evaluation", "compile", "greedy", "load", "perplexity", "top_k", "top_p"]
