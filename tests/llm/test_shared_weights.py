"""The weights of an LLM's two steps in memory once: the runtime's weight pool (src/runtime/weight_pool.h)
gives the prefill and decode regions that carry the same weight bytes one copy, so the resident weight
bytes are half the unshared sum; the logits are bit for bit those of an LLM whose modules hold their own
copies (sharing off), which every step of both computes independently."""

import functools
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

import tvm_npu
from llm.reference import OrtDecoder, assert_logits_close
from tvm_npu import runtime
from tvm_npu.contract import stream
from tvm_npu.models.decoder import gpt2_step


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
    import gc

    from llm.reference import BUILDERS

    # Modules an earlier test left as garbage would otherwise be freed in the middle of the count: collect
    # them first and keep the collector from running on its own until the count is done.
    gc.collect()
    gc.disable()
    try:
        before = runtime.weight_pool()["bytes"]
        # Weights of its own (a seed no other test uses): no module alive elsewhere shares them.
        lm = tvm_npu.llm.compile(functools.partial(BUILDERS["gpt2"], seed=9173), max_context=16, prefill_len=4)
        mem = lm.memory()
        grown = runtime.weight_pool()["bytes"] - before
        # The compiler's own modules (the executable's) and the VM's share the same copies as well.
        assert grown == mem["weights_resident_bytes"] == mem["weights_bytes"] // 2
        del lm, mem
        gc.collect()
        assert runtime.weight_pool()["bytes"] == before
    finally:
        gc.enable()


def test_the_library_holds_each_shared_weight_region_once(lm, tmp_path):
    """A decode region whose weights a prefill region carries is written with its weights by reference:
    every weight region's bytes occur exactly once in the file, and a fresh process (no module alive to
    share with) loads it and computes the same logits."""
    path = lm.export_library(tmp_path / "lm.so")
    data = path.read_bytes()
    regions = set()
    for m in runtime.npu_modules(lm._vm):
        blob = bytes(m["get_stream"]())
        offset, size = struct.unpack_from("<II", blob, 24)  # header words weights_offset, weights_bytes
        if size:
            regions.add(blob[offset : offset + size])
    assert regions and all(data.count(r) == 1 for r in regions)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    script = (
        "import sys, numpy as np, tvm_npu; lm = tvm_npu.llm.load(sys.argv[1]); "
        f"sys.stdout.buffer.write(lm.prefill(np.array({ids})).tobytes() + lm.decode(7).tobytes())"
    )
    res = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    want = np.concatenate([lm.prefill(np.array(ids)), lm.decode(7)])
    np.testing.assert_array_equal(np.frombuffer(res.stdout, np.float32), want)


def _npu_weight_bytes(model) -> int:
    """The weight bytes an NPU holds for a GPT-2 step model, counted from its ONNX initializers: every
    matrix a MatMul multiplies by (the tied LM head: the token embedding, transposed) once in fp16, every
    vector a bias Add or a LayerNorm takes in fp32 (the position embedding is gathered on the CPU). At
    d 256 every such row is a multiple of the 128-byte alignment: no padding to count."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    produced = {out: node for node in model.graph.node for out in node.output}
    matrices, vectors = set(), set()
    for node in model.graph.node:
        if node.op_type == "MatMul":  # by a weight, not attention's two activations
            src = produced.get(node.input[1])
            w = src.input[0] if src is not None and src.op_type == "Transpose" else node.input[1]
            if w in inits:
                matrices.add(w)
        if node.op_type in ("Add", "LayerNormalization"):
            vectors.update(n for n in node.input if n in inits and inits[n].ndim == 1)
    assert len(matrices) == 4 + 1 and len(vectors) == 4 + 2 * 2 + 2  # 4 dense, the head; biases, 3 norms
    return sum(2 * inits[n].size for n in matrices) + sum(4 * inits[n].size for n in vectors)


def test_prefill_and_decode_hold_their_weights_once_though_their_blocks_differ():
    """d 256, vocab 2048, a 16-token prefill: the LM head's 1 MB of weights is a classifier for the decode
    step (one row), loaded in blocks of an eighth of SRAM, but one block for the prefill; each layer's
    weights lie in DDR in one layout whatever its blocks, so both steps carry the same weight regions and
    the runtime holds them once."""
    builder = functools.partial(gpt2_step, layers=1, d=256, heads=4, ffn=1024, vocab=2048)
    lm = tvm_npu.llm.compile(builder, max_context=64, prefill_len=16)
    mem = lm.memory()
    count = _npu_weight_bytes(builder(seq_len=1, max_context=64))
    assert count > 2_500_000
    assert mem["weights_resident_bytes"] == count and mem["weights_bytes"] == 2 * count
    twins, blocks = {}, {}
    for m in runtime.npu_modules(lm._vm):
        step, name = str(m["get_symbol"]()).split("_", 1)
        s = stream.decode(bytes(m["get_stream"]()))
        twins.setdefault(name, set()).add(runtime.weights_memory(m)["id"])
        blocks.setdefault(name, {})[step] = sorted({c.args["oc"] for c in s.commands if c.op == "CONV2D"})
    assert all(len(v) == 1 for v in twins.values())
    assert any(b["prefill"] != b["decode"] for b in blocks.values())  # the blocks did differ
    ids = np.arange(16) * 7 % 2048
    ref = OrtDecoder(builder, max_context=64)
    want, _ = ref.run(ids, 3)
    got = [lm.prefill(ids)] + [lm.decode(int(np.argmax(g))) for g in want[:2]]
    for g, w in zip(got, want):
        assert_logits_close(g, w)
