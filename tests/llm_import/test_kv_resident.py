"""Hugging Face exports on the KV cache resident on the NPU: the importer writes the cache and the mask in
the form the resident cache recognises (frontend/decoder_cache.py, decoder_mask.py), and the compiler
proves it from the graph (partition/kv_cache_check.py): every layer's attention in its NPU region, a
decode call passing only the token and the position, DDR bytes growing by exactly the KV rows read. A
mask it cannot prove causal keeps the host-held cache, the reason in the report. (The logits and greedy
tokens of the resident steps against onnxruntime on the export: test_llm_api.py.)"""

import numpy as np
import pytest
import tvm
from onnx import numpy_helper

import tvm_npu
from llm.reference import assert_decode_ddr_grows_by_the_kv_rows
from llm_import.test_step_model import ARCHS, PROMPT, _kv, _Reference
from tvm_npu.contract.config import get_config
from tvm_npu.frontend import to_step_model
from tvm_npu.frontend.onnx import from_onnx
from tvm_npu.models.decoder import step_info
from tvm_npu.partition.kv_cache_check import find_layers


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_layer_keeps_its_cache_on_the_npu(hf_llm, arch, attn):
    """Both steps resident, one attention region per layer holding the cache writes, Q x K^T, the scale
    (sdpa: a factor on Q and one on K^T), the mask, the softmax (sdpa: its NaN guard) and P x V (and
    Llama's repeat of its 2 KV heads to 4); none of them on the CPU."""
    lm = hf_llm(arch, attn)
    assert lm.resident and lm.meta["kv_cache"] == "npu" and lm.meta["state_space"] != 0
    for step, report in lm.reports.items():
        assert report.kv_cache["resident"] and not report.kv_cache.get("refused"), step
        assert len(report.kv_cache["regions"]) == lm.layers == 2
        ops = sorted(p.op for p in report.placements if p.composite == "npu.kv_attention" and p.device == "npu")
        want = {"relax.scatter_nd": 2, "relax.permute_dims": 1, "relax.matmul": 2, "relax.multiply": 1}
        want.update({"relax.add": 1, "relax.nn.softmax": 1})
        if attn == "sdpa":
            want.update({"relax.multiply": 2, "relax.isnan": 1, "relax.where": 1})
        if arch == "llama":  # repeat_kv of grouped-query attention, keys and values
            want.update({"relax.expand_dims": 2, "relax.broadcast_to": 2, "relax.reshape": 2})
        assert {op: ops.count(op) for op in set(ops)} == {op: n * lm.layers for op, n in want.items()}, step
        cpu = {p.op for p in report.placements if p.device == "cpu"}
        assert not cpu & {"relax.scatter_nd", "relax.nn.softmax", "relax.matmul", "relax.isnan"}, (step, cpu)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_decode_call_passes_only_the_token_and_the_position(hf_llm, arch):
    """The library's prefill and decode functions are (input_ids, position) -> (logits,): no cache in or out."""
    lm = hf_llm(arch)
    want = lm.prefill(np.array(PROMPT, np.int64))
    lm.reset()
    ids = np.zeros((1, lm.prefill_len), np.int64)
    ids[0, : len(PROMPT)] = PROMPT
    out = lm._vm["prefill"](tvm.runtime.tensor(ids), tvm.runtime.tensor(np.array([0], np.int64)))
    assert len(out) == 1
    np.testing.assert_array_equal(out[0].numpy()[0, len(PROMPT) - 1], want)
    out = lm._vm["decode"](
        tvm.runtime.tensor(np.array([[7]], np.int64)), tvm.runtime.tensor(np.array([len(PROMPT)], np.int64))
    )
    assert len(out) == 1 and out[0].numpy().shape == (1, 1, lm.vocab)


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_ddr_bytes_grow_by_the_kv_rows_read(hf_llm, arch):
    assert_decode_ddr_grows_by_the_kv_rows(hf_llm(arch, kv_placement="ddr"))  # the DDR state region's rows


