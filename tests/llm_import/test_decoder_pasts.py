"""A decoder whose KV-cache inputs and outputs have other names than optimum's (issue 31): found by data
flow (frontend/decoder_pasts.py). Each case takes a decoder with the standard names, renames its pasts
and presents to other exporters' spellings (names that even contradict the layer order and the key /
value roles) and shuffles the graph inputs with onnx's API; the importer must give the same model as on
the original file, checked against onnxruntime running the ORIGINAL file. Then the ambiguous structures:
coded errors naming the inputs."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from llm_import import helper_decoders
from llm_import.ort_reference import OrtDecoder
from tvm_npu import NPUError
from tvm_npu.frontend import decoder_pasts, to_step_model
from tvm_npu.models import decoder as step_models

T, S, NEW = 32, 8, 16
PROMPT = [3, 17, 200, 45, 9]
HELPER_SEEDS = {"gpt2": 1, "llama": 0}  # test_import_forms.py's: greedy paths that move
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
# layer 0's key named like layer 3's, its value like a key of layer 1, layer 1's key like a layer-0 value...
PASTS = {
    "past_key_values.0.key": "past_k_3",
    "past_key_values.0.value": "cache.layer1.k",
    "past_key_values.1.key": "in_cache_0",
    "past_key_values.1.value": "a.past.v",
}
PRESENTS = {
    "present.0.key": "out_cache_9",
    "present.0.value": "cache.layer1.k.out",
    "present.1.key": "kv/0",
    "present.1.value": "b.present",
}


def _renamed(model: onnx.ModelProto, pasts=PASTS, presents=PRESENTS, seed: int = 3) -> onnx.ModelProto:
    """A copy with the inputs / outputs renamed and the graph inputs in a shuffled order (checked by ONNX's
    checker unless its weights are external data, not loaded)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {**pasts, **presents}
    graph = out.graph
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    for vi in [*graph.input, *graph.output]:
        vi.name = names.get(vi.name, vi.name)
    inputs = list(graph.input)
    order = np.random.default_rng(seed).permutation(len(inputs))
    assert list(order) != sorted(order)
    del graph.input[:]
    graph.input.extend(inputs[k] for k in order)
    if not any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer):
        onnx.checker.check_model(out)
    return out


def _code(fn):
    with pytest.raises(NPUError) as err:
        fn()
    return err.value.code, str(err.value)


def _feed(model: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(0)
    feed = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feed[vi.name] = rng.integers(0, 256, shape).astype(np.int64)
        elif vi.name == "position":
            feed[vi.name] = np.array([5], np.int64)
        else:
            feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def _assert_same_step_models(original: onnx.ModelProto, renamed: onnx.ModelProto, seq: int) -> None:
    """The step models of both files, run by onnxruntime on one feed: equal outputs, bit for bit."""
    steps = [to_step_model(m, T, seq) for m in (original, renamed)]
    assert [i.name for i in steps[0].graph.input] == [i.name for i in steps[1].graph.input]
    feed = _feed(steps[0])
    want, got = (ort.InferenceSession(s.SerializeToString()).run(None, feed) for s in steps)
    assert len(want) == len(got) == 5
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_renamed_shuffled_helper_decoder_generates_onnxruntime_tokens_of_the_original(tmp_path, arch):
    """llm.compile of the renamed, shuffled file: 16 greedy tokens equal to onnxruntime's on the original
    file, every logits vector within 1e-2 x max(1, max|ref|), the cache resident."""
    original = str(tmp_path / "original.onnx")
    helper_decoders.save(arch, original, HELPER_SEEDS[arch])
    renamed = str(tmp_path / "renamed.onnx")
    onnx.save(_renamed(onnx.load(original)), renamed)
    lm = tvm_npu.llm.compile(renamed, max_context=T, prefill_len=S)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    step = lm.meta["step"]
    ref = OrtDecoder(original, step["layers"], step["kv_heads"], step["head_dim"])
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(PROMPT)
    tokens, ref_tokens = [], []
    for _ in range(NEW):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref([ref_tokens[-1]])
    assert tokens == ref_tokens and len(set(ref_tokens)) > 1


FORMS = [("gpt2", {}), ("llama", {}), ("llama", {"einsum": True}), ("gpt2", {"window": T})]


@pytest.mark.parametrize("arch,form", FORMS)
def test_renamed_step_model_equals_the_original_one(arch, form):
    """Prefill step models (S 4) of the renamed file and the original: onnxruntime's outputs identical
    (the einsum attention and the sliding-window crops too)."""
    model = helper_decoders.build(arch, **form)
    _assert_same_step_models(model, _renamed(model), 4)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_renamed_torchscript_export_gives_the_original_step_model(hf_export, arch):
    """transformers' exports through torch.onnx (TorchScript, sdpa): the decode step models identical."""
    model = onnx.load(hf_export(arch, "sdpa"))
    _assert_same_step_models(model, _renamed(model), 1)


def _fixture_models():
    found = []
    for producer in ("genai", "optimum"):
        folder = os.path.join(FIXTURES, producer)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            found.append(pytest.param(os.path.join(folder, name, "model.onnx"), id=f"{producer}-{name}"))
    return found


@pytest.mark.parametrize("path", _fixture_models())
def test_standardize_recovers_the_exporters_names(path):
    """onnxruntime-genai's builder (GroupQueryAttention: the pasts are its inputs 3 / 4) and optimum's
    exporter: renamed and shuffled, standardize gives back exactly the names the exporter wrote."""
    model = onnx.load(path, load_external_data=False)
    renamed = _renamed(model)
    back = decoder_pasts.standardize(renamed)
    assert back == {v: k for k, v in {**PASTS, **PRESENTS}.items()}
    assert [o.name for o in renamed.graph.output] == [o.name for o in model.graph.output]
    assert sorted(i.name for i in renamed.graph.input) == sorted(i.name for i in model.graph.input)


def test_standard_names_are_left_as_they_are():
    model = helper_decoders.build("llama")
    assert decoder_pasts.standardize(model) == {}
    assert [i.name for i in model.graph.input] == [i.name for i in helper_decoders.build("llama").graph.input]


def test_a_step_model_is_not_a_decoder_with_past():
    """The static cache's ScatterND is no cache append: a step model has no pasts (llm.compile takes it
    as a step model, as before)."""
    step = step_models.gpt2_step(layers=2, seq_len=1, max_context=T)
    assert decoder_pasts.find(step.graph) == []


# the ambiguous structures: each edit of the renamed GPT-2 (pasts PASTS), the inputs named, the message


def _mul_into(model, src: str, dst: str) -> None:
    """`dst`'s readers read Mul(src, dst) instead: `src`'s data now reaches where `dst`'s goes."""
    for node in model.graph.node:
        node.input[:] = [f"{dst}*" if n == dst else n for n in node.input]
    model.graph.node.insert(0, helper.make_node("Mul", [src, dst], [f"{dst}*"], name=f"mix_{dst}"))


def _extra_past(model, name: str) -> str:
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["b", 4, "p", 16]))
    return name


