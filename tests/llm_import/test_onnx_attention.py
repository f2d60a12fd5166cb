"""ONNX's own Attention op (opset 23 / 24, frontend/contrib/attention.py): single nodes written with
onnx.helper, imported by tvm_npu.from_onnx and run by TVM's llvm build, against onnxruntime 1.32 (which
runs Attention-23/24 on the CPU) on the same model, 1e-5; the refused forms are coded errors. Then
decoders whose attention is this op, through tvm_npu.llm.compile: greedy tokens and logits against
onnxruntime on the same file, the KV cache resident on the NPU."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tvm_npu
from conftest import run_cpu
from llm_import import helper_decoders
from llm_import.test_import_forms import HELPER_SEEDS, _assert_greedy_path_equal
from llm_import.test_step_model import PROMPT
from tvm_npu.contract.errors import NPUError

B, H, H_KV, S, P, D = 2, 4, 2, 3, 5, 8


def _model(feeds: dict, attrs: dict, outputs=("Y",), opset=23, inputs=None):
    """One Attention node reading `feeds` (name -> array, in the schema's order; None: an absent input)."""
    names = [n if a is not None else "" for n, a in feeds.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node("Attention", names, list(outputs), name="attn", **attrs)
    typed = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
        if a is not None
    ]
    rank = {"Y": feeds["Q"].ndim}  # the presents and qk_matmul_output: 4-D
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * rank.get(o, 4)) for o in outputs if o]
    graph = helper.make_graph([node], "attention", typed, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _feeds(rank=4, gqa=True, past=False, mask=None, seed=0):
    rng = np.random.default_rng(seed)
    h_kv = H_KV if gqa else H
    kv = S + 2  # cross-attention lengths differ from the query's
    shapes = {"Q": (B, H, S, D), "K": (B, h_kv, kv, D), "V": (B, h_kv, kv, D)}
    if rank == 3:
        shapes = {"Q": (B, S, H * D), "K": (B, kv, h_kv * D), "V": (B, kv, h_kv * D)}
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    total = kv + (P if past else 0)
    if mask == "bool":
        m = rng.random((B, 1, S, total)) < 0.7
        m[0, 0, 0] = False  # one query row that sees nothing: ONNX gives it a zero row
        feeds["attn_mask"] = m
    elif mask == "float":
        feeds["attn_mask"] = (rng.standard_normal((S, total)) * 2).astype(np.float32)
    else:
        feeds["attn_mask"] = None
    for n in ("past_key", "past_value"):
        feeds[n] = rng.standard_normal((B, h_kv, P, D)).astype(np.float32) if past else None
    return feeds, h_kv


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v for k, v in feeds.items() if v is not None})


def _check(model, feeds):
    want = _ort(model, feeds)
    got = run_cpu(tvm_npu.from_onnx(model), *[v for v in feeds.values() if v is not None])
    got = got if isinstance(got, list) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max())))
    return want


