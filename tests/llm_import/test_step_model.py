"""The step model imported from Hugging Face decoder-with-past exports (GPT-2, Llama) against the
export itself, along one greedy token path: 5-token prefill, then 8 one-token decodes.

The reference is onnxruntime running the original export with the growing past (attention_mask of
ones, position_ids = arange); the step model is run in onnxruntime (1e-4) and built by TVM for llvm
through tvm_npu.from_onnx (the issue's 1e-2 x max(1, max|ref|)). The cache starts as random values,
not zeros: rows the mask must hide hold garbage that would change the logits if they were seen.
"""

import json

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.frontend import to_step_model

T = 32  # max_context
PROMPT = [3, 17, 200, 45, 9]
DECODES = 8
ARCHS = ["gpt2", "llama"]


def _kv(model):
    step = json.loads({p.key: p.value for p in model.metadata_props}["tvm_npu.step"])
    return step["layers"], step["kv_heads"], step["head_dim"]


class _Reference:
    """onnxruntime on the export, with the past growing by each call's present."""

    def __init__(self, path, layers, heads, dim):
        self.sess = ort.InferenceSession(path)
        self.names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        self.past = [np.zeros((1, heads, 0, dim), np.float32) for _ in self.names]
        self.pos = 0

    def __call__(self, ids):
        s = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((1, self.pos + s), np.int64)}
        feed["position_ids"] = np.arange(self.pos, self.pos + s, dtype=np.int64)[None]
        out = self.sess.run(None, {**feed, **dict(zip(self.names, self.past))})
        self.past, self.pos = out[1:], self.pos + s
        return out[0], out[1:]


def _ort_runner(model):
    sess = ort.InferenceSession(model.SerializeToString())
    names = [i.name for i in model.graph.input]
    return lambda *args: sess.run(None, dict(zip(names, args)))


def _tvm_runner(model):
    vm = relax.VirtualMachine(tvm.compile(tvm_npu.from_onnx(model), target="llvm"), tvm.cpu())
    return lambda *args: [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in args])]


def _walk(path, runner, check_logits):
    """Prefill then greedy decodes with the step models (runner(model) -> callable) next to the export;
    checks each call's logits and cache; returns both token sequences."""
    prefill, decode = to_step_model(path, T, len(PROMPT)), to_step_model(path, T, 1)
    layers, heads, dim = _kv(prefill)
    run_prefill, run_decode = runner(prefill), runner(decode)
    ref = _Reference(path, layers, heads, dim)
    cache = list(np.random.default_rng(7).standard_normal((2 * layers, 1, heads, T, dim)).astype(np.float32))
    ids, pos, got_tokens, ref_tokens = np.array([PROMPT], np.int64), 0, [], []
    for _ in range(1 + DECODES):
        s = ids.shape[1]
        out = (run_prefill if s > 1 else run_decode)(ids, np.array([pos], np.int64), *cache)
        want, present = ref(ids)
        check_logits(out[0], want)
        for new, old, pres in zip(out[1:], cache, present):
            np.testing.assert_allclose(new[:, :, : pos + s], pres, atol=1e-4, rtol=0)  # rows written
            np.testing.assert_array_equal(new[:, :, pos + s :], old[:, :, pos + s :])  # the rest kept
        got_tokens.append(int(out[0][0, -1].argmax()))
        ref_tokens.append(int(want[0, -1].argmax()))
        cache, pos = out[1:], pos + s
        ids = np.array([[ref_tokens[-1]]], np.int64)  # the reference's path, so a slip shows as one step
    return got_tokens, ref_tokens


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHS)
def test_step_model_matches_export_in_onnxruntime(hf_export, arch, attn):
    """Both of transformers' attention forms: written out, and torch's scaled_dot_product_attention."""

    def close(got, want):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)

    got, want = _walk(hf_export(arch, attn), _ort_runner, close)
    assert got == want


@pytest.mark.parametrize("arch", ARCHS)
def test_step_model_in_tvm_matches_export(hf_export, arch):
    def close(got, want):
        assert got.shape == want.shape
        bound = 1e-2 * max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) <= bound

    got, want = _walk(hf_export(arch), _tvm_runner, close)
    assert got == want


@pytest.mark.parametrize("arch", ARCHS)
def test_step_interface(hf_export, arch):
    """Inputs, outputs and metadata as the step-model interface fixes them."""
    model = to_step_model(hf_export(arch), 24, 4)
    heads = 4 if arch == "gpt2" else 2
    shape = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    cache = [f"cache.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    assert [i.name for i in model.graph.input] == ["input_ids", "position", *cache]
    assert [o.name for o in model.graph.output] == ["logits", *(c.replace("cache", "cache_out") for c in cache)]
    assert shape(model.graph.input[0]) == [1, 4] and shape(model.graph.input[1]) == [1]
    assert all(shape(v) == [1, heads, 24, 16] for v in [*model.graph.input[2:], *model.graph.output[1:]])
    assert shape(model.graph.output[0]) == [1, 4, 256]
    step = json.loads({p.key: p.value for p in model.metadata_props}["tvm_npu.step"])
    assert step == dict(layers=2, kv_heads=heads, head_dim=16, max_context=24, vocab=256, seq_len=4)


@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_and_padded_prefill(hf_export, arch):
    """The two other ways a runtime uses a prefill model: a prompt in chunks (S = 5 at position 5, the
    mask's diagonal off row 0), and a short prompt padded at the end of the bucket (the padding's rows
    are written but seen by no real token, and the next call overwrites them)."""
    path = hf_export(arch)
    prefill = to_step_model(path, T, 5)
    layers, heads, dim = _kv(prefill)
    run_prefill, run_decode = _ort_runner(prefill), _ort_runner(to_step_model(path, T, 1))
    prompt = np.array([[3, 17, 200, 45, 9, 101, 7, 250, 0, 64]], np.int64)
    start = list(np.random.default_rng(3).standard_normal((2 * layers, 1, heads, T, dim)).astype(np.float32))

    ref = _Reference(path, layers, heads, dim)
    want, _ = ref(prompt)  # the whole prompt at once
    first = run_prefill(prompt[:, :5], np.array([0]), *start)
    second = run_prefill(prompt[:, 5:], np.array([5]), *first[1:])
    np.testing.assert_allclose(np.concatenate([first[0], second[0]], 1), want, atol=1e-4, rtol=0)

    short = np.array([[3, 17, 200, 0, 0]], np.int64)  # 3 real tokens, 2 of padding
    ref = _Reference(path, layers, heads, dim)
    want, _ = ref(short[:, :3])
    padded = run_prefill(short, np.array([0]), *start)
    np.testing.assert_allclose(padded[0][:, :3], want, atol=1e-4, rtol=0)
    want, _ = ref(np.array([[42]]))  # the next token goes to position 3, over the padding's row
    got = run_decode(np.array([[42]]), np.array([3]), *padded[1:])
    np.testing.assert_allclose(got[0], want, atol=1e-4, rtol=0)
