"""The import matrix of issue 31 item 1: each (producer, family) that imports, compiled by
`tvm_npu.llm.compile` (max_context 32, prefill bucket 8), against onnxruntime running the same file with
its growing past: greedy tokens along 16 decodes equal, every logits vector within 1e-2 x max(1, max|ref|),
the KV cache resident. Producers: onnx.helper (tests/llm_import/helper_decoders.py), torch.onnx's
TorchScript exporter and its dynamo exporter (models/hf_export.py). Then the bad inputs: coded errors
naming the node."""

import numpy as np
import pytest
from onnx import helper

import tvm_npu
from llm_import import helper_decoders
from llm_import.test_step_model import PROMPT, _kv, _Reference
from tvm_npu import NPUError
from tvm_npu.frontend import to_step_model

T, DECODES = 32, 16
CASES = [("helper", "gpt2"), ("helper", "llama")]
CASES += [("torchscript", f) for f in ("gpt2", "llama", "qwen2", "qwen3", "mistral", "phi3", "gemma")]
CASES += [("dynamo", f) for f in ("gpt2", "llama", "qwen2", "qwen3", "mistral", "phi3", "gemma")]
# onnx.helper seeds whose greedy path moves (many distinct tokens) with top-2 margins > 0.02
HELPER_SEEDS = {"gpt2": 1, "llama": 0}
# hf_export seeds (torch's) with the widest top-2 margins along the path among seeds 0-5 (measured in torch)
TORCH_SEEDS = {"gemma": 1, "gemma2": 0}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """made(producer, family) -> the path of that export, written once per module."""
    folder = tmp_path_factory.mktemp("forms")
    paths = {}

    def get(producer: str, family: str) -> str:
        if (producer, family) not in paths:
            path = str(folder / f"{producer}_{family}.onnx")
            if producer == "helper":
                paths[producer, family] = helper_decoders.save(family, path, HELPER_SEEDS[family])
            else:
                pytest.importorskip("torch", reason="needs torch to export (pip install '.[llm]')")
                pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
                from tvm_npu.models import hf_export

                # sdpa: transformers' default attention (dynamo writes its K^T as 3-D Reshape/Transpose);
                # Gemma2 has no sdpa form in transformers 5.24
                attn = "eager" if family == "gemma2" else "sdpa"
                paths[producer, family] = hf_export.export(
                    family, path, TORCH_SEEDS.get(family, 0), attn, exporter=producer
                )
        return paths[producer, family]

    return get


def _assert_greedy_path_equal(path, lm, context=T, decodes=DECODES):
    ref = _Reference(path, *_kv(to_step_model(path, context, 1)))
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0][0, -1]
    tokens, ref_tokens = [], []
    for _ in range(decodes):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref(np.array([[ref_tokens[-1]]], np.int64))[0][0, -1]
    assert tokens == ref_tokens
    assert len(set(ref_tokens)) > 1  # a path that moves: a constant token would hide a wrong cache


@pytest.mark.parametrize("producer,family", CASES)
def test_greedy_tokens_and_logits_equal_onnxruntime_with_the_cache_resident(made, producer, family):
    path = made(producer, family)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    _assert_greedy_path_equal(path, lm)


@pytest.mark.parametrize("producer", ["torchscript", "dynamo"])
def test_gemma2_softcaps_run_with_the_cache_resident(made, producer):
    """Gemma2 through DynamicCache(config=) (crop Slices of its 4096 window): the final logit softcap runs,
    and the attention softcap tanh(s / 50) * 50 between the scores and the mask runs in the resident
    attention region (ELTWISE, UNARY tanh, the SOFTMAX's scale): the cache stays on the NPU."""
    path = made(producer, "gemma2")
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    for report in lm.reports.values():  # each layer's attention tanh runs in its resident region
        tanh = {p.region for p in report.placements if p.op == "relax.tanh"}
        assert {"tvm_npu_kv_attention_0", "tvm_npu_kv_attention_1"} <= tanh, tanh
    _assert_greedy_path_equal(path, lm)


def _code(fn):
    with pytest.raises(NPUError) as err:
        fn()
    return err.value.code, str(err.value)


def test_the_vocabulary_comes_from_the_lm_head_when_nothing_declares_it():
    """logits declared fully symbolic: the vocabulary is the LM head MatMul's N."""
    model = helper_decoders.build("gpt2", vocab=200)
    out = model.graph.output[0]
    out.CopyFrom(helper.make_tensor_value_info("logits", out.type.tensor_type.elem_type, ["b", "s", "v"]))
    step = to_step_model(model, T, 1)
    assert [d.dim_value for d in step.graph.output[0].type.tensor_type.shape.dim] == [1, 1, 200]


def test_no_vocabulary_anywhere_is_refused():
    """logits symbolic and computed by a MatMul of two activations: no vocabulary to read, refused."""
    model = helper_decoders.build("gpt2")
    out = model.graph.output[0]
    out.CopyFrom(helper.make_tensor_value_info("logits", out.type.tensor_type.elem_type, ["b", "s", "v"]))
    head = next(n for n in model.graph.node if n.output[0] == "logits")
    w = next(t for t in model.graph.initializer if t.name == head.input[1])
    model.graph.initializer.remove(w)
    model.graph.node.insert(0, helper.make_node("Identity", ["head_w"], [w.name]))
    model.graph.input.append(helper.make_tensor_value_info("head_w", w.data_type, ["d", "v"]))
    code, msg = _code(lambda: to_step_model(model, T, 1))
    assert code == "ERR_OP_NOT_SUPPORTED" and "no static vocabulary dimension" in msg


