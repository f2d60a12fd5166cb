"""Calibration batches for an LLM's int4 weights chosen by GPTQ or AWQ (`tvm_npu.llm.compile(weights="int4",
weight_method="gptq" | "awq", calibration=[ids, ...])`, docs/llm.md "int4 weights").

The prompts (1-D token ids of representative text, any length) are cut into prefill-bucket chunks, each run
as a sequence of its own from position 0 against a zero cache by the float32 step model on the host (the
dense layers' inputs do not depend on which rows the cache holds beyond the attention's mix, and chunks
from position 0 need no cache carried between calls). A last chunk shorter than the bucket is padded with
its own first token; the padding's rows are real forward passes of the model, just not of the text.
"""

from __future__ import annotations

import numpy as np

from ..contract.errors import NPUError

MAX_CHUNKS = 64  # GPTQ's Hessian and AWQ's search read every row: 64 x the bucket is plenty


def check(calibration, vocab: int) -> list[np.ndarray]:
    """`calibration` as a list of int64 id arrays (each at least one token, inside the vocabulary)."""
    if isinstance(calibration, np.ndarray) or not isinstance(calibration, (list, tuple)) or not calibration:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            "calibration must be a non-empty list of 1-D integer id arrays (token ids of representative text)",
        )
    out = []
    for i, ids in enumerate(calibration):
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu" or arr.ndim != 1 or arr.size == 0:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"calibration prompt {i} must be 1-D integer ids, not {arr.dtype} {list(arr.shape)}",
            )
        if ((arr < 0) | (arr >= vocab)).any():
            raise NPUError("ERR_LLM_TOKEN", f"calibration prompt {i} has a token id outside [0, {vocab})")
        out.append(arr.astype(np.int64))
    return out


def batches(prompts: list[np.ndarray], info: dict) -> list[list[np.ndarray]]:
    """The step model's inputs (input_ids [1, S], position [1], the zero cache) for each chunk."""
    S = info["seq_len"]
    zero = np.zeros((1, info["kv_heads"], info["max_context"], info["head_dim"]), np.float32)
    cache = [zero] * (2 * info["layers"])
    out = []
    for ids in prompts:
        for start in range(0, ids.size, S):
            chunk = ids[start : start + S]
            chunk = np.concatenate([chunk, np.full(S - chunk.size, chunk[0], np.int64)])
            out.append([chunk.reshape(1, S), np.zeros(1, np.int64), *cache])
    return out[:MAX_CHUNKS]
