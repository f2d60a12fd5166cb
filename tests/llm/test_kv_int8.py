"""The int8 KV cache (`tvm_npu.llm.compile(..., kv_dtype="int8")`, docs/llm.md "An int8 KV cache"): the compiled
attention regions against the numpy model of docs/npu.md (npu_ref.kv.attention_step_int8: the quantized staging
of each head's rows, MATMULs with an int8 B) bit for bit; the calibrated scales against onnxruntime's cache;
logits and greedy tokens against onnxruntime's float32 model along the same token path; the DDR bytes of the cache
reads (one byte per element, whole bursts) and the profile's kv_bytes; the coded refusals."""

import math

import numpy as np
import pytest
import tvm

import tvm_npu
from llm.reference import BUILDERS, OrtDecoder, S, T, gpt2_mask_minus_50
from npu_ref import kv
from tvm_npu.llm import kv_calibration
from tvm_npu.models.decoder import gpt2_step

# Measured (see test_int8_kv_logits_follow_onnxruntime): worst |npu - onnxruntime| over max(1, max|ref|) is
# 1.1% (gpt2) and 3.7% (llama) on these random-weight models, against 0.1% / 0.2% with the fp16 cache: each
# element moves by up to half its head's step (max|x| / 254) and a value beyond the calibrated range
# saturates. The bound leaves headroom over the measured worst.
INT8_KV_TOL = 5e-2

_COMPILED: dict = {}


def compiled8(arch):
    if arch not in _COMPILED:
        _COMPILED[arch] = tvm_npu.llm.compile(BUILDERS[arch], max_context=T, prefill_len=S, kv_dtype="int8")
    lm = _COMPILED[arch]
    lm.reset()
    return lm


def _t(x):
    return tvm.runtime.tensor(np.ascontiguousarray(x))


def _bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def test_int8_regions_match_the_numpy_model_bit_for_bit(arch):
    """Layer 0's region, called directly: prefill (S = 8) at 0 and 8, then decode at 16..20 on the shared
    state; its output and its int8 keys and values equal npu_ref.kv.attention_step_int8's, bit for bit. The
    new rows are float32 (the staging quantizes them), some beyond the calibrated range (they saturate)."""
    lm = compiled8(arch)
    info = lm.meta["step"]
    H, H_kv, D = 4, info["kv_heads"], info["head_dim"]
    ks, vs = (np.array(lm.meta["kv_scales"][0][j], np.float32) for j in range(2))
    scale = np.float32(1.0) / np.float32(math.sqrt(D))
    rng = np.random.default_rng(0)
    model_k, model_v = np.zeros((H_kv, T, D), np.int8), np.zeros((H_kv, T, D), np.int8)
    saturated = 0
    for step, position in [("prefill", 0), ("prefill", 8)] + [("decode", p) for p in range(16, 21)]:
        mod = lm._runners[step].kv_modules[0]
        n = 1 if step == "decode" else S
        q = rng.standard_normal((1, H, n, D)).astype(np.float32)
        k, v = (rng.standard_normal((1, H_kv, n, D)).astype(np.float32) * 127 * ks.max() / 2.5 for _ in range(2))
        out = _t(np.zeros((1, H, n, D), np.float32))
        heads = [_t(x[:, h : h + 1]) for x in (k, v) for h in range(H_kv)]
        mod[str(mod["get_symbol"]())](_t(q), *heads, _t(np.array([position], np.int64)), out)
        want = kv.attention_step_int8(model_k, model_v, q[0].astype(np.float16), k[0], v[0], position, ks, vs, scale)
        np.testing.assert_array_equal(_bits(out.numpy()[0]), _bits(want))
        for slot, model in ((0, model_k), (1, model_v)):
            got = np.frombuffer(bytes(mod["get_state"](slot)), np.int8).reshape(H_kv, T, D)
            np.testing.assert_array_equal(got, model)
        saturated += int((np.abs(k[0]) / ks[:, None, None] > 127.5).sum())
    assert saturated > 0  # the saturating path ran too


