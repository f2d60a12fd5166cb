"""optimum's exports (optimum-onnx 0.1, `main_export(task="text-generation-with-past")`) of tiny seeded GPT-2,
Llama, Qwen2, Mistral, Phi-3 and Gemma models, committed in tests/fixtures/optimum/<family>/model.onnx by
scripts/make_optimum_fixtures.py (optimum-onnx needs transformers < 4.58: it cannot share this environment).

Each is compiled by `tvm_npu.llm.compile` (max_context 32, prefill bucket 8) and run against onnxruntime on the
same file with its own interface and the past growing (input_ids, attention_mask, position_ids where the export
has it): 16 greedy tokens equal, every logits vector within 1e-2 x max(1, max|ref|), the KV cache resident.
optimum's Gemma has no position_ids input (it computes the positions from the past length in the graph):
frontend/decoder_positions.py finds them and computes them from `position`; the step model in onnxruntime is
held to 1e-4 of the export, and a graph whose positions cannot be found is refused, coded."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tvm_npu
from llm_import import helper_decoders
from llm_import.test_step_model import PROMPT, _kv
from tvm_npu import NPUError
from tvm_npu.frontend import to_step_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
FAMILIES = ["gpt2", "llama", "qwen2", "mistral", "phi3", "gemma"]
T, DECODES = 32, 16


def _path(family: str) -> str:
    return str(FIXTURES / family / "model.onnx")


class _Reference:
    """onnxruntime on an export, fed the inputs the export has (position_ids only if it is one), the past
    growing by each call's presents."""

    def __init__(self, model):
        self.sess = ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString())
        inputs = {i.name: i for i in self.sess.get_inputs()}
        self.names = [n for n in inputs if n.startswith("past_key_values.")]
        self.outputs = [o.name for o in self.sess.get_outputs()]
        heads, dim = inputs[self.names[0]].shape[1], inputs[self.names[0]].shape[3]
        self.past = {n: np.zeros((1, heads, 0, dim), np.float32) for n in self.names}
        self.positions = "position_ids" in inputs
        self.pos = 0

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        s = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((1, self.pos + s), np.int64), **self.past}
        if self.positions:
            feed["position_ids"] = np.arange(self.pos, self.pos + s, dtype=np.int64)[None]
        out = dict(zip(self.outputs, self.sess.run(None, feed)))
        self.past = {n: out[n.replace("past_key_values.", "present.")] for n in self.names}
        self.pos += s
        return out["logits"]


def _step_runs_like_the_export(model, decodes: int = DECODES) -> list[int]:
    """The step models (prefill of PROMPT, one-token decodes) in onnxruntime against the export along the
    export's greedy path, from a cache of random values (rows the mask must hide hold garbage): logits and
    written rows within 1e-4. Returns the path."""
    prefill, decode = to_step_model(model, T, len(PROMPT)), to_step_model(model, T, 1)
    layers, heads, dim = _kv(prefill)
    runs = [ort.InferenceSession(m.SerializeToString()) for m in (prefill, decode)]
    ref = _Reference(model)
    cache = list(np.random.default_rng(7).standard_normal((2 * layers, 1, heads, T, dim)).astype(np.float32))
    ids, pos, tokens = np.array([PROMPT], np.int64), 0, []
    for _ in range(1 + decodes):
        s = ids.shape[1]
        names = [f"cache.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        feed = {"input_ids": ids, "position": np.array([pos], np.int64), **dict(zip(names, cache))}
        out = runs[s == 1].run(None, feed)
        want = ref(ids)
        np.testing.assert_allclose(out[0], want, atol=1e-4, rtol=0)
        for new, name in zip(out[1:], names):
            present = ref.past[name.replace("cache.", "past_key_values.")]
            np.testing.assert_allclose(new[:, :, : pos + s], present, atol=1e-4, rtol=0)
        tokens.append(int(want[0, -1].argmax()))
        cache, pos, ids = out[1:], pos + s, np.array([[tokens[-1]]], np.int64)
    return tokens


@pytest.mark.parametrize("family", FAMILIES)
def test_the_fixture_is_optimums_export_with_its_recorded_tokens(family):
    """The committed file is what the script says: optimum's interface, and onnxruntime here gives the
    greedy tokens onnxruntime gave in the script's environment."""
    ref_json = json.loads((FIXTURES / family / "reference.json").read_text())
    sess = ort.InferenceSession(_path(family))
    inputs = [i.name for i in sess.get_inputs()]
    assert {"input_ids", "attention_mask", "past_key_values.1.value"} <= set(inputs)
    assert ("position_ids" in inputs) == (family != "gemma")  # optimum's Gemma computes its positions
    ref = _Reference(_path(family))
    logits, tokens = ref(np.array([ref_json["prompt"]], np.int64)), []
    for _ in range(DECODES):
        tokens.append(int(logits[0, -1].argmax()))
        logits = ref(np.array([[tokens[-1]]], np.int64))
    assert tokens == ref_json["tokens"]


@pytest.mark.parametrize("family", FAMILIES)
def test_step_model_in_onnxruntime_matches_the_export(family):
    tokens = _step_runs_like_the_export(_path(family))
    assert len(set(tokens)) > 1


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_and_logits_equal_onnxruntime_with_the_cache_resident(family):
    path = _path(family)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.resident and lm.meta["kv_cache"] == "npu", {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    ref = _Reference(path)
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0, -1]
    tokens, ref_tokens = [], []
    for _ in range(DECODES):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref(np.array([[ref_tokens[-1]]], np.int64))[0, -1]
    assert tokens == ref_tokens
    assert len(set(ref_tokens)) > 1  # a path that moves: a constant token would hide a wrong cache


def _without_position_ids(positions) -> onnx.ModelProto:
    """The onnx.helper Llama with its position_ids input removed and computed in the graph by
    `positions(builder)` -> nodes writing "position_ids" [B, S] from the other inputs."""
    model = helper_decoders.build("llama")
    graph = model.graph
    graph.input.remove(next(i for i in graph.input if i.name == "position_ids"))
    nodes, inits = positions()
    graph.initializer.extend(inits)
    kept = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + kept)
    return model


