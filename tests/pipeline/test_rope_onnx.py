"""ROPE from ONNX: Hugging Face Llama's apply_rotary_pos_emb as torch exports it (Slice, Neg, Concat, Mul,
Add; opset 17) imported by tvm_npu.from_onnx, with constant cos / sin, run-time ones, and a decoder's
tables gathered by position_ids on the CPU; built for the NPU with ROPE placed there, compared with
onnxruntime and TVM's llvm build within 1e-2 * max(1, max|ref|)."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import assert_fp16_close, run_cpu, run_vm

F = TensorProto.FLOAT


def tables(s, d, base=10000.0):
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    emb = np.concatenate([np.arange(s)[:, None] * inv[None, :]] * 2, axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _rope_nodes(x, cos, sin, out, d):
    """rotate_half and the combination, as torch.onnx exports them (Slice ends at INT64_MAX)."""
    return [
        helper.make_node("Slice", [x, "half", "big", "last"], [f"{out}_x2"]),
        helper.make_node("Slice", [x, "zero", "half", "last"], [f"{out}_x1"]),
        helper.make_node("Neg", [f"{out}_x2"], [f"{out}_n2"]),
        helper.make_node("Concat", [f"{out}_n2", f"{out}_x1"], [f"{out}_rot"], axis=-1),
        helper.make_node("Mul", [x, cos], [f"{out}_xc"]),
        helper.make_node("Mul", [f"{out}_rot", sin], [f"{out}_rs"]),
        helper.make_node("Add", [f"{out}_xc", f"{out}_rs"], [out]),
    ]


def _consts(d):
    ints = {"half": [d // 2], "big": [2**63 - 1], "zero": [0], "last": [-1]}
    return [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "rope", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _build(model):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(tvm_npu.from_onnx(model), report=report), report


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _rope_on_npu(report):
    return any(p.device == "npu" and p.composite == "npu.rope" for p in report.placements)


@pytest.mark.parametrize("run_time", [False, True])
def test_onnx_rope_runs_on_npu_close_to_onnxruntime_and_tvm(rng, run_time):
    h, s, d = 4, 8, 64
    cos, sin = (t[None, None] for t in tables(s, d))
    x_info = helper.make_tensor_value_info("x", F, [1, h, s, d])
    inputs, inits = [x_info], _consts(d)
    if run_time:
        inputs += [helper.make_tensor_value_info(n, F, [1, 1, s, d]) for n in ("cos", "sin")]
    else:
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    out = [helper.make_tensor_value_info("y", F, [1, h, s, d])]
    model = _model(_rope_nodes("x", "cos", "sin", "y", d), inputs, out, inits)
    ex, report = _build(model)
    assert _rope_on_npu(report) and all(p.device == "npu" for p in report.placements), report.table()
    x = (rng.standard_normal((1, h, s, d)) * 2).astype(np.float32)
    args = [x, cos, sin] if run_time else [x]
    got = run_vm(ex, *args)
    assert_fp16_close(got, _ort(model, dict(zip(("x", "cos", "sin"), args))))
    assert_fp16_close(got, run_cpu(tvm_npu.from_onnx(model), *args))


def test_onnx_decoder_rope_with_tables_gathered_by_position(rng):
    """Attention scores of one decoder step: cos / sin gathered from [T, D] tables by position_ids (on the
    CPU), unsqueezed to [1, 1, S, D], rotating q and k [1, H, S, D], then q_rot x k_rot^T: both rotations run
    as ROPE with the run-time tables, in one NPU region with the MATMUL (a lone rotation moves more bytes
    than it computes, so it stays on the CPU by the region-size rule)."""
    h, s, d, t = 4, 5, 32, 16
    cos_t, sin_t = tables(t, d)
    inits = _consts(d) + [
        numpy_helper.from_array(cos_t, "cos_table"),
        numpy_helper.from_array(sin_t, "sin_table"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Gather", ["cos_table", "position_ids"], ["cos3"], axis=0),
        helper.make_node("Gather", ["sin_table", "position_ids"], ["sin3"], axis=0),
        helper.make_node("Unsqueeze", ["cos3", "one"], ["cos"]),
        helper.make_node("Unsqueeze", ["sin3", "one"], ["sin"]),
        *_rope_nodes("q", "cos", "sin", "q_rot", d),
        *_rope_nodes("k", "cos", "sin", "k_rot", d),
        helper.make_node("Transpose", ["k_rot"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_rot", "k_t"], ["scores"]),
    ]
    inputs = [
        helper.make_tensor_value_info("q", F, [1, h, s, d]),
        helper.make_tensor_value_info("k", F, [1, h, s, d]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, s]),
    ]
    outputs = [helper.make_tensor_value_info("scores", F, [1, h, s, s])]
    model = _model(nodes, inputs, outputs, inits)
    ex, report = _build(model)
    ropes = [p for p in report.placements if p.composite == "npu.rope" and p.op == "relax.add"]
    assert len(ropes) == 2 and all(p.device == "npu" for p in ropes), report.table()
    assert len({p.region for p in report.placements if p.device == "npu"}) == 1, report.table()
    q = rng.standard_normal((1, h, s, d)).astype(np.float32)
    k = rng.standard_normal((1, h, s, d)).astype(np.float32)
    pos = np.array([[3, 4, 5, 6, 7]], np.int64)
    got = run_vm(ex, q, k, pos)
    assert_fp16_close(got, _ort(model, {"q": q, "k": k, "position_ids": pos}))
    assert_fp16_close(got, run_vm(tvm.compile(tvm_npu.from_onnx(model), target="llvm"), q, k, pos))
