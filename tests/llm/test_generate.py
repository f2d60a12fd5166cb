"""tvm_npu.llm on the GPT-2- and Llama-like step models against onnxruntime (tests/llm/conftest.py):
prefill then 16 greedy decode steps, every logits vector within 1e-2 * max(1, max|ref|) and the same
tokens; prompts of 1 token, within the bucket, chunked, and chunked with the last chunk moved back
from max_context; which ops ran on the NPU."""

import functools

import numpy as np
import pytest

import tvm_npu
from llm.reference import OrtDecoder, S, T, assert_logits_close
from tvm_npu.models.decoder import gpt2_step

PROMPTS = {"one": 1, "within": 5, "bucket": S, "chunked": 13}


@pytest.mark.parametrize("length", sorted(PROMPTS.values()))
def test_prefill_and_16_decode_steps_match_onnxruntime(lm, reference, length):
    ids = np.random.default_rng(length).integers(0, lm.vocab, length)
    want_logits, want_tokens = reference.run(ids, 17)
    got = [lm.prefill(ids)]
    tokens = [int(np.argmax(got[0]))]
    for _ in range(16):
        got.append(lm.decode(tokens[-1]))
        tokens.append(int(np.argmax(got[-1])))
    for g, w in zip(got, want_logits):
        assert g.dtype == np.float32 and g.shape == (lm.vocab,)
        assert_logits_close(g, w)
    assert tokens == want_tokens
    assert lm.length == length + 16


def test_generate_is_the_greedy_loop(lm, reference):
    ids = np.arange(3, 10)
    _, want = reference.run(ids, 12)
    assert lm.generate(ids, max_new_tokens=12).tolist() == want


def test_last_chunk_moves_back_from_max_context(lm, reference):
    """41 tokens, bucket 8, T 44: the last chunk would cover [40, 48); it runs [36, 44) instead."""
    ids = np.random.default_rng(41).integers(0, lm.vocab, 41)
    want_logits, want_tokens = reference.run(ids, 4)
    got = [lm.prefill(ids)]
    for t in want_tokens[:-1]:
        got.append(lm.decode(t))
    for g, w in zip(got, want_logits):
        assert_logits_close(g, w)
    assert [int(np.argmax(g)) for g in got] == want_tokens
    assert lm.length == T


def test_reset_and_a_new_prefill_forget_the_sequence(lm):
    ids = np.array([7, 8, 9])
    first = lm.prefill(ids)
    lm.generate(np.arange(20), max_new_tokens=5)
    assert np.array_equal(lm.prefill(ids), first)  # nothing of the longer sequence is left
    lm.reset()
    assert lm.length is None and all(not c.any() for c in lm.cache())
    assert np.array_equal(lm.prefill(ids), first)


# Dense layers per model: gpt2 2 x (Q, K, V columns of the fused QKV, out, fc, proj) + the tied LM head;
# llama 2 x (q, k, v, o, gate, up, down) + the LM head. Attention has 2 matmuls per layer.
DENSE = {"gpt2": 13, "llama": 15}
# Attention matmuls on the NPU: both of every layer (Q x K^T and P x V), for both decoders, in the
# resident KV cache regions (backend/kv_cache.py).
ATTENTION_ON_NPU = {"gpt2": 4, "llama": 4}


def test_dense_layers_ran_on_the_npu(lm, arch):
    """Every dense layer (a matmul by a constant weight) of both steps is on the NPU, and the attention
    matmuls the compiler takes; printed: the NPU ops of each step."""
    for step, placements in lm.placements.items():
        matmuls = [p for p in placements if p["op"] == "relax.matmul"]
        dense = [p for p in matmuls if p["composite"].startswith("npu.dense")]
        assert len(dense) == DENSE[arch] and all(p["device"] == "npu" for p in dense), (step, matmuls)
        assert len(matmuls) == DENSE[arch] + 2 * lm.layers
        attention = [p for p in matmuls if p not in dense]
        assert sum(p["device"] == "npu" for p in attention) == ATTENTION_ON_NPU[arch], (step, attention)
        on_npu = sorted({p["op"] for p in placements if p["device"] == "npu"})
        print(f"{arch} {step}: NPU ops {on_npu}; {sum(p['device'] == 'cpu' for p in placements)} CPU ops")


def test_profile_reports_both_steps(lm):
    lm.generate(np.arange(10), max_new_tokens=4)
    prof = lm.profile()
    assert prof["prefill"]["tokens"] == 10 and prof["decode"]["tokens"] == 3
    for p in prof.values():
        assert p["cycles"] > 0 and p["ddr_bytes"] > 0 and 0 < p["mac_util"] <= 1
        clock = lm.meta["config"]["clock_mhz"] * 1e6
        assert p["tokens_per_s"] == pytest.approx(p["tokens"] * clock / p["cycles"])
    # The resident cache: the fp16 K and V rows read, [0, position + S) per call, layer and KV head.
    info = lm.meta["step"]
    row = 2 * lm.layers * info["kv_heads"] * info["head_dim"] * 2
    assert prof["prefill"]["kv_bytes"] == (8 + 16) * row  # chunks [0, 8) and [8, 16)
    assert prof["decode"]["kv_bytes"] == (11 + 12 + 13) * row  # decode steps at positions 10, 11, 12


def test_gpt2_with_erf_gelu_and_untied_head_matches_onnxruntime():
    """The other GPT-2 forms of the builder: erf GELU (relax.nn.gelu) and an LM head of its own."""
    builder = functools.partial(gpt2_step, layers=1, d=32, heads=2, ffn=64, vocab=96, gelu="erf", tied=False, seed=5)
    lm = tvm_npu.llm.compile(builder, max_context=16, prefill_len=4)
    ids = np.array([90, 3, 41, 7, 12, 60])  # two chunks
    want_logits, want_tokens = OrtDecoder(builder, max_context=16).run(ids, 5)
    got = [lm.prefill(ids)] + [lm.decode(t) for t in want_tokens[:-1]]
    for g, w in zip(got, want_logits):
        assert_logits_close(g, w)
    assert [int(np.argmax(g)) for g in got] == want_tokens
    matmuls = [p for p in lm.placements["decode"] if p["op"] == "relax.matmul"]
    dense = [p for p in matmuls if p["composite"].startswith("npu.dense")]
    assert len(dense) == 7 and all(p["device"] == "npu" for p in dense)  # Q, K, V, out, fc, proj, LM head
