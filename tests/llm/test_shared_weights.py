"""The weights of an LLM's two steps in memory once: the runtime's weight pool (src/runtime/weight_pool.h)
gives the prefill and decode regions that carry the same weight bytes one copy, so the resident weight
bytes are half the unshared sum; the logits are bit for bit those of an LLM whose modules hold their own
copies (sharing off), which every step of both computes independently."""

import numpy as np

import tvm_npu
from tvm_npu import runtime


def test_prefill_and_decode_regions_share_one_copy_of_their_weights(lm, tmp_path):
    mem = lm.memory()
    # Every dense region of decode has its twin in prefill with the same [N][K] weights.
    print(f"weights: {mem['weights_bytes']} bytes unshared, {mem['weights_resident_bytes']} resident")
    assert mem["weights_bytes"] > 100_000
    assert mem["weights_resident_bytes"] == mem["weights_bytes"] // 2
    ids = {}
    for m in runtime.npu_modules(lm._vm):
        symbol = str(m["get_symbol"]())
        ids.setdefault(symbol.split("_", 1)[1], set()).add(runtime.weights_memory(m)["id"])
    assert all(len(v) == 1 for v in ids.values())  # a region of prefill and its twin of decode: one copy


def test_unshared_weights_give_the_same_logits_bit_for_bit(lm, tmp_path):
    path = lm.export_library(tmp_path / "lm.so")
    runtime.set_weight_sharing(False)
    try:
        own = tvm_npu.llm.load(path)
    finally:
        runtime.set_weight_sharing(True)
    shared = tvm_npu.llm.load(path)
    mem_own, mem_shared = own.memory(), shared.memory()
    assert mem_own["weights_resident_bytes"] == mem_own["weights_bytes"] == mem_shared["weights_bytes"]
    assert mem_shared["weights_resident_bytes"] == mem_shared["weights_bytes"] // 2
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    # One sequence after the other: both name the same state space (one NPU cache).
    want = [own.prefill(ids)] + [own.decode(t) for t in (7, 0, 255)]
    got = [shared.prefill(ids)] + [shared.decode(t) for t in (7, 0, 255)]
    fresh = [lm.prefill(ids)] + [lm.decode(t) for t in (7, 0, 255)]
    assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(got, want, fresh))


def test_the_pool_counts_each_copy_once_and_frees_it_with_its_last_module(tmp_path):
    from llm.reference import BUILDERS

    before = runtime.weight_pool()["bytes"]
    lm = tvm_npu.llm.compile(BUILDERS["gpt2"], max_context=16, prefill_len=4)
    mem = lm.memory()
    grown = runtime.weight_pool()["bytes"] - before
    # The compiler's own modules (the executable's) and the VM's share the same copies as well.
    assert grown == mem["weights_resident_bytes"] == mem["weights_bytes"] // 2
    del lm, mem
    import gc

    gc.collect()
    assert runtime.weight_pool()["bytes"] == before