CASES = [
    dict(rank=rank, gqa=gqa, past=past, mask=mask, causal=causal)
    for rank in (4, 3)
    for gqa in (False, True)
    for past in (False, True)
    for mask in (None, "bool", "float")
    for causal in (0, 1)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_attention_matches_onnxruntime(case):
    """Every combination of the 4-D / 3-D forms, grouped-query heads, the in-op past append (with its
    present outputs), a boolean / float mask and is_causal (bottom-right with a past), default scale."""
    feeds, h_kv = _feeds(case["rank"], case["gqa"], case["past"], case["mask"])
    attrs = {"is_causal": case["causal"]}
    if case["rank"] == 3:
        attrs.update(q_num_heads=H, kv_num_heads=h_kv)
    outputs = ("Y", "present_key", "present_value") if case["past"] else ("Y",)
    want = _check(_model(feeds, attrs, outputs), feeds)
    if case["mask"] == "bool" and not case["causal"]:
        assert np.all(want[0][0, 0, 0] == 0) if case["rank"] == 4 else np.all(want[0][0, 0, :D] == 0)


@pytest.mark.parametrize("opset", [23, 24])
@pytest.mark.parametrize("attrs", [{"scale": 0.3}, {"softcap": 2.0}, {"softcap": 1.5, "scale": 0.7, "is_causal": 1}])
def test_scale_and_softcap_match_onnxruntime(attrs, opset):
    feeds, _ = _feeds(4, True, True, "float", seed=1)
    feeds["attn_mask"] = None if attrs.get("is_causal") else feeds["attn_mask"]
    feeds["Q"] *= 4.0  # scores beyond the cap, where tanh bends
    _check(_model(feeds, attrs, ("Y", "present_key", "present_value"), opset), feeds)


def test_softmax_precision_float32_is_imported():
    feeds, _ = _feeds(4, False, False, "bool", seed=2)
    _check(_model(feeds, {"softmax_precision": TensorProto.FLOAT}), feeds)


def _refused(model, code: str, *words):
    with pytest.raises(NPUError) as err:
        tvm_npu.from_onnx(model)
    assert err.value.code == code, err.value
    for word in words:
        assert word in str(err.value), err.value


def test_refused_forms_are_coded_errors():
    feeds, _ = _feeds(4, True, False, None)
    _refused(_model(feeds, {"softmax_precision": TensorProto.FLOAT16}), "ERR_OP_NOT_SUPPORTED", "softmax_precision")
    _refused(_model(feeds, {"softcap": -1.0}), "ERR_INVALID_MODEL", "softcap")
    _refused(_model(feeds, {"scale": 0.0}), "ERR_INVALID_MODEL", "scale")
    _refused(_model(feeds, {}, ("Y", "", "", "qk")), "ERR_OP_NOT_SUPPORTED", "qk_matmul_output")
    with_len = dict(feeds, nonpad_kv_seqlen=np.full(B, S + 2, np.int64))
    _refused(_model(with_len, {}, opset=24), "ERR_OP_NOT_SUPPORTED", "nonpad_kv_seqlen")
    short = dict(feeds, attn_mask=np.ones((S, 2), bool))
    _refused(_model(short, {}), "ERR_INVALID_MODEL", "attn_mask", "total length")
    odd = dict(feeds, K=np.zeros((B, 3, S, D), np.float32), V=np.zeros((B, 3, S, D), np.float32))
    _refused(_model(odd, {}), "ERR_INVALID_MODEL", "multiple")
    three, _ = _feeds(3, True, False, None)
    _refused(_model(three, {}), "ERR_INVALID_MODEL", "q_num_heads")
    _refused(_model(three, {"q_num_heads": 3, "kv_num_heads": H_KV}), "ERR_INVALID_MODEL", "split")
    half = dict(feeds, past_key=np.zeros((B, H_KV, P, D), np.float32))
    _refused(_model(half, {}), "ERR_INVALID_MODEL", "past_value")


# --- decoders whose attention is this op -------------------------------------------------------------

DECODERS = [("helper", "gpt2"), ("helper", "llama"), ("dynamo23", "gpt2"), ("dynamo23", "llama"), ("dynamo24", "llama")]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """decoder(producer, family) -> path: onnx.helper's decoder-with-past with the cache append inside
    each layer's Attention (GPT-2's 3-D form, Llama's 4-D grouped-query one), or transformers' sdpa model
    exported by torch.onnx.export(dynamo=True, opset_version=23 / 24), which writes the op with the
    append outside it."""
    folder = tmp_path_factory.mktemp("onnx_attention")

    def get(producer: str, family: str) -> str:
        path = str(folder / f"{producer}_{family}.onnx")
        if producer == "helper":
            return helper_decoders.save(family, path, HELPER_SEEDS[family], attention_op=True)
        pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript (pip install '.[llm]')")
        pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
        from tvm_npu.models import hf_export

        return hf_export.export(family, path, 0, "sdpa", exporter="dynamo", opset=int(producer[-2:]))

    return get


@pytest.mark.parametrize("producer,family", DECODERS)
def test_decoder_with_the_op_keeps_its_cache_on_the_npu_and_matches_onnxruntime(decoder, producer, family):
    """Greedy tokens along 16 decodes equal onnxruntime's on the same file, every logits vector within
    1e-2 x max(1, max|ref|), every layer's attention in its resident-cache region."""
    path = decoder(producer, family)
    assert sum(n.op_type == "Attention" for n in onnx.load(path).graph.node) == 2
    lm = tvm_npu.llm.compile(path, max_context=32, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    for report in lm.reports.values():
        assert len(report.kv_cache["regions"]) == 2
    _assert_greedy_path_equal(path, lm)


def test_in_op_append_costs_the_cycles_of_the_concat_form(tmp_path):
    """The same weights written with the append inside Attention and as Concat + MatMul / Softmax: the
    same NPU program, so the same decode cycles per token and the same logits."""
    lms = [
        tvm_npu.llm.compile(
            helper_decoders.save("llama", str(tmp_path / f"{op}.onnx"), 0, attention_op=op),
            max_context=32,
            prefill_len=8,
        )
        for op in (True, False)
    ]
    outs = []
    for lm in lms:
        lm.generate(np.array(PROMPT, np.int64), max_new_tokens=8)
        outs.append((lm.profile()["decode"], lm.decode(7)))
    (a, la), (b, lb) = outs
    assert a["cycles"] == b["cycles"] and a["tokens"] == b["tokens"]
    np.testing.assert_allclose(la, lb, rtol=0, atol=1e-5 * max(1.0, np.abs(lb).max()))


def test_is_causal_in_a_decoder_with_symbolic_lengths_is_a_coded_error(tmp_path):
    model = helper_decoders.build("gpt2", 1, attention_op=True)
    for node in model.graph.node:
        if node.op_type == "Attention":
            node.attribute.append(helper.make_attribute("is_causal", 1))
    with pytest.raises(NPUError) as err:
        tvm_npu.llm.compile(model, max_context=32, prefill_len=8)
    assert err.value.code == "ERR_OP_NOT_SUPPORTED" and "attn_mask" in str(err.value), err.value


def test_a_softcap_inside_the_op_stays_resident(tmp_path):
    """softcap=5 on every layer's Attention (Gemma2's attention softcap, written in the op): the resident
    region's tanh(s / cap) * cap, onnxruntime's greedy tokens."""
    model = helper_decoders.build("llama", HELPER_SEEDS["llama"], attention_op=True)
    for node in model.graph.node:
        if node.op_type == "Attention":
            node.attribute.append(helper.make_attribute("softcap", 5.0))
    path = str(tmp_path / "softcap.onnx")
    onnx.save(model, path)
    lm = tvm_npu.llm.compile(path, max_context=32, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu"
    for report in lm.reports.values():
        tanh = [p for p in report.placements if p.op == "relax.tanh" and p.composite == "npu.kv_attention"]
        assert len(tanh) == 2 and all(p.device == "npu" for p in tanh)
    _assert_greedy_path_equal(path, lm)
