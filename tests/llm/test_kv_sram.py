"""The resident KV cache in SRAM (kv_placement, docs/llm.md "Where the cache lives"; docs/npu.md section 3,
"The SRAM state area"): the same logits, bit for bit, as the cache in DDR along a token path (GPT-2 and
Llama, fp16 and int8 cache), within the bound of onnxruntime; a decode step's DDR bytes lower by exactly the
cache rows the DDR placement moves (counted here from the model's shape and the configuration's burst); the
fallback to DDR when SRAM is too small, the coded error when "sram" is forced; reset; prefill and decode
sharing the one cache."""

import functools
import math

import numpy as np
import pytest

import tvm_npu
from llm.reference import BUILDERS, OrtDecoder, S, T, assert_logits_close
from tvm_npu.contract.config import get_config
from tvm_npu.contract.errors import NPUError

PROMPT = np.array([5, 17, 3, 88, 41], np.int64)
TOKENS = [7, 200, 13, 64, 9, 150]


@functools.cache
def _lm(name, placement, kv_dtype="float16"):
    return tvm_npu.llm.compile(BUILDERS[name], max_context=T, prefill_len=S, kv_dtype=kv_dtype, kv_placement=placement)


def _path(lm):
    """Logits of the prompt's prefill and of each decode of TOKENS, and the decode DDR bytes of each step."""
    lm.reset()
    logits, ddr = [lm.prefill(PROMPT)], []
    runner = lm._runners["decode"]
    for token in TOKENS:
        before = runner.counters()["ddr_bytes"]
        logits.append(lm.decode(token))
        ddr.append(runner.counters()["ddr_bytes"] - before)
    return np.stack(logits), ddr


@pytest.mark.parametrize("kv_dtype", ["float16", "int8"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sram_and_ddr_placements_give_the_same_logits_and_ddr_drops_by_the_cache(name, kv_dtype):
    sram, ddr = _lm(name, "sram", kv_dtype), _lm(name, "ddr", kv_dtype)
    assert (sram.meta["kv_placement"], ddr.meta["kv_placement"]) == ("sram", "ddr")
    assert sram.profile()["decode"]["kv_placement"] == "sram"
    got, ddr_sram = _path(sram)
    want, ddr_ddr = _path(ddr)
    np.testing.assert_array_equal(got, want)  # the same commands on the same bytes, wherever the rows live
    # Independent count (docs/npu.md section 5): per layer and KV head, the DDR placement stores the new K
    # and V row and loads rows [0, p] of each, every row a DMA of D * elem bytes in whole bursts.
    info, cfg = sram.meta["step"], get_config("npu-ref")
    L, H_kv, D = info["layers"], info["kv_heads"], info["head_dim"]
    row = math.ceil(D * (1 if kv_dtype == "int8" else 2) / cfg.burst_bytes) * cfg.burst_bytes
    for i, p in enumerate(range(len(PROMPT), len(PROMPT) + len(TOKENS))):
        assert ddr_ddr[i] - ddr_sram[i] == L * 2 * H_kv * ((p + 1) + 1) * row
    assert len(set(ddr_sram)) == 1  # nothing of an SRAM cache's growth crosses DDR
    if kv_dtype == "float16":  # and both are the float32 model, within the fp16 datapath's bound
        ort = OrtDecoder(BUILDERS[name])
        cache = [np.zeros(ort.shape, np.float32) for _ in ort.names[2:]]
        seq = [*PROMPT.tolist(), *TOKENS]
        for p in range(len(seq)):
            res = ort.step([np.array([[seq[p]]], np.int64), np.array([p], np.int64), *cache])
            cache = res[1:]
            if p >= len(PROMPT) - 1:
                assert_logits_close(got[p - len(PROMPT) + 1], res[0][0, 0])


def test_auto_takes_sram_when_the_cache_fits_and_ddr_when_it_does_not():
    """The Llama test model's fp16 cache is 2 x 2 x 2 x 44 rows of 128 bytes = 45056 bytes: "auto" keeps it in
    SRAM on npu-ref (2 MiB), in DDR with 64 KiB of SRAM (more than half), and still answers the same."""
    small = get_config("npu-ref").replace(sram_bytes=65536)
    auto = tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S)
    assert (auto.meta["kv_placement"], auto.meta["sram_state_bytes"]) == ("sram", 45056)
    fallback = tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S, config=small)
    assert (fallback.meta["kv_placement"], fallback.meta["sram_state_bytes"]) == ("ddr", 0)
    np.testing.assert_array_equal(_path(fallback)[0], _path(auto)[0])


def test_forcing_sram_for_a_cache_that_does_not_fit_is_a_coded_error():
    tiny = get_config("npu-ref").replace(sram_bytes=32768)
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S, config=tiny, kv_placement="sram")
    assert err.value.code == "ERR_SRAM_OVERFLOW"
    assert "45056 bytes of SRAM, 32768 are available" in str(err.value)
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S, kv_placement="l2")
    assert err.value.code == "ERR_INVALID_CONFIG"


def test_reset_clears_the_sram_cache_and_prefill_decode_share_it():
    """After a sequence the SRAM slots hold its rows (prefill's module reads what decode's wrote: one
    cache); reset zeroes them, and the next sequence's logits are a fresh LLM's."""
    lm = _lm("gpt2", "sram")
    first, _ = _path(lm)
    pre, dec = lm._runners["prefill"].kv_modules[0], lm._runners["decode"].kv_modules[0]
    k_pre, k_dec = bytes(pre["get_state"](0)), bytes(dec["get_state"](0))
    assert k_pre == k_dec and any(k_dec)
    rows = len(PROMPT) + len(TOKENS)
    keys = np.frombuffer(k_dec, np.float16).reshape(-1, T, lm.meta["step"]["head_dim"])
    assert np.all(keys[:, rows:] == 0) and np.all(np.abs(keys[:, :rows]).max(axis=-1) > 0)
    lm.reset()
    assert not any(bytes(dec["get_state"](0))) and not any(bytes(pre["get_state"](1)))
    again, _ = _path(lm)
    np.testing.assert_array_equal(again, first)
