"""The int8 KV cache's scales (docs/llm.md, "An int8 KV cache"): one fp32 scale per layer, KV head and K / V,
chosen at compile time from a calibration run of the float32 step model on the host.

The decode step model (the host-held signature, `main(input_ids, position, *cache) -> (logits, *cache)`) is
built for the CPU with TVM's llvm target and run token by token over each calibration prompt from a zero
cache, as onnxruntime would; after a prompt, the cache holds every row it wrote. A head's scale is
`max|x| / 127` over the rows of every prompt (docs/npu.md section 2, "The int8 KV cache": the staging then
writes the calibrated maximum as code 127 and never saturates a calibrated value; a larger value met at run
time saturates to -128 or 127).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..contract.errors import NPUError

DEFAULT_PROMPTS, DEFAULT_LEN, SEED = 8, 32, 0


def default_prompts(vocab: int, max_context: int) -> list[np.ndarray]:
    """A few seeded random prompts: 8 of min(32, max_context) ids."""
    rng = np.random.default_rng(SEED)
    return [rng.integers(0, vocab, min(DEFAULT_LEN, max_context)).astype(np.int64) for _ in range(DEFAULT_PROMPTS)]


def check_prompts(calibration, vocab: int, max_context: int) -> list[np.ndarray]:
    """`calibration` (None: default_prompts) as a list of int64 id arrays, each checked like a prompt."""
    if calibration is None:
        return default_prompts(vocab, max_context)
    if isinstance(calibration, np.ndarray) or not isinstance(calibration, (list, tuple)) or not calibration:
        raise NPUError(
            "ERR_SHAPE_MISMATCH", "calibration must be a non-empty list of 1-D integer id arrays (one per prompt)"
        )
    out = []
    for i, ids in enumerate(calibration):
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu" or arr.ndim != 1 or not 1 <= arr.size <= max_context:
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"calibration prompt {i} must be 1-D integer ids of 1..{max_context} tokens, not "
                f"{arr.dtype} {list(arr.shape)}",
            )
        if ((arr < 0) | (arr >= vocab)).any():
            raise NPUError("ERR_LLM_TOKEN", f"calibration prompt {i} has a token id outside [0, {vocab})")
        out.append(arr.astype(np.int64))
    return out


def kv_scales(decode_mod: tvm.IRModule, info: dict, prompts: list[np.ndarray]) -> list:
    """fp32 scales [layers][2][kv_heads] (K, V) of the host-held decode step `decode_mod`, as lists of
    floats: max|x| / 127 per head over every row the prompts write (1.0 for a head that is all zeros)."""
    L, H_kv = info["layers"], info["kv_heads"]
    shape = (1, H_kv, info["max_context"], info["head_dim"])
    ex = tvm.compile(decode_mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    peak = np.zeros((L, 2, H_kv), np.float32)
    for ids in prompts:
        cache = [tvm.runtime.tensor(np.zeros(shape, np.float32)) for _ in range(2 * L)]
        for p, token in enumerate(ids):
            args = [np.array([[token]], np.int64), np.array([p], np.int64)]
            out = vm["main"](*[tvm.runtime.tensor(a) for a in args], *cache)
            cache = [out[i] for i in range(1, 2 * L + 1)]
        for j, c in enumerate(cache):
            peak[j // 2, j % 2] = np.maximum(peak[j // 2, j % 2], np.abs(c.numpy()).max(axis=(0, 2, 3)))
    if not np.isfinite(peak).all():
        raise NPUError("ERR_INVALID_MODEL", "the calibration run's K / V values are not finite: no int8 KV scales")
    scales = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    return [[[float(s) for s in kv] for kv in layer] for layer in scales]
