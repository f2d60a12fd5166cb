"""Issue 31 item 4: the float32-minimum attention mask of an export never saturates an fp16 NPU input.

Exports write the hidden rows of their additive mask as float32's minimum (-3.4e38). With the cache held
on the host the rebuilt mask is an input of the NPU attention regions, where a finite value beyond
+-65504 is saturated and counted, with the runtime's warning on stderr. The rebuilt mask hides with -inf
(frontend/decoder_mask.py), which stages as itself: no input saturates, no warning, and the tokens and
logits still equal onnxruntime's on the float32 file (exp of a hidden score is 0.0 either way)."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_npu
from llm_import import helper_decoders
from llm_import.test_import_forms import _assert_greedy_path_equal
from tvm_npu import runtime
from tvm_npu.frontend import to_step_model

T = 32


def _hidden_values(step: onnx.ModelProto) -> list:
    """The hidden value of every rebuilt mask (the `.../step_hidden` initializers of decoder_mask.py)."""
    return [float(numpy_helper.to_array(t)) for t in step.graph.initializer if t.name.endswith("/step_hidden")]


def _export(kind: str, folder) -> str:
    path = str(folder / f"{kind}_llama.onnx")
    if kind == "helper":
        return helper_decoders.save("llama", path, 0)
    pytest.importorskip("torch", reason="needs torch to export (pip install '.[llm]')")
    pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
    pytest.importorskip("onnxscript", reason="the dynamo exporter needs onnxscript (pip install '.[llm]')")
    from tvm_npu.models import hf_export

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hf_export.export("llama", path, 0, "sdpa", exporter="dynamo")


@pytest.mark.parametrize("kind", ["helper", "dynamo"])
def test_a_float32_min_mask_stages_without_saturation_and_keeps_onnxruntimes_tokens(kind, tmp_path, capfd):
    path = _export(kind, tmp_path)
    assert {-np.inf} == set(_hidden_values(to_step_model(path, T, 1)))  # the export's was float32's minimum
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8, kv_cache="host")
    assert not lm.resident  # the mask is an input of the NPU attention regions
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _assert_greedy_path_equal(path, lm)  # 16 decodes: tokens and logits as onnxruntime's on the file
    assert runtime.saturated_inputs(lm._vm) == 0
    assert "saturated" not in capfd.readouterr().err
    assert not [w for w in caught if "saturat" in str(w.message)]


def test_a_mask_value_within_fp16_is_kept():
    """An export hiding rows with a value fp16 holds (here -1e4) keeps it: it stages exactly."""
    model = helper_decoders.build("llama")
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.dtype == np.float32 and value.size == 1 and value.item() == np.finfo(np.float32).min:
            init.CopyFrom(numpy_helper.from_array(np.array(-1e4, np.float32).reshape(value.shape), init.name))
    assert set(_hidden_values(to_step_model(model, T, 1))) == {np.float32(-1e4)}