def test_scales_are_the_calibration_runs_max_over_127(arch):
    """The scales of the default calibration equal max|x| / 127 of onnxruntime's cache (the float32 model, its
    own host loop) over the same prompts, per layer, K / V and KV head, to fp32 rounding of the two runtimes."""
    lm = compiled8(arch)
    ref = OrtDecoder(BUILDERS[arch])
    info = lm.meta["step"]
    peak = np.zeros((info["layers"], 2, info["kv_heads"]), np.float32)
    for ids in kv_calibration.default_prompts(info["vocab"], T):
        cache = [np.zeros(ref.shape, np.float32) for _ in ref.names[2:]]
        for p, token in enumerate(ids):
            cache = ref.step([np.array([[token]], np.int64), np.array([p], np.int64), *cache])[1:]
        for j, c in enumerate(cache):
            peak[j // 2, j % 2] = np.maximum(peak[j // 2, j % 2], np.abs(c).max(axis=(0, 2, 3)))
    np.testing.assert_allclose(np.array(lm.meta["kv_scales"]), peak / 127, rtol=1e-5)
    assert lm.meta["kv_dtype"] == "int8" and lm.resident


def test_int8_kv_logits_follow_onnxruntime(arch):
    """The prompts of test_generate.py (1, 5, 8 and 13 tokens), 16 new tokens each: every logits vector along
    onnxruntime's greedy path within INT8_KV_TOL x max(1, max|ref|) of onnxruntime's float32 model, and
    `generate`'s greedy tokens equal onnxruntime's."""
    lm = compiled8(arch)
    ref = OrtDecoder(BUILDERS[arch])
    worst = 0.0
    for length in (1, 5, S, 13):
        ids = np.random.default_rng(length).integers(0, lm.vocab, length)
        want_logits, want_tokens = ref.run(ids, 16)
        got = [lm.prefill(ids)] + [lm.decode(t) for t in want_tokens[:-1]]
        for g, w in zip(got, want_logits):
            worst = max(worst, float(np.abs(g - w).max()) / max(1.0, float(np.abs(w).max())))
        assert list(lm.generate(ids, max_new_tokens=16)) == want_tokens, length
    print(f"{arch}: int8 KV cache, worst |npu - onnxruntime| / max(1, max|ref|) = {worst:.4f}")
    assert worst <= INT8_KV_TOL


def test_decode_ddr_bytes_grow_by_the_int8_rows_read(arch):
    """With the cache in DDR, a decode step at position p moves a constant + the K and V rows [0, p] of every
    layer and KV head, each a DMA of D bytes (one per element) rounded up to whole bursts; kv_bytes counts D
    per row."""
    lm = tvm_npu.llm.compile(BUILDERS[arch], max_context=T, prefill_len=S, kv_dtype="int8", kv_placement="ddr")
    info, cfg = lm.meta["step"], lm.meta["config"]
    L, H_kv, D = info["layers"], info["kv_heads"], info["head_dim"]
    row = math.ceil(D / cfg["burst_bytes"]) * cfg["burst_bytes"]
    lm.prefill(np.arange(3))
    runner, rest, kv_read = lm._runners["decode"], set(), 0
    for p in range(3, 3 + 16):
        before = runner.counters()["ddr_bytes"]
        lm.decode(7)
        kv_read += 2 * L * H_kv * (p + 1) * D
        rest.add(runner.counters()["ddr_bytes"] - before - 2 * L * H_kv * (p + 1) * row)
    assert len(rest) == 1
    assert lm.profile()["decode"]["kv_bytes"] == kv_read


def test_int8_cache_reads_half_the_bytes_of_fp16_at_d_128():
    """A GPT-2 of head_dim 128 (one burst a row in int8, two in fp16), its cache in DDR: from one decode
    position to the next the DDR bytes grow by 2 * L * H_kv rows, 128 bytes each with the int8 cache and
    256 with the fp16 one: half; kv_bytes half too. Tokens stay onnxruntime's."""
    builder = lambda seq_len, max_context: gpt2_step(  # noqa: E731
        layers=1, d=256, heads=2, ffn=256, vocab=64, seq_len=seq_len, max_context=max_context
    )
    growth, kv_bytes = {}, {}
    ids = np.array([5, 9, 1])
    _, want_tokens = OrtDecoder(builder, 16).run(ids, 6)
    for kv_dtype in ("float16", "int8"):
        lm = tvm_npu.llm.compile(builder, max_context=16, prefill_len=4, kv_dtype=kv_dtype, kv_placement="ddr")
        assert list(lm.generate(ids, max_new_tokens=6)) == want_tokens
        lm.prefill(ids)
        ddr = [lm._runners["decode"].counters()["ddr_bytes"]]  # summed since the prefill
        for _ in range(4):
            lm.decode(7)
            ddr.append(lm._runners["decode"].counters()["ddr_bytes"])
        growth[kv_dtype] = set(np.diff(np.diff(ddr)).tolist())  # per step, then step to step
        kv_bytes[kv_dtype] = lm.profile()["decode"]["kv_bytes"]
    assert growth == {"float16": {2 * 1 * 2 * 256}, "int8": {2 * 1 * 2 * 128}}
    assert kv_bytes["int8"] * 2 == kv_bytes["float16"] == 2 * 2 * (4 + 5 + 6 + 7) * 128 * 2


def test_export_and_load_keep_the_int8_cache(tmp_path):
    lm = compiled8("llama")
    ids = np.array([4, 8, 15, 16, 23])
    want = lm.generate(ids, max_new_tokens=6)
    path = tmp_path / "lm.tar"
    lm.export_library(path)
    loaded = tvm_npu.llm.load(path)
    assert loaded.meta["kv_dtype"] == "int8" and loaded.meta["kv_scales"] == lm.meta["kv_scales"]
    np.testing.assert_array_equal(loaded.generate(ids, max_new_tokens=6), want)


@pytest.mark.parametrize(
    "kwargs, code, words",
    [
        (dict(kv_dtype="int4"), "ERR_INVALID_CONFIG", ('"float16"', '"int8"')),
        (dict(kv_dtype="fp16"), "ERR_INVALID_CONFIG", ('"float16"', '"int8"')),
        (dict(kv_dtype=8), "ERR_INVALID_CONFIG", ('"float16"', '"int8"')),
        (dict(kv_dtype="int8", kv_cache="host"), "ERR_INVALID_CONFIG", ('kv_cache="npu"',)),
        (dict(calibration=[np.arange(4)]), "ERR_INVALID_CONFIG", ('kv_dtype="int8"',)),
        (dict(kv_dtype="int8", calibration=[]), "ERR_SHAPE_MISMATCH", ("calibration",)),
        (dict(kv_dtype="int8", calibration=np.arange(4)), "ERR_SHAPE_MISMATCH", ("calibration",)),
        (dict(kv_dtype="int8", calibration=[np.ones((2, 2), np.int64)]), "ERR_SHAPE_MISMATCH", ("prompt 0",)),
        (dict(kv_dtype="int8", calibration=[np.arange(T + 1)]), "ERR_SHAPE_MISMATCH", (f"1..{T}",)),
        (dict(kv_dtype="int8", calibration=[np.array([1, 999])]), "ERR_LLM_TOKEN", ("prompt 0",)),
    ],
)
def test_bad_kv_dtype_and_calibration_are_coded(kwargs, code, words):
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.llm.compile(BUILDERS["gpt2"], max_context=T, prefill_len=S, **kwargs)
    assert err.value.code == code and all(w in str(err.value) for w in words), str(err.value)


def test_given_calibration_prompts_choose_the_scales():
    """calibration= replaces the default prompts: one prompt of two tokens gives other (smaller) scales than
    the default eight of 32, and the LLM still runs."""
    lm = tvm_npu.llm.compile(
        BUILDERS["gpt2"], max_context=T, prefill_len=S, kv_dtype="int8", calibration=[np.array([1, 2])]
    )
    default = np.array(compiled8("gpt2").meta["kv_scales"])
    mine = np.array(lm.meta["kv_scales"])
    assert mine.shape == default.shape and (mine <= default).all() and (mine < default).any()
    assert np.isfinite(lm.prefill(np.arange(5))).all()


def test_int8_on_a_model_whose_cache_stays_on_the_host_warns():
    """A mask the resident pattern refuses (-50, see test_kv_resident.py) keeps the cache on the host: asked
    for kv_dtype="int8", compile warns that there is no int8 cache, and the float32 cache gives onnxruntime's
    tokens."""
    builder = gpt2_mask_minus_50

    with pytest.warns(UserWarning, match="no int8 cache"):
        lm = tvm_npu.llm.compile(builder, max_context=T, prefill_len=S, kv_dtype="int8")
    assert not lm.resident and lm.meta["kv_dtype"] == "float32" and lm.meta["kv_scales"] is None
    ids = np.arange(3, 9)
    _, want_tokens = OrtDecoder(builder).run(ids, 4)
    assert list(lm.generate(ids, max_new_tokens=4)) == want_tokens
