"""An onnxruntime-genai decoder without its folder (frontend/genai_bare.py): the builder's model.onnx copied
out alone, loaded as a ModelProto, or passed as the file inside its folder. The step model is the one the
folder gives (compared serialized, byte for byte: the config read from the graph is the folder's), and
the bare file compiled by `tvm_npu.llm.compile` generates onnxruntime's greedy tokens on that same file."""

import json
import os
import shutil

import numpy as np
import onnx
import pytest

import tvm_npu
from llm_import.ort_reference import OrtDecoder
from tvm_npu.contract.errors import NPUError
from tvm_npu.frontend import genai, genai_bare

ort = pytest.importorskip("onnxruntime")

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "genai")
FOLDERS = sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []
T, S, NEW = 32, 8, 16


def _alone(tmp_path, name: str) -> str:
    """The folder's model.onnx (and its external data) copied into a folder of its own, no config."""
    out = tmp_path / name
    out.mkdir()
    for f in os.listdir(os.path.join(FIXTURES, name)):
        if f.startswith("model.onnx"):
            shutil.copy(os.path.join(FIXTURES, name, f), out / f)
    return str(out / "model.onnx")


@pytest.mark.parametrize("name", FOLDERS)
def test_the_bare_file_gives_the_folders_step_model(tmp_path, name):
    path = _alone(tmp_path, name)
    for seq_len in (S, 1):
        want = genai.to_step_model(os.path.join(FIXTURES, name), T, seq_len).SerializeToString()
        assert genai.to_step_model(path, T, seq_len).SerializeToString() == want
        assert genai.to_step_model(onnx.load(path), T, seq_len).SerializeToString() == want
    config = genai.read_config(os.path.join(FIXTURES, name))["model"]
    implied = genai.config_of(path)["model"]
    assert implied["decoder"]["head_size"] == config["decoder"]["head_size"]
    assert implied["context_length"] == config["context_length"]


def test_a_proto_is_not_edited_by_the_rewrite(tmp_path):
    model = onnx.load(_alone(tmp_path, "llama-fp32"))
    before = model.SerializeToString()
    genai.to_step_model(model, T, S)
    assert model.SerializeToString() == before


@pytest.mark.parametrize("name", ["llama-int4", "qwen2-fp32"])
def test_the_bare_file_generates_onnxruntimes_greedy_tokens(tmp_path, name):
    """llm.compile on the file alone: 16 greedy tokens equal to onnxruntime's on the same file, logits
    within 1e-2 (fp32) / 3e-2 (int4) x max(1, max|ref|), the cache resident, the context length the
    rotary tables give."""
    path = _alone(tmp_path, name)
    with open(os.path.join(FIXTURES, name, "reference.json")) as f:
        prompt = json.load(f)["prompt"]
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=S)
    step = lm.meta["step"]
    ref = OrtDecoder(path, step["layers"], step["kv_heads"], step["head_dim"], exact=True)
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
    assert lm.meta["generation"]["context_length"] == 64


def test_the_file_in_its_folder_reads_the_config(tmp_path):
    """model.onnx given inside its folder: the folder's genai_config.json (token ids and all)."""
    path = os.path.join(FIXTURES, "llama-fp32", "model.onnx")
    assert genai.config_of(path) == genai.read_config(os.path.join(FIXTURES, "llama-fp32"))
    gen = genai.generation(genai.config_of(path))
    assert (gen["eos_token_id"], gen["pad_token_id"]) == (2, 0)


def test_the_bare_files_context_is_its_rotary_tables(tmp_path):
    path = _alone(tmp_path, "llama-fp32")
    info = json.loads(next(p.value for p in genai.to_step_model(path, None, 1).metadata_props))
    assert info["max_context"] == 64
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG.*context_length 64"):
        genai.to_step_model(path, 65, 1)


def test_a_head_size_that_cannot_be_read_is_refused_coded(tmp_path):
    """No num_heads on the attention: the head size is unknown, said, with what to do."""
    model = onnx.load(_alone(tmp_path, "llama-fp32"), load_external_data=False)
    gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
    kept = [a for a in gqa.attribute if a.name != "num_heads"]
    del gqa.attribute[:]
    gqa.attribute.extend(kept)
    with pytest.raises(NPUError, match="ERR_OP_NOT_SUPPORTED.*genai_config.json.*num_heads"):
        genai_bare.config(model)


def test_files_without_attention_are_not_taken_for_genai(tmp_path):
    """An ONNX file with no GroupQueryAttention, and a file that is not ONNX: not genai decoders."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    plain = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [x],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
    )
    onnx.save(plain, tmp_path / "plain.onnx")
    (tmp_path / "text.onnx").write_text("not a model")
    assert genai.config_of(str(tmp_path / "plain.onnx")) is None
    assert genai.config_of(str(tmp_path / "text.onnx")) is None
    assert genai.config_of(plain) is None
