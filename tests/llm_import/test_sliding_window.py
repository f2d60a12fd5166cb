"""Issue 31: decoders whose attention has a sliding window W smaller than max_context T (Mistral, Qwen2 with
use_sliding_window, Gemma2's local layers), as transformers exports them through DynamicCache(config=): the
past cropped to its last W - 1 rows around the append, the mask the band t > s - W. The step model reads
the whole cache with the band rebuilt from `position`, and the cache stays on the NPU, the band in the
windowed layers' causal SOFTMAX (its window, format 1.6). Against onnxruntime on the same file with its
(cropped) growing past: every
greedy token over a generation well past the window, and every logits vector within 1e-2 x max(1, max|ref|)."""

import numpy as np
import pytest

import tvm_npu
from llm_import.test_import_forms import _assert_greedy_path_equal
from llm_import.test_step_model import _kv, _Reference
from tvm_npu import NPUError
from tvm_npu.contract import stream
from tvm_npu.frontend import to_step_model
from tvm_npu.tools.disasm import read_library

pytest.importorskip("torch", reason="needs torch to export (pip install '.[llm]')")
pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")

T, W, DECODES = 32, 8, 20  # the 5-token prompt and 20 decodes: positions up to 24, three times the window
# (family, config, attention, the layers with a window): Qwen2's window only from layer max_window_layers on;
# Gemma2 alternates local (windowed) and global layers, its softcap between the scores and the mask
FAMILIES = {
    "mistral": ({"sliding_window": W}, "sdpa", [0, 1]),
    "qwen2": ({"use_sliding_window": True, "sliding_window": W, "max_window_layers": 1}, "sdpa", [1]),
    "gemma2": ({"sliding_window": W}, "eager", [0]),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tvm_npu.models import hf_export

    folder, paths = tmp_path_factory.mktemp("window"), {}

    def get(family: str) -> str:
        if family not in paths:
            config, attn, _ = FAMILIES[family]
            path = str(folder / f"{family}_w{W}.onnx")
            paths[family] = hf_export.export(family, path, 0, attn, config=config)
        return paths[family]

    return get


def _refusals(lm) -> list[str]:
    return [r["detail"] for report in lm.reports.values() for r in report.kv_cache.get("refused", [])]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_window_below_max_context_gives_onnxruntimes_tokens_with_the_cache_on_the_npu(exported, family, tmp_path):
    path = exported(family)
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    assert lm.meta["kv_cache"] == "npu" and lm.resident, _refusals(lm)
    # Each step's windowed layers' causal SOFTMAX carries the band (format 1.6), the global layers' none.
    lm.export_library(tmp_path / "lm.so")
    windows = sorted(
        c.args.get("window", 0)
        for _, blob in read_library(tmp_path / "lm.so").regions
        for c in stream.decode(blob).commands
        if c.op == "SOFTMAX" and c.args.get("pos_mode")
    )
    windowed = len(FAMILIES[family][2])  # of the 2 layers, each with one SOFTMAX per KV head and step
    assert windows and windows == sorted(
        [0] * (len(windows) * (2 - windowed) // 2) + [W] * (len(windows) * windowed // 2)
    )
    _assert_greedy_path_equal(path, lm, decodes=DECODES)


def test_a_prompt_longer_than_the_window_prefills_in_chunks_like_onnxruntime_in_one_call(exported):
    """A 21-token prompt: chunks of 8 at positions 0, 8 and 16 (the last padded), each query's band reaching
    into the chunk before; onnxruntime runs the prompt as one call (query 20 sees rows 13..20 only)."""
    path = exported("mistral")
    lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=8)
    prompt = np.random.default_rng(3).integers(0, 256, 21).astype(np.int64)
    got = lm.prefill(prompt, all_logits=True)
    want = _Reference(path, *_kv(to_step_model(path, T, 1)))(prompt[None])[0][0]
    assert np.abs(got - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


def test_the_band_is_what_makes_it_exact(exported):
    """The step model with the band widened to the causal mask (what the importer built before the window
    was read) differs from onnxruntime once the generation passes the window: the test above can fail."""
    import onnxruntime as ort

    path = exported("mistral")
    step = to_step_model(path, T, 1)
    layers, heads, dim = _kv(step)
    causal = to_step_model(path, T, 1)
    for init in causal.graph.initializer:  # the band's first row t + W - 1 moved past every position
        if init.name.endswith("/step_rows_last"):
            init.int64_data[:] = []
            init.raw_data = (np.arange(T, dtype=np.int64).reshape(1, T) + T).tobytes()
    ref = _Reference(path, layers, heads, dim)
    runs = [ort.InferenceSession(m.SerializeToString()) for m in (step, causal)]
    caches = [[np.zeros((1, heads, T, dim), np.float32) for _ in range(2 * layers)] for _ in runs]
    names = [i.name for i in step.graph.input]
    far = []
    for pos, token in enumerate([3, 17, 200, 45, 9, 81, 7, 140, 33, 66, 12, 250]):
        want = ref(np.array([[token]], np.int64))[0][0, -1]
        outs = []
        for k, (sess, cache) in enumerate(zip(runs, caches)):
            out = sess.run(None, dict(zip(names, [np.array([[token]], np.int64), np.array([pos], np.int64), *cache])))
            caches[k] = out[1:]
            outs.append(np.abs(out[0][0, -1] - want).max())
        assert outs[0] <= 1e-4 * max(1.0, np.abs(want).max())  # the band: the export's logits (measured 4.2e-7)
        far.append(outs[1])
    assert max(far[:W]) <= 1e-4 and min(far[W:]) > 1e-2  # causal: 0 in the first window, 0.32-0.85 after


def test_the_dynamo_exporters_window_mask_is_refused_naming_the_layer_and_the_fix(tmp_path):
    """torch.onnx's dynamo export of the same Mistral: its mask indexes attention_mask past the cache once the
    crops are gone (evaluated for T rows: an IndexError in onnx's reference evaluator), a coded error."""
    from tvm_npu.models import hf_export

    path = hf_export.export(
        "mistral", str(tmp_path / "dyn.onnx"), 0, "sdpa", exporter="dynamo", config=FAMILIES["mistral"][0]
    )
    with pytest.raises(NPUError) as err:
        to_step_model(path, T, 1)
    msg = str(err.value)
    assert err.value.code == "ERR_OP_NOT_SUPPORTED" and msg.startswith(
        f"ERR_OP_NOT_SUPPORTED: layer 0: a sliding window of {W} rows"
    )
    assert "export with the TorchScript exporter" in msg and f"compile with max_context <= {W}" in msg
