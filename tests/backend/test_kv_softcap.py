"""An attention softcap tanh(scale * s / cap) * cap in the resident attention region (backend/plan/kv_plan.py,
Gemma2's attn_logit_softcapping): the plan's ELTWISE, UNARY tanh and scaled causal SOFTMAX run by the reference
NPU equal the numpy model of docs/npu.md bit for bit (the cache in DDR or SRAM, fp16 or int8); the cost model
equals the runtime's cycles; a step model with a cap small enough that tanh bends the scores compiles with the
cache resident and gives onnxruntime's greedy tokens; the softcaps the region cannot take are refused, coded.

The numpy model's tanh is the C library's tanhf, the function the reference NPU's fp16 UNARY evaluates (docs/npu.md
section 2: "within 1 fp16 ulp" of the exact tanh, because libms differ in the last fp32 bit); every other step is
an IEEE operation of tests/npu_ref, in the contract's order."""

import ctypes
import ctypes.util
import dataclasses
import functools

import numpy as np
import pytest
import tvm
from onnx import helper, numpy_helper

import tvm_npu
from kv_streams import run_region_steps
from llm.reference import OrtDecoder
from npu_ref import fp16, int8, kv
from tvm_npu import runtime
from tvm_npu.backend.plan.cost_model import estimate
from tvm_npu.backend.plan.kv_plan import plan_kv_attention
from tvm_npu.backend.verify import verify
from tvm_npu.contract import stream
from tvm_npu.contract.config import get_config
from tvm_npu.frontend.onnx import from_onnx
from tvm_npu.models.decoder import llama_step, step_info
from tvm_npu.partition.kv_cache_check import KVLayer, find_layers

CFG = get_config("npu-ref")
H, H_KV, T, D = 4, 2, 12, 16
SCALE, CAP = 0.25, 1.5  # |q . k| * SCALE / CAP reaches 2-4 for the inputs below: tanh saturates
ROW = 128  # one cache row of D = 16 (fp16 32 bytes, int8 16), aligned

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.tanhf.restype, _libm.tanhf.argtypes = ctypes.c_float, [ctypes.c_float]
_tanhf = np.vectorize(lambda x: _libm.tanhf(float(x)), otypes=[np.float32])


def _t(x):
    return tvm.runtime.tensor(np.ascontiguousarray(x))


def _bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def capped_scores(scores, scale, cap):
    """The region's softcap on fp16 scores before the SOFTMAX: ELTWISE multiply by the scalar fp16(scale / cap),
    UNARY tanh (fp32 tanhf of the fp16 value, rounded to fp16)."""
    z = fp16.eltwise("multiply", scores, np.float16(scale / cap))
    return _tanhf(z.astype(np.float32)).astype(np.float16)


def capped_step(cache_k, cache_v, q, k_new, v_new, position, scale, cap, kv_scales=None):
    """npu_ref.kv.attention_step (an int8 cache: its int8 form, `kv_scales` the K and V scales per KV head)
    with the softcap between Q x K^T and the causal SOFTMAX, whose scale is cap."""
    heads, queries, _ = q.shape
    group, end = heads // cache_k.shape[0], position + queries
    if kv_scales is None:
        cache_k[:, position:end], cache_v[:, position:end] = k_new, v_new

        def mm(a, b, which, **kw):
            return fp16.matmul(a, b, **kw)
    else:
        for h in range(cache_k.shape[0]):
            cache_k[h, position:end] = int8.quantize(k_new[h], kv_scales[0][h], 0)
            cache_v[h, position:end] = int8.quantize(v_new[h], kv_scales[1][h], 0)

        def mm(a, b, which, **kw):
            return fp16.matmul_b8(a, b, kv_scales[which], **kw)

    scores = mm(q, cache_k[:, :end], 0, b_group=group, b_transposed=True)
    probs = kv.causal_softmax(capped_scores(scores, scale, cap).reshape(heads * queries, end), position, queries, cap)
    return mm(probs.reshape(heads, queries, end), cache_v[:, :end], 1, b_group=group)


def _layer(S, cap=CAP):
    return KVLayer(0, None, None, None, None, SCALE, H, H_KV, S, T, D, softcap=cap)


KV_SCALES = ([0.02, 0.03], [0.025, 0.02])


@pytest.mark.parametrize("placement, kv_scales", [("ddr", None), ("sram", None), ("ddr", KV_SCALES)])
def test_the_softcap_plan_matches_the_numpy_model_bit_for_bit(placement, kv_scales):
    """A prefill (S = 2) at 0 and 2, then decodes (S = 1) at 4..10 on one shared state: every output equals
    the numpy model's bit for bit; the plan verifies at its position limit."""
    area = 2 * H_KV * T * ROW if placement == "sram" else 0
    mods = {}
    for S in (2, 1):
        planned = plan_kv_attention(CFG, _layer(S), (0, 1), 3, kv_scales, area)
        verify(planned)
        assert [c.op for c in planned.commands].count("UNARY") == H_KV
        mods[S] = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
    dt = np.float16 if kv_scales is None else np.int8
    model_k, model_v = np.zeros((H_KV, T, D), dt), np.zeros((H_KV, T, D), dt)
    steps = run_region_steps(mods, H, H_KV, D, np.random.default_rng(1), 4.0, per_head=kv_scales is not None)
    for position, q, k, v, out in steps:
        new = (k[0].astype(np.float16), v[0].astype(np.float16)) if kv_scales is None else (k[0], v[0])
        want = capped_step(model_k, model_v, q[0].astype(np.float16), *new, position, SCALE, CAP, kv_scales)
        np.testing.assert_array_equal(_bits(out[0].astype(np.float16)), _bits(want))


