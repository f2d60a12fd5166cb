"""onnxruntime-genai folders (tests/fixtures/genai, made by scripts/make_genai_fixtures.py with the model
builder of onnxruntime-genai 0.18) compiled by `tvm_npu.llm.compile(folder)`: greedy tokens and every
logits vector against onnxruntime running the folder's own model.onnx with its growing past (the
builder's interface: input_ids, attention_mask, past_key_values.{i}.*), and the tokens against
onnxruntime-genai's own greedy generation recorded beside each folder (reference.json)."""

import json
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper

import tvm_npu
from llm_import.ort_reference import OrtDecoder
from tvm_npu.contract.errors import NPUError
from tvm_npu.frontend import genai

ort = pytest.importorskip("onnxruntime")

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "fixtures", "genai")
FOLDERS = sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []
NEW = 16  # greedy tokens: the one after the prompt, then 15 decodes
T, S = 32, 8


def _Builder(folder: str, exact: bool = False) -> OrtDecoder:
    """onnxruntime on the folder's model.onnx, fed as onnxruntime-genai feeds it: the whole past each call.
    exact=True sets MatMulNBits' accuracy_level to 0: the builder's 4 lets onnxruntime's CPU kernel
    quantize the activations to int8 blocks (measured: 3.3e-2 x max|ref| on qwen2-int4 against
    accuracy_level 0, where the NPU build is within 2.8e-3), a speed option, not the model's meaning."""
    dec = genai.read_config(folder)["model"]["decoder"]
    return OrtDecoder(folder, dec["num_hidden_layers"], dec["num_key_value_heads"], dec["head_size"], exact)


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
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG.*context_length 64"):
        genai.to_step_model(folder, 65, 1)


def _edited(tmp_path, edit) -> str:
    """A copy of the llama-fp32 folder whose model.onnx `edit(model)` changed."""
    folder = tmp_path / "edited"
    shutil.copytree(os.path.join(FIXTURES, "llama-fp32"), folder)
    model = onnx.load(str(folder / "model.onnx"))
    edit(model)
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return str(folder)


def _set(model, op_type: str, name: str, value) -> None:
    for node in model.graph.node:
        if node.op_type == op_type:
            kept = [a for a in node.attribute if a.name != name]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute(name, value)])


@pytest.mark.parametrize("attrs", [{"local_window_size": 4}, {"softcap": 1.5}])
def test_step_model_keeps_the_window_and_softcap_of_onnxruntime(tmp_path, attrs):
    """GroupQueryAttention's local_window_size (a band shorter than the context) and softcap in the step
    model: onnxruntime on the step models along a prefill and 8 decodes against onnxruntime on the
    edited model.onnx, logits to 1e-5."""
    folder = _edited(tmp_path, lambda m: [_set(m, "GroupQueryAttention", k, v) for k, v in attrs.items()])
    ref = _Builder(folder)
    steps = [genai.to_step_model(folder, T, s) for s in (S, 1)]
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in steps]
    names = [i.name for i in steps[1].graph.input[2:]]
    cache = {n: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
             for n, i in zip(names, steps[1].graph.input[2:])}  # fmt: skip
    prompt = [1, 17, 42, 99, 7]

    def run(sess, ids, position):
        out = sess.run(None, {"input_ids": np.array([ids], np.int64), "position": np.array([position]), **cache})
        cache.update(zip(names, out[1:]))
        return out[0][0]

    got, want = run(sessions[0], prompt + [0] * (S - len(prompt)), 0)[len(prompt) - 1], ref(prompt)
    for k in range(8):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
        token = int(want.argmax())
        got, want = run(sessions[1], [token], len(prompt) + k)[0], ref([token])


def test_unsupported_attribute_in_a_folder_is_a_coded_error_naming_node_and_attribute(tmp_path):
    folder = _edited(tmp_path, lambda m: _set(m, "GroupQueryAttention", "smooth_softmax", 1))
    with pytest.raises(NPUError, match="ERR_OP_NOT_SUPPORTED.*GroupQueryAttention.*layers.0.*smooth_softmax"):
        genai.to_step_model(folder, T, 1)


def test_a_folder_without_float32_caches_is_refused_coded(tmp_path):
    def half(model):
        for vi in model.graph.input:
            if vi.name.startswith("past_key_values."):
                vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16

    with pytest.raises(NPUError, match="ERR_OP_NOT_SUPPORTED.*float16.*-p fp32"):
        genai.to_step_model(_edited(tmp_path, half), T, 1)


@pytest.mark.parametrize("attrs", [{"softcap": 1.5}, {"local_window_size": 4}])
def test_softcap_and_window_compile_exact(tmp_path, attrs):
    """The softcap and a window of 4 rows (< max_context: a band, SOFTMAX's window) run in the resident
    attention region. Both give onnxruntime's 16 greedy tokens within 1e-2."""
    folder = _edited(tmp_path, lambda m: [_set(m, "GroupQueryAttention", k, v) for k, v in attrs.items()])
    lm, ref = tvm_npu.llm.compile(folder, max_context=T, prefill_len=S), _Builder(folder)
    assert lm.resident, {k: r.kv_cache.get("refused") for k, r in lm.reports.items()}
    prompt = [1, 17, 42, 99, 7]
    logits, want = lm.prefill(np.array(prompt, np.int64)), ref(prompt)
    for _ in range(NEW):
        assert np.abs(logits - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
        assert int(logits.argmax()) == int(want.argmax())
        token = int(want.argmax())
        logits, want = lm.decode(token), ref([token])
