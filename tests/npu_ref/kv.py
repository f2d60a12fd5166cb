"""A KV cache at a run-time position (format 1.4, docs/npu.md section 3), in numpy, from the contract text.

A step of S query rows at position p writes its S new key / value rows at cache rows [p, p + S), then each
query head attends over cache rows [0, p + S): Q x K^T (MATMUL, n = S + p), a causal SOFTMAX whose row r
(query r % S) keeps elements e <= p + r % S and writes +0.0 at the others, and P x V (MATMUL, k = S + p).
Grouped-query attention: query head h reads key / value head h // group. Everything is fp16 in the
cache and between the commands, with the roundings of npu_ref.fp16.matmul and npu_ref.softmax.
"""

import numpy as np

from . import fp16, int8, softmax


def causal_softmax(x, position, queries, scale=None, window=0):
    """SOFTMAX with pos_mode 1 on `x` [rows, queries + position] (fp16 values): row r is npu_ref.softmax's
    softmax of its first position + r % queries + 1 elements (the masked ones are never read); the rest
    are +0.0. With a `window` W (format 1.6) only the last W of those elements are kept: element e of
    row r also masked when e + W <= position + r % queries."""
    x = np.asarray(x, np.float16)
    out = np.zeros(x.shape, np.float16)
    for r in range(x.shape[0]):
        valid = position + r % queries + 1
        first = max(0, valid - window) if window else 0
        out[r, first:valid] = softmax.softmax(x[r : r + 1, first:valid], scale)[0]
    return out


def attention_step(cache_k, cache_v, q, k_new, v_new, position, scale=None, window=0):
    """One step: `cache_k`, `cache_v` fp16 [H_kv, T, D] (updated in place), `q` [H, S, D], `k_new`, `v_new`
    [H_kv, S, D] (fp16 values); `window` a sliding window's band (0: causal). Returns the attention output,
    fp16 [H, S, D]."""
    heads, queries, _ = q.shape
    group = heads // cache_k.shape[0]
    end = position + queries
    cache_k[:, position:end] = k_new
    cache_v[:, position:end] = v_new
    scores = fp16.matmul(q, cache_k[:, :end], b_group=group, b_transposed=True)  # [H, S, end]
    probs = causal_softmax(scores.reshape(heads * queries, end), position, queries, scale, window)
    return fp16.matmul(probs.reshape(heads, queries, end), cache_v[:, :end], b_group=group)


def attention_step_int8(cache_k, cache_v, q, k_new, v_new, position, k_scales, v_scales, scale=None, window=0):
    """One step on an int8 cache (docs/npu.md section 2, "The int8 KV cache"): `cache_k`, `cache_v` int8 codes
    [H_kv, T, D] (updated in place), `q` [H, S, D] fp16 values, `k_new`, `v_new` [H_kv, S, D] float32 (the
    host's values: the quantized staging of format 1.3 writes head h's rows with its scale, zero point 0),
    `k_scales`, `v_scales` fp32 [H_kv]. Q x K^T and P x V are MATMULs with an int8 B (npu_ref.fp16.matmul_b8).
    `window` as attention_step's. Returns the attention output, fp16 [H, S, D]."""
    heads, queries, _ = q.shape
    group = heads // cache_k.shape[0]
    end = position + queries
    for h in range(cache_k.shape[0]):
        cache_k[h, position:end] = int8.quantize(k_new[h], k_scales[h], 0)
        cache_v[h, position:end] = int8.quantize(v_new[h], v_scales[h], 0)
    scores = fp16.matmul_b8(q, cache_k[:, :end], k_scales, b_group=group, b_transposed=True)
    probs = causal_softmax(scores.reshape(heads * queries, end), position, queries, scale, window)
    return fp16.matmul_b8(probs.reshape(heads, queries, end), cache_v[:, :end], v_scales, b_group=group)
