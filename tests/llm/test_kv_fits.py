"""A resident KV cache that fits nowhere (issue 32): the coded compile-time out-of-memory error naming the bytes
needed and available, raised by tvm_npu.llm.compile before anything of max_context's size is allocated (no
calibration run, no build, no host-held cache), never a quiet host-held cache when kv_placement is explicit.
The bytes are counted here from the model's shape and the configuration (docs/npu.md section 3, "Memory")."""

import math

import numpy as np
import pytest

import tvm_npu
from llm.reference import BUILDERS, S, T
from tvm_npu.backend import kv_cache
from tvm_npu.contract.config import get_config
from tvm_npu.contract.errors import NPUError
from tvm_npu.llm import kv_calibration, one_library
from tvm_npu.models.decoder import step_info

HUGE = 65536  # the tiny Llama's K / V rows of one head alone: 2 x 65536 x 128 B = 16 MiB > SRAM's 2 MiB


def _never(*args, **kwargs):
    raise AssertionError("compile went on past the memory check (calibration or build of the huge cache)")


@pytest.fixture
def no_build(monkeypatch):
    monkeypatch.setattr(kv_calibration, "kv_scales", _never)
    monkeypatch.setattr(one_library, "build_steps", _never)


def _head_sram(cfg, seq: int, t: int, d: int) -> int:
    """One KV head's attention, one query head per KV head (docs/llm.md): q, k_new, v_new, out (seq rows
    each), keys and values (t rows), scores and probabilities (seq rows of t fp16): aligned fp16 rows."""
    line = lambda n: math.ceil(2 * n / cfg.alignment) * cfg.alignment  # noqa: E731
    return (4 * seq + 2 * t) * line(d) + 2 * seq * line(t)


@pytest.mark.parametrize("placement", ["ddr", "sram"])
@pytest.mark.parametrize("kv_dtype", ["float16", "int8"])
def test_an_explicit_placement_whose_attention_fits_no_sram_is_coded(no_build, placement, kv_dtype):
    cfg = get_config("npu-ref")
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(
            BUILDERS["llama"], max_context=HUGE, prefill_len=S, kv_placement=placement, kv_dtype=kv_dtype
        )
    D = BUILDERS["llama"].keywords["d"] // BUILDERS["llama"].keywords["heads"]
    largest = max(t for t in range(S, 20000) if _head_sram(cfg, S, t, D) <= cfg.sram_bytes)
    msg = str(err.value)
    assert err.value.code == "ERR_SRAM_OVERFLOW", msg
    assert f"at least {_head_sram(cfg, S, HUGE, D)} bytes, {cfg.sram_bytes} are available" in msg, msg
    assert f"at most {largest}" in msg and "kv_cache='host'" in msg, msg


def test_auto_keeps_the_documented_host_cache_an_explicit_placement_is_coded():
    """ "auto" may keep the host-held cache for an attention that does not fit SRAM (docs/llm.md, "All layers or
    none"): with 64 KiB of SRAM and T = 256 a head's attention does not fit (NPU_E_SRAM) and "auto" builds the
    host-held cache; kv_placement="ddr" is the coded error instead."""
    small = get_config("npu-ref").replace(sram_bytes=64 * 1024)
    lm = tvm_npu.llm.compile(BUILDERS["gpt2"], max_context=256, prefill_len=S, config=small)
    assert not lm.resident and lm.meta["kv_cache"] == "host"
    assert {r["code"] for rep in lm.reports.values() for r in rep.kv_cache["refused"]} == {"NPU_E_SRAM"}
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(BUILDERS["gpt2"], max_context=256, prefill_len=S, config=small, kv_placement="ddr")
    assert err.value.code == "ERR_SRAM_OVERFLOW" and "kv_placement='ddr'" in str(err.value)


def test_the_partitions_sram_refusal_is_coded_with_an_explicit_placement():
    """The Llama's 2 query heads per KV head at T = 188 on 64 KiB: the up-front least count (one query head)
    fits, the partition's count does not: (2 x 2 x 8 + 2 x 8 + 2 x 188) rows of 128 B + 2 x 2 x 8 rows of
    align(2 x 188) = 384 B = 66560 > 65536 bytes; kv_placement="ddr" is ERR_SRAM_OVERFLOW naming them, not
    a host-held cache."""
    small = get_config("npu-ref").replace(sram_bytes=64 * 1024)
    assert small.alignment == 128
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(BUILDERS["llama"], max_context=188, prefill_len=S, config=small, kv_placement="ddr")
    assert err.value.code == "ERR_SRAM_OVERFLOW", str(err.value)
    assert "66560 bytes of SRAM > 65536" in str(err.value) and "kv_cache='host'" in str(err.value)


@pytest.mark.parametrize("placement", ["auto", "ddr", "sram"])
def test_a_cache_past_the_32_bit_ddr_is_the_memory_overflow(placement):
    """The tiny Llama's metadata at T = 2^25 rows: 2 layers x 2 x 2 KV heads x 2^25 rows x 128 B = 2^34 bytes
    > 2^32 (the check reads the metadata only: nothing of that size is built)."""
    cfg = get_config("npu-ref")
    info = dict(step_info(BUILDERS["llama"](seq_len=1, max_context=T)), max_context=1 << 25)
    row = math.ceil(info["head_dim"] * 2 / cfg.alignment) * cfg.alignment
    per_row = 2 * info["layers"] * info["kv_heads"] * row
    with pytest.raises(NPUError) as err:
        kv_cache.check_fits(cfg, [dict(info, seq_len=S), dict(info, seq_len=1)], False, placement)
    msg = str(err.value)
    assert err.value.code == "ERR_MEMORY_OVERFLOW", msg
    assert f"needs {per_row << 25} bytes" in msg and f"reach {1 << 32}" in msg, msg
    assert f"max_context <= {(1 << 32) // per_row}" in msg and "kv_dtype='int8'" in msg, msg


def test_a_cache_that_fits_still_compiles_and_runs():
    lm = tvm_npu.llm.compile(BUILDERS["llama"], max_context=T, prefill_len=S, kv_placement="ddr")
    assert lm.resident and lm.meta["kv_placement"] == "ddr"
    assert np.isfinite(lm.prefill(np.arange(5))).all()