def _frozen(model, name: str) -> None:
    """Input `name` becomes an initializer (no longer a cache input)."""
    (vi,) = [i for i in model.graph.input if i.name == name]
    model.graph.input.remove(vi)
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 4, 0, 16), np.float32), name))


AMBIGUOUS = {
    "both roles": (lambda m: _mul_into(m, "past_k_3", "cache.layer1.k"),
                   "input 'past_k_3' reaches both a Q x K^T"),
    "two layers": (lambda m: _mul_into(m, "past_k_3", "in_cache_0"), "input 'past_k_3' reaches the attention of 2"),
    "two keys": (lambda m: _mul_into(m, _extra_past(m, "another_k"), "past_k_3"),
                 "inputs 'another_k' and 'past_k_3' are both the key of Softmax"),
    "counts": (lambda m: _frozen(m, "a.past.v"), "2 key inputs ['in_cache_0', 'past_k_3'] but 1 value inputs"),
    "a layer without both": (lambda m: [_frozen(m, "past_k_3"), _frozen(m, "a.past.v")],
                             "input 'cache.layer1.k' is the value of Softmax"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(AMBIGUOUS))
def test_ambiguous_caches_are_refused_naming_the_inputs(case):
    edit, says = AMBIGUOUS[case]
    model = _renamed(helper_decoders.build("gpt2"))
    edit(model)
    code, msg = _code(lambda: to_step_model(model, T, 1))
    assert code == "ERR_OP_NOT_SUPPORTED" and says in msg, msg
    assert "rename the inputs past_key_values.{i}.key / past_key_values.{i}.value" in msg


def test_an_ambiguous_file_is_refused_by_llm_compile(tmp_path):
    model = _renamed(helper_decoders.build("gpt2"))
    _mul_into(model, "past_k_3", "cache.layer1.k")
    path = str(tmp_path / "ambiguous.onnx")
    onnx.save(model, path)
    code, msg = _code(lambda: tvm_npu.llm.compile(path, max_context=T, prefill_len=S))
    assert code == "ERR_OP_NOT_SUPPORTED" and "'past_k_3' reaches both" in msg


def test_a_standard_name_held_by_another_tensor_is_refused():
    model = _renamed(helper_decoders.build("gpt2"))
    node = next(n for n in model.graph.node if n.op_type == "Softmax")
    old = node.output[0]
    for n in model.graph.node:
        n.input[:] = ["past_key_values.1.value" if i == old else i for i in n.input]
    node.output[0] = "past_key_values.1.value"
    code, msg = _code(lambda: to_step_model(model, T, 1))
    assert code == "ERR_OP_NOT_SUPPORTED" and "'past_key_values.1.value' is already another tensor's" in msg
