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
# onnx.helper seeds whose greedy path moves (many distinct tokens) with top-2 margins > 0.02
HELPER_SEEDS = {"gpt2": 1, "llama": 0}


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

                paths[producer, family] = hf_export.export(family, path, exporter=producer)
        return paths[producer, family]

    return get


@pytest.mark.parametrize("producer,family", CASES)
def test_greedy_tokens_and_logits_equal_onnxruntime_with_the_cache_resident(made, producer, family):
    path = made(producer, family)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    ref = _Reference(path, *_kv(to_step_model(path, T, 1)))
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0][0, -1]
    tokens, ref_tokens = [], []
    for _ in range(DECODES):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref(np.array([[ref_tokens[-1]]], np.int64))[0][0, -1]
    assert tokens == ref_tokens
    assert len(set(ref_tokens)) > 1  # a path that moves: a constant token would hide a wrong cache


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