def test_the_softcap_changes_the_result():
    """The cap bends these scores: without the softcap (the scores times SCALE into the SOFTMAX) the same
    inputs give outputs far from the capped ones, so the bit-exact test above could fail."""
    rng = np.random.default_rng(1)
    q = (4 * rng.standard_normal((H, 2, D))).astype(np.float16)
    k, v = (rng.standard_normal((H_KV, 2, D)).astype(np.float16) for _ in range(2))
    caches = [np.zeros((H_KV, T, D), np.float16) for _ in range(4)]
    capped = capped_step(caches[0], caches[1], q, k, v, 0, SCALE, CAP)
    plain = kv.attention_step(caches[2], caches[3], q, k, v, 0, np.float32(SCALE))
    assert np.abs(capped.astype(np.float32) - plain).max() > 0.1


@pytest.mark.parametrize("position", [0, 5, 10])
def test_the_cost_model_of_the_softcap_plan_is_the_runtime_cycle_model(position):
    planned = plan_kv_attention(CFG, _layer(2), (0, 1), 0)
    mod = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
    rng = np.random.default_rng(position)
    q = rng.standard_normal((1, H, 2, D)).astype(np.float32)
    k, v = (rng.standard_normal((1, H_KV, 2, D)).astype(np.float32) for _ in range(2))
    mod["kv"](*[_t(x) for x in (q, k, v, np.array([position], np.int64))], _t(np.zeros((1, H, 2, D), np.float32)))
    last = runtime.profile_of(mod)["last"]
    est = estimate(CFG, planned.commands, position)
    assert last["total_cycles"] == est.total_cycles
    assert last["ddr_read_bytes"] + last["ddr_write_bytes"] == est.ddr_read_bytes + est.ddr_write_bytes
    plain = plan_kv_attention(CFG, _layer(2, 0.0), (0, 1), 0)  # the ELTWISE and UNARY add vector cycles
    assert est.total_cycles > estimate(CFG, plain.commands, position).total_cycles


# --- a step model of tvm_npu.models.decoder with the softcap written in (Div, Tanh, Mul before the mask) ---


def with_softcap(model, cap: float, back: float | None = None):
    """`model` with scores = tanh(scores / cap) * back (back = cap: a softcap) between each layer's scaled
    scores and the mask's Add."""
    out_of = {o: n for n in model.graph.node for o in n.output}
    nodes = []
    for n in model.graph.node:
        src = out_of.get(n.input[0]) if n.op_type == "Add" and n.input else None
        if src is not None and src.op_type == "Div" and out_of.get(src.input[0], src).op_type == "MatMul":
            x, tag = n.input[0], n.input[0] + "_cap"
            c, b = (numpy_helper.from_array(np.array(v, np.float32), f"{tag}_{w}") for w, v in
                    (("c", cap), ("b", cap if back is None else back)))  # fmt: skip
            model.graph.initializer.extend([c, b])
            nodes += [
                helper.make_node("Div", [x, c.name], [f"{tag}_d"]),
                helper.make_node("Tanh", [f"{tag}_d"], [f"{tag}_t"]),
                helper.make_node("Mul", [f"{tag}_t", b.name], [f"{tag}_m"]),
            ]
            n.input[0] = f"{tag}_m"
        nodes.append(n)
    assert len(nodes) > len(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _llama(seq_len=1, max_context=32):
    return llama_step(layers=2, d=64, heads=4, kv_heads=2, ffn=128, vocab=256, seq_len=seq_len, max_context=max_context)


def _capped_llama(cap, seq_len=1, max_context=32, back=None):
    return with_softcap(_llama(seq_len, max_context), cap, back)


def test_a_capped_step_model_keeps_its_cache_resident_with_onnxruntime_tokens():
    """llama_step with a softcap of 1 (its scaled scores reach 2-3, so tanh bends them): resident, 12 greedy
    tokens after a 5-token prompt equal to onnxruntime's on the same step model, logits within 1e-2 x max(1,
    max|ref|); onnxruntime without the softcap gives other logits (the cap matters)."""
    build = functools.partial(_capped_llama, 1.0)
    lm = tvm_npu.llm.compile(build, max_context=32, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu"
    prompt, new = [3, 141, 59, 26, 5], 12
    ref_logits, ref_tokens = OrtDecoder(build, 32).run(prompt, new)
    plain, _ = OrtDecoder(_llama, 32).run(prompt, new)
    logits, tokens = [lm.prefill(np.array(prompt, np.int64))], []
    for _ in range(new):
        tokens.append(int(logits[-1].argmax()))
        logits.append(lm.decode(tokens[-1]))
    for got, want in zip(logits, ref_logits):
        assert np.abs(got - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
    assert tokens == ref_tokens and len(set(tokens)) > 1
    assert max(np.abs(p - w).max() for p, w in zip(plain, ref_logits)) > 0.1


@pytest.mark.parametrize(
    "cap, back, why",
    [
        (2.0, 3.0, "the tanh of the scores is not tanh(s / cap) * cap"),
        (1e6, None, "the scores' factor over the cap, 2.5e-07, is no fp16 normal"),
    ],
)
def test_a_softcap_the_region_cannot_take_is_refused_coded(cap, back, why):
    mod = from_onnx(_capped_llama(cap, back=back))
    log = []
    assert find_layers(mod["main"], step_info(_capped_llama(cap, back=back)), CFG, log) is None
    assert log[0].code == "NPU_E_KV_CACHE" and why in log[0].detail and "softcap" in log[0].reason