def _set_hidden(model, value):
    """The rebuilt mask's value for a hidden row set to `value` (decoder_mask.py's `.../step_hidden`)."""
    (init,) = [t for t in model.graph.initializer if t.name.endswith("/step_hidden")]
    init.CopyFrom(numpy_helper.from_array(np.array(value, np.float32), init.name))
    return model


def _shift_diagonal(model):
    """The rebuilt mask's Less as LessOrEqual: each token no longer sees its own row."""
    (node,) = [n for n in model.graph.node if n.op_type == "Less" and n.output[0].endswith("/step_later")]
    node.op_type = "LessOrEqual"
    return model


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(
    "change, detail",
    [
        (lambda m: _set_hidden(m, -50.0), "M = -50 > -100000"),  # exp(-50) is not 0: not SOFTMAX's mask
        (_shift_diagonal, "the mask is not where(position + s < arange(T), M, 0)"),
        (lambda m: m, None),  # unchanged: taken
    ],
)
def test_a_mask_the_compiler_cannot_prove_causal_is_refused(hf_export, arch, change, detail):
    model = change(to_step_model(hf_export(arch), 32, 1))
    log = []
    found = find_layers(from_onnx(model)["main"], step_info(model), get_config("npu-ref"), log)
    if detail is None:
        assert found is not None and len(found) == 2 and not log
        assert all(layer.scale == 0.25 for layer in found)  # 1 / sqrt(head_dim 16)
    else:
        assert found is None and [r.code for r in log] == ["NPU_E_MASK"] and detail in log[0].detail, log


@pytest.mark.parametrize("arch", ARCHS)
def test_sdpa_factors_on_q_and_k_make_one_scale(hf_export, arch):
    """sdpa multiplies Q and K^T by sqrt(1 / sqrt(D)) = 0.5 each: the region's scale is their product, and
    it reads the query before its factor."""
    model = to_step_model(hf_export(arch, "sdpa"), 32, 1)
    log = []
    found = find_layers(from_onnx(model)["main"], step_info(model), get_config("npu-ref"), log)
    assert found is not None and not log and [layer.scale for layer in found] == [0.25, 0.25]
    for layer in found:  # both factors inside the region, the query read before its own
        assert sum(op == "relax.multiply" for _, op in layer.ops) == 2
        assert layer.q.name not in {var for var, _ in layer.ops}


def _guard_nan_with(value):
    """The step models' sdpa NaN guard where(isnan(P), 0, P) with `value` for 0: it never fires (the
    model computes the same), but it is not the guard the pattern proves harmless."""

    def change(model):
        isnan = {n.output[0] for n in model.graph.node if n.op_type == "IsNaN"}
        for node in model.graph.node:
            if node.op_type == "Where" and node.input[0] in isnan:
                name = f"{node.output[0]}/other"
                model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
                node.input[1] = name
        return model

    return change


def test_an_attention_form_it_does_not_take_keeps_the_host_cache_and_stays_right(hf_export):
    """An attention the pattern cannot prove equal to its region (sdpa's NaN guard replacing NaN by 0.5)
    keeps the host-held cache, the report saying why, and still generates onnxruntime's greedy tokens on
    the export."""
    path = hf_export("llama", "sdpa")
    change = _guard_nan_with(0.5)
    steps = lambda seq_len, max_context: change(to_step_model(path, max_context, seq_len))  # noqa: E731
    lm = tvm_npu.llm.compile(steps, max_context=32, prefill_len=8)
    assert not lm.resident and lm.meta["kv_cache"] == "host"
    for report in lm.reports.values():
        refused = report.kv_cache["refused"]
        assert [r["code"] for r in refused] == ["NPU_E_KV_CACHE"], refused
        assert "the probabilities" in refused[0]["detail"], refused
    ref = _Reference(path, *_kv(to_step_model(path, 32, 1)))
    logits, tokens = ref(np.array([PROMPT], np.int64))[0][0, -1], []
    for _ in range(8):
        tokens.append(int(logits.argmax()))
        logits = ref(np.array([[tokens[-1]]], np.int64))[0][0, -1]
    assert lm.generate(np.array(PROMPT, np.int64), max_new_tokens=8).tolist() == tokens