def test_a_sliding_window_at_least_max_context_is_plain_causal(made):
    """The append inside crop Slices of a window of 32 rows: at max_context 32 they keep every row (dropped),
    the cache resident, the tokens onnxruntime's."""
    path = helper_decoders.save("llama", made("helper", "llama").replace(".onnx", "_w32.onnx"), 0, window=T)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu"
    _assert_greedy_path_equal(path, lm)


def test_attention_written_as_einsum_keeps_the_cache_resident(made):
    """Q x K^T as Einsum("bhqd,bhkd->bhqk") (a MatMul with a transposed operand) and P x V as Einsum."""
    path = helper_decoders.save("llama", made("helper", "llama").replace(".onnx", "_einsum.onnx"), 0, einsum=True)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    _assert_greedy_path_equal(path, lm)


def test_mistral_with_a_window_equal_to_max_context_is_exact(made):
    """Mistral's window of 8 through DynamicCache(config=): at max_context 8 every query sees all its rows
    (the present's crop to 7 rows only drops a row no step reaches)."""
    pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
    from tvm_npu.models import hf_export

    path = hf_export.export("mistral", made("helper", "gpt2").replace(".onnx", "_mistral_w8.onnx"),
                            config={"sliding_window": 8})  # fmt: skip
    lm = tvm_npu.llm.compile(path, max_context=8, prefill_len=8)
    assert lm.resident
    _assert_greedy_path_equal(path, lm, context=8, decodes=3)  # the prefill, positions 5 and 6 compared


def test_a_window_crop_under_a_causal_mask_is_refused_naming_the_layer():
    """The cache cropped to 7 past rows, the mask causal: the step model's whole cache would show a query
    rows the export drops (tests/llm_import/test_sliding_window.py: the crop under its band)."""
    model = helper_decoders.build("gpt2", window=8)
    code, msg = _code(lambda: to_step_model(model, T, 1))
    assert code == "ERR_OP_NOT_SUPPORTED"
    assert "layer 0: the export keeps only the last 7 past rows of its cache (a sliding window of 8)" in msg
    assert "which shows every earlier row (causal)" in msg and "export the layer with its sliding-window mask" in msg


def test_two_candidate_caches_are_refused_naming_the_node():
    """Layer 0's past concatenated twice along the sequence axis (a second cache returned as an output)."""
    model = helper_decoders.build("gpt2")
    concat = next(n for n in model.graph.node if n.op_type == "Concat" and n.output[0] == "present.0.key")
    twin = helper.make_node("Concat", list(concat.input), ["other_cache"], name="twin_concat", axis=2)
    model.graph.node.append(twin)
    model.graph.output.append(helper.make_empty_tensor_value_info("other_cache"))
    code, msg = _code(lambda: to_step_model(model, T, 1))
    assert code == "ERR_OP_NOT_SUPPORTED"
    assert "two candidate cache appends of past_key_values.0.key" in msg and "twin_concat" in msg


def test_a_mask_that_is_not_causal_is_refused_naming_the_tensor():
    """The helper's LessOrEqual as Less: each token no longer sees itself."""
    model = helper_decoders.build("llama")
    node = next(n for n in model.graph.node if n.op_type == "LessOrEqual")
    node.op_type = "Less"
    where = next(n for n in model.graph.node if n.op_type == "Where" and node.output[0] not in n.input)
    code, msg = _code(lambda: to_step_model(model, T, 4))
    assert code == "ERR_OP_NOT_SUPPORTED" and "no causal attention mask built from attention_mask" in msg
    assert where.output[0] in msg


def test_the_presents_are_found_by_data_flow_not_by_name():
    """The presents renamed (kv_out_{i}_{kv}): the step model is the one of the optimum names, run by
    onnxruntime on the same inputs to the same outputs."""
    import onnxruntime as ort

    model = helper_decoders.build("gpt2")
    renamed = helper_decoders.build("gpt2")
    names = {o.name: o.name.replace("present.", "kv_out_").replace(".", "_") for o in renamed.graph.output}
    for node in renamed.graph.node:
        node.input[:] = [names.get(i, i) for i in node.input]
        node.output[:] = [names.get(o, o) for o in node.output]
    for out in renamed.graph.output:
        out.name = names[out.name]
    rng = np.random.default_rng(0)
    feed = {"input_ids": np.array([[7]], np.int64), "position": np.array([5], np.int64)}
    feed.update({f"cache.{i}.{kv}": rng.standard_normal((1, 4, T, 16)).astype(np.float32)
                 for i in range(2) for kv in ("key", "value")})  # fmt: skip
    want, got = (ort.InferenceSession(to_step_model(m, T, 1).SerializeToString()).run(None, feed)
                 for m in (model, renamed))  # fmt: skip
    assert len(want) == len(got) == 5
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
