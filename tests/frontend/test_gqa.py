"""onnxruntime's GroupQueryAttention (frontend/contrib/group_query_attention.py; and its step-model form,
frontend/genai_attention.py): single-op models built with onnx.helper, imported and run through TVM's
llvm build against onnxruntime 1.32 on the same model, prefill (no past) and decode with a past, packed
and separate Q / K / V, rotary halves / interleaved / partial, a window, a softcap, GQA ratios. Bad
attributes are coded errors naming the node and the attribute."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import run_cpu
from tvm_npu.contract.errors import NPUError

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"
D = 16  # onnxruntime's rotary kernel wants a multiple of 16


def _gqa(B, S, P, H, H_kv, total, packed=True, rot=0, dtype=np.float32, **attrs):
    """(model, feeds): one GroupQueryAttention node; seqlens_k a graph input, total a constant."""
    rng = np.random.default_rng(B * 100 + S * 10 + P)
    feeds = {}
    if packed:
        feeds["qkv"] = rng.standard_normal((B, S, (H + 2 * H_kv) * D)).astype(dtype)
        qkv = ["qkv", "", ""]
    else:
        for name, n in (("q", H), ("k", H_kv), ("v", H_kv)):
            feeds[name] = rng.standard_normal((B, S, n * D)).astype(dtype)
        qkv = ["q", "k", "v"]
    feeds["past_key"] = rng.standard_normal((B, H_kv, P, D)).astype(np.float32)
    feeds["past_value"] = rng.standard_normal((B, H_kv, P, D)).astype(np.float32)
    feeds["seqlens_k"] = np.full(B, total - 1, np.int32)
    inits = [numpy_helper.from_array(np.array(total, np.int32), "total")]
    inputs = [*qkv, "past_key", "past_value", "seqlens_k", "total"]
    if rot:
        angles = np.arange(64)[:, None] * 10000.0 ** (-np.arange(rot // 2) / (rot // 2))
        inits += [
            numpy_helper.from_array(f(angles).astype(np.float32), n) for f, n in ((np.cos, "cos"), (np.sin, "sin"))
        ]
        inputs += ["cos", "sin"]
        attrs = {"do_rotary": 1, **attrs}
    present = ("present_key", "present_value")
    node = helper.make_node(
        "GroupQueryAttention", inputs, ["out", *present], domain=MS, name="gqa",
        num_heads=H, kv_num_heads=H_kv, **attrs,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "gqa",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [B, S, H * D]),
            *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H_kv, max(P, total), D]) for n in present),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    return model, feeds


def _check(model, feeds, rows):
    """TVM llvm against onnxruntime: the output, and the present's first `rows` rows (the written ones)."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_cpu(tvm_npu.from_onnx(model), *feeds.values())
    got = [np.asarray(g) for g in got]
    assert [g.shape for g in got] == [w.shape for w in want]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g[:, :, :rows], w[:, :, :rows], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(g[:, :, rows:], w[:, :, rows:])  # zeros after the written rows, both
    return want


@pytest.mark.parametrize(
    "B, S, P, H, H_kv", [(1, 5, 0, 4, 2), (1, 1, 6, 4, 2), (2, 3, 0, 4, 1), (1, 4, 3, 2, 2), (2, 1, 9, 6, 2)]
)
@pytest.mark.parametrize("packed", [True, False])
def test_gqa_prefill_and_decode_match_onnxruntime(B, S, P, H, H_kv, packed):
    """Prefill (P = 0) and decode / chunked steps with a past of P rows: total = P + S."""
    _check(*_gqa(B, S, P, H, H_kv, P + S, packed), P + S)


@pytest.mark.parametrize("rot, interleaved", [(16, 0), (16, 1)])
def test_gqa_rotary_matches_onnxruntime(rot, interleaved):
    """RoPE inside the op at positions P..P+S-1: halves or interleaved pairs (onnxruntime takes a partial
    rotary only for head sizes from 32: cos_cache dim 1 a multiple of 8)."""
    _check(*_gqa(1, 3, 5, 4, 2, 8, rot=rot, rotary_interleaved=interleaved), 8)


def test_gqa_shared_buffer_past_matches_onnxruntime():
    """A past buffer longer than the sequence (onnxruntime-genai's shared buffer): total 5 of P = 8 rows;
    the present keeps 8 rows, the new one at row 4."""
    _check(*_gqa(1, 1, 8, 4, 2, 5, rot=16), 5)


@pytest.mark.parametrize("attrs", [{"local_window_size": 1}, {"local_window_size": 3}, {"softcap": 2.0, "scale": 0.3}])
def test_gqa_local_window_and_softcap_match_onnxruntime(attrs):
    """local_window_size w: each query sees its w latest rows; softcap 2: 2 tanh(scores / 2)."""
    _check(*_gqa(1, 4, 6, 4, 2, 10, **attrs), 10)


@pytest.mark.parametrize(
    "attrs, match",
    [
        ({"local_window_size": 0}, "local_window_size"),
        ({"softcap": -1.0}, "softcap"),
        ({"smooth_softmax": 1}, "smooth_softmax"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_gqa_unsupported_attributes_are_coded_errors_naming_node_and_attribute(attrs, match):
    model, _ = _gqa(1, 1, 4, 4, 2, 5, **attrs)
    with pytest.raises(NPUError, match=rf"ERR_OP_NOT_SUPPORTED.*'gqa'.*{match}"):
        tvm_npu.from_onnx(model)


def test_gqa_computed_total_length_is_refused_coded():
    """total_sequence_length a run-time input: the present's length is unknown, refused naming it."""
    model, feeds = _gqa(1, 1, 4, 4, 2, 5)
    total = model.graph.initializer.pop()
    model.graph.input.append(helper.make_tensor_value_info(total.name, TensorProto.INT32, []))
    with pytest.raises(NPUError, match="ERR_OP_NOT_SUPPORTED.*'gqa'.*total_sequence_length"):
        tvm_npu.from_onnx(model)