def _int64(name, value):
    return helper.make_tensor(name, TensorProto.INT64, [len(value)], value)


def _cumsum_positions():
    """Hugging Face's positions from the mask: (cumsum(attention_mask) - 1, 1 where masked)[:, -S:]."""
    nodes = [
        helper.make_node("CumSum", ["attention_mask", "p/axis"], ["p/cumsum"]),
        helper.make_node("Sub", ["p/cumsum", "p/one"], ["p/from0"]),
        helper.make_node("Equal", ["attention_mask", "p/zero"], ["p/masked"]),
        helper.make_node("Where", ["p/masked", "p/one", "p/from0"], ["p/all"]),
        helper.make_node("Shape", ["input_ids"], ["p/ids_shape"], start=1, end=2),
        helper.make_node("Neg", ["p/ids_shape"], ["p/start"]),
        helper.make_node("Slice", ["p/all", "p/start", "p/end", "p/axes"], ["position_ids"]),
    ]
    scalar = lambda n, v: helper.make_tensor(n, TensorProto.INT64, [], [v])  # noqa: E731
    inits = [scalar("p/axis", 1), scalar("p/one", 1), scalar("p/zero", 0)]
    inits += [_int64("p/end", [2**62]), _int64("p/axes", [1])]
    return nodes, inits


def _restarting_positions():
    """arange(S) whatever the past: positions that restart at every call (not past + arange(S))."""
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["p/ids_shape"], start=1, end=2),
        helper.make_node("Squeeze", ["p/ids_shape"], ["p/s"]),
        helper.make_node("Range", ["p/zero", "p/s", "p/one"], ["p/range"]),
        helper.make_node("Unsqueeze", ["p/range", "p/axes"], ["position_ids"]),
    ]
    scalar = lambda n, v: helper.make_tensor(n, TensorProto.INT64, [], [v])  # noqa: E731
    return nodes, [scalar("p/zero", 0), scalar("p/one", 1), _int64("p/axes", [0])]


def test_positions_from_the_mask_cumsum_are_computed_from_position():
    """The other in-graph form: positions from cumsum(attention_mask); the step model matches the export."""
    tokens = _step_runs_like_the_export(_without_position_ids(_cumsum_positions), decodes=4)
    assert len(set(tokens)) > 1


def test_positions_that_are_not_past_plus_arange_are_refused():
    model = _without_position_ids(_restarting_positions)
    with pytest.raises(NPUError) as err:
        to_step_model(model, T, 1)
    assert err.value.code == "ERR_OP_NOT_SUPPORTED"
    assert "no graph input position_ids, and no tensor in the graph computes the positions" in str(err.value)
