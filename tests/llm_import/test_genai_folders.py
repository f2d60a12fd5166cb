"""onnxruntime-genai folders (tests/fixtures/genai, made by scripts/make_genai_fixtures.py with the model
builder of onnxruntime-genai 0.18) compiled by `tvm_npu.llm.compile(folder)`: greedy tokens and every
logits vector against onnxruntime running the folder's own model.onnx with its growing past (the
builder's interface: input_ids, attention_mask, past_key_values.{i}.*), and the tokens against
onnxruntime-genai's own greedy generation recorded beside each folder (reference.json)."""

import json
import os

import numpy as np
import onnx
import pytest

import tvm_npu
from tvm_npu.contract.errors import NPUError
from tvm_npu.frontend import genai

ort = pytest.importorskip("onnxruntime")

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "fixtures", "genai")
FOLDERS = sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []
NEW = 16  # greedy tokens: the one after the prompt, then 15 decodes
T, S = 32, 8


class _Builder:
    """onnxruntime on the folder's model.onnx, fed as onnxruntime-genai feeds it: the whole past each call.
    exact=True sets MatMulNBits' accuracy_level to 0: the builder's 4 lets onnxruntime's CPU kernel
    quantize the activations to int8 blocks (measured: 3.3e-2 x max|ref| on qwen2-int4 against
    accuracy_level 0, where the NPU build is within 2.8e-3), a speed option, not the model's meaning."""

    def __init__(self, folder: str, exact: bool = False):
        dec = genai.read_config(folder)["model"]["decoder"]
        model = onnx.load(os.path.join(folder, "model.onnx"))
        for node in model.graph.node:
            for attr in node.attribute:
                if exact and node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                    attr.i = 0
        self.sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.layers = dec["num_hidden_layers"]
        empty = np.zeros((1, dec["num_key_value_heads"], 0, dec["head_size"]), np.float32)
        self.past = [(empty, empty)] * self.layers
        self.names = [o.name for o in self.sess.get_outputs()]

    def __call__(self, ids: list[int]) -> np.ndarray:
        total = self.past[0][0].shape[2] + len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, total), np.int64)}
        for i, (k, v) in enumerate(self.past):
            feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
        out = dict(zip(self.names, self.sess.run(None, feeds)))
        self.past = [(out[f"present.{i}.key"], out[f"present.{i}.value"]) for i in range(self.layers)]
        return out["logits"][0, -1]


@pytest.fixture(scope="module")
def compiled():
    made = {}

    def get(name: str):
        if name not in made:
            made[name] = tvm_npu.llm.compile(os.path.join(FIXTURES, name), max_context=T, prefill_len=S)
        made[name].reset()
        return made[name]

    return get


def _greedy(step, prompt: list[int]) -> list[int]:
    logits, tokens = step(prompt), []
    for _ in range(NEW):
        tokens.append(int(logits.argmax()))
        logits = step([tokens[-1]])
    return tokens


@pytest.mark.parametrize("name", FOLDERS)
def test_onnxruntime_on_the_folder_generates_onnxruntime_genai_tokens(name):
    """The reference driver: onnxruntime on model.onnx as the builder wrote it (accuracy_level 4 kept)
    gives onnxruntime-genai's own 16 greedy tokens, recorded when the folder was made."""
    folder = os.path.join(FIXTURES, name)
    with open(os.path.join(folder, "reference.json")) as f:
        recorded = json.load(f)
    prompt = recorded["prompt"]
    assert _greedy(_Builder(folder), prompt) == recorded["sequence"][len(prompt) : len(prompt) + NEW]


@pytest.mark.parametrize("name", FOLDERS)
def test_genai_folder_generates_onnxruntime_greedy_tokens(compiled, name):
    """16 greedy tokens equal to onnxruntime's on model.onnx (int4: accuracy_level 0, see _Builder);
    every logits vector within 1e-2 (fp32) / 3e-2 (int4) x max(1, max|ref|); the cache resident."""
    folder = os.path.join(FIXTURES, name)
    with open(os.path.join(folder, "reference.json")) as f:
        prompt = json.load(f)["prompt"]
    lm, ref = compiled(name), _Builder(folder, exact=True)
    tol = 3e-2 if name.endswith("int4") else 1e-2
    logits, want = lm.prefill(np.array(prompt, np.int64)), ref(prompt)
    tokens, ref_tokens, errs = [], [], []
    for _ in range(NEW):
        errs.append(np.abs(logits - want).max() / max(1.0, np.abs(want).max()))
        tokens.append(int(logits.argmax()))
        ref_tokens.append(int(want.argmax()))
        logits, want = lm.decode(ref_tokens[-1]), ref([ref_tokens[-1]])
    assert max(errs) <= tol, errs
    assert tokens == ref_tokens
    assert lm.resident and lm.meta["kv_cache"] == "npu"
    gen = lm.meta["generation"]
    assert (gen["eos_token_id"], gen["pad_token_id"], gen["context_length"]) == (2, 0, 64)


def test_genai_folder_defaults_to_its_context_length(tmp_path):
    """max_context left out: the config's context_length (64 here) is the cache's rows."""
    folder = os.path.join(FIXTURES, "llama-fp32")
    step = genai.to_step_model(folder, None, 1)
    info = json.loads(next(p.value for p in step.metadata_props if p.key == "tvm_npu.step"))
    assert info == dict(layers=2, kv_heads=2, head_dim=16, max_context=64, vocab=256, seq_len=1)
    with pytest.raises(NPUError, match="ERR_INVALID_MODEL"):
        genai.to_step_model(str(tmp_path), 32, 1)
