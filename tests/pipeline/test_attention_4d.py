"""Attention in its rank-4 form ([1, H, S, D] / [1, H, S, T], as Hugging Face exports it and TVM imports it) on
the NPU: the decoder step builders build with no fallback, their attention matmuls, softmax and RoPE's
arithmetic on the NPU, within 1e-2 x max(1, max|ref|) of TVM's llvm build; rank-4 softmax, norms and
rope from Relax and ONNX; a conv's NCHW map read by a softmax over its last axis (two layouts of one
tensor: the region is cut, partition/layouts.py) still right."""

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tvm import relax

import tvm_npu
from builders import module_of
from conftest import run_cpu, run_vm
from tvm_npu.contract.errors import NPUFallbackWarning
from tvm_npu.models.decoder import gpt2_step, llama_step

R = relax.op
SMALL = {
    "gpt2": lambda s: gpt2_step(layers=1, d=32, heads=4, ffn=64, vocab=64, max_context=16, seq_len=s),
    "llama": lambda s: llama_step(layers=1, d=32, heads=4, kv_heads=2, ffn=64, vocab=64, max_context=16, seq_len=s),
}


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))


def build(mod):
    """tvm_npu.build with every NPUFallbackWarning an error: no region may fall back."""
    report = tvm_npu.BuildReport()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NPUFallbackWarning)
        ex = tvm_npu.build(mod, report=report)
    return ex, report


def placed(report, op) -> list:
    return [(p.device, p.composite, p.code) for p in report.placements if p.op == op]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("seq_len", [1, 4])
def test_decoder_step_attention_runs_on_the_npu(rng, arch, seq_len):
    model = SMALL[arch](seq_len)
    ex, report = build(tvm_npu.from_onnx(model))
    assert not [p for p in report.placements if p.code == "NPU_E_INTERNAL"], report.table()
    # Q x K^T and P x V (and every dense) on the MAC array, the softmax of [1, H, S, T] on the vector unit
    assert all(d == "npu" and c.startswith(("npu.matmul", "npu.dense")) for d, c, _ in placed(report, "relax.matmul"))
    assert [d for d, _, _ in placed(report, "relax.nn.softmax")] == ["npu"], report.table()
    assert not [p for p in report.placements if p.code == "NPU_E_AXIS"], report.table()
    if arch == "llama":  # Q's RoPE is one ROPE layer (its Split read as two slices, rewrite/split_halves.py)
        assert ("npu", "npu.rope", "") in placed(report, "relax.add"), report.table()
    info = tvm_npu.models.decoder.step_info(model)
    h_kv, t, d = info["kv_heads"], info["max_context"], info["head_dim"]
    ids = rng.integers(0, info["vocab"], (1, seq_len)).astype(np.int64)
    position = np.array([3 if seq_len == 1 else 0], np.int64)
    caches = [rng.standard_normal((1, h_kv, t, d)).astype(np.float32) for _ in range(2 * info["layers"])]
    got = run_vm(ex, ids, position, *caches)
    want = run_cpu(tvm_npu.from_onnx(model), ids, position, *caches)
    for g, w in zip(got, want):
        close(g, w)


def _rotate_half(x, d):
    return R.concat([R.negative(R.strided_slice(x, [3], [d // 2], [d])), R.strided_slice(x, [3], [0], [d // 2])], 3)


def test_rank4_softmax_norms_and_rope_from_relax(rng):
    """[1, H, S, D] through rms_norm, rope (constant tables), layer_norm, Q x K^T, softmax and P x V: all of
    it one NPU region (no layout conversion between the ops), close to llvm."""
    h, s, d = 4, 6, 16
    angles = np.arange(s)[:, None] * (1e-2 * np.arange(1, d + 1))[None, :]
    cos, sin = (relax.const(f(angles).astype(np.float32)) for f in (np.cos, np.sin))
    gamma = relax.const(rng.uniform(0.5, 1.5, d).astype(np.float32))
    beta = relax.const(rng.standard_normal(d).astype(np.float32))

    def fn(q, k):
        q = R.nn.rms_norm(q, gamma, axes=[-1])
        q = R.add(R.multiply(q, cos), R.multiply(_rotate_half(q, d), sin))
        k = R.nn.layer_norm(k, gamma, beta, axes=[-1])
        scores = R.nn.softmax(R.matmul(q, R.permute_dims(k, [0, 1, 3, 2])), axis=-1)
        return R.matmul(scores, k)

    mod = module_of(fn, [(1, h, s, d), (1, h, s, d)])
    ex, report = build(mod)
    ops = ("relax.nn.rms_norm", "relax.nn.layer_norm", "relax.nn.softmax", "relax.matmul", "relax.negative")
    assert all(p.device == "npu" for p in report.placements if p.op in ops), report.table()
    assert len({p.region for p in report.placements if p.device == "npu"}) == 1, report.table()
    q, k = (rng.standard_normal((1, h, s, d)).astype(np.float32) for _ in range(2))
    close(run_vm(ex, q, k), run_cpu(mod, q, k))


def _onnx(nodes, x_shape, inits):
    graph = helper.make_graph(
        nodes,
        "rank4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def test_rank4_softmax_and_norms_from_onnx(rng):
    """LayerNormalization, RMSNormalization and Softmax over the last axis of [1, H, S, T], as ONNX: on the
    NPU (they used to stay on the CPU, NPU_E_AXIS), close to llvm. The softmax reads a computed value (the
    norm's), not the model input (constraint_softmax_input)."""
    shape, t = [1, 3, 5, 24], 24
    inits = [
        helper.make_tensor("g", TensorProto.FLOAT, [t], rng.uniform(0.5, 1.5, t).astype(np.float32)),
        helper.make_tensor("b", TensorProto.FLOAT, [t], rng.standard_normal(t).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["n1"], axis=-1),
        helper.make_node("RMSNormalization", ["n1", "g"], ["n2"], axis=-1),
        helper.make_node("Softmax", ["n2"], ["y"], axis=-1),
    ]
    mod = tvm_npu.from_onnx(_onnx(nodes, shape, inits))
    ex, report = build(mod)
    for op in ("relax.nn.layer_norm", "relax.nn.rms_norm", "relax.nn.softmax"):
        assert [d for d, _, _ in placed(report, op)] == ["npu"], report.table()
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))


def test_conv_map_read_by_a_softmax_over_its_last_axis(rng):
    """A conv's NCHW map is the softmax's [N, C, H, W] tensor over W (ROWS): one tensor, two layouts. The
    region is cut between them (the map crosses DDR, each side reads it in its own layout), the answer
    stays right; before, the softmax stayed on the CPU (NPU_E_AXIS)."""
    w = relax.const((0.2 * rng.standard_normal((8, 4, 3, 3))).astype(np.float32))

    def fn(x):
        y = R.nn.relu(R.nn.conv2d(x, w, padding=[1, 1, 1, 1]))
        return R.nn.layer_norm(
            R.nn.softmax(y, axis=-1),
            relax.const(np.ones(16, np.float32)),
            relax.const(np.zeros(16, np.float32)),
            axes=[-1],
        )

    mod = module_of(fn, [(1, 4, 12, 16)])
    ex, report = build(mod)
    assert [d for d, _, _ in placed(report, "relax.nn.softmax")] == ["npu"], report.table()
    assert [d for d, _, _ in placed(report, "relax.nn.conv2d")] == ["npu"], report.table()
    assert len({p.region for p in report.placements if p.device == "npu"}) == 2, report.table()
    x = rng.standard_normal((1, 4, 12, 16)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))


def test_row_broadcast_operand_of_a_rank4_tensor(rng):
    """An elementwise operand broadcast along the last axis of [1, H, S, T] (a decode step's run-time mask
    row) is ELTWISE's per-channel b of rows; with a conv's map (axis 1) it is per channel of the NCHW map."""
    h, s, t = 2, 3, 16

    def fn(x, row):
        return R.nn.softmax(R.add(R.multiply(x, relax.const(0.5, "float32")), row), axis=-1)

    mod = module_of(fn, [(1, h, s, t), (1, t)])
    ex, report = build(mod)
    assert [d for d, _, _ in placed(report, "relax.add")] == ["npu"], report.table()
    x, row = rng.standard_normal((1, h, s, t)).astype(np.float32), rng.standard_normal((1, t)).astype(np.float32)
    close(run_vm(ex, x, row), run_cpu(mod, x, row))
