"""Llama's gated MLP, down(SiLU(x W1) * (x W3)), on the NPU in one region: the two dense layers (CONV2D),
the SiLU (UNARY func 5), the product of two tensors (ELTWISE multiply, b_mode same) and the down
projection. A Relax module built by hand against TVM's llvm build, and the ONNX form torch exports
(SiLU as Sigmoid then Mul, fused by rewrite/fuse_silu.py) against onnxruntime; placements asserted."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from conftest import npu_modules, run_cpu, run_vm

T, D, F = 6, 64, 96  # tokens, model width, FFN width (odd multiples of 16 on purpose)


def _weights(rng):
    return [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in ((D, F), (D, F), (F, D))]


def _relax_mlp(w1, w3, w2, silu_as_sigmoid=False):
    x = relax.Var("x", relax.TensorType((T, D), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            gate = bb.emit(relax.op.matmul(x, relax.const(w1)))
            if silu_as_sigmoid:
                act = bb.emit(relax.op.multiply(bb.emit(relax.op.sigmoid(gate)), gate))  # sigmoid(x) * x order
            else:
                act = bb.emit(relax.op.nn.silu(gate))
            up = bb.emit(relax.op.matmul(x, relax.const(w3)))
            h = bb.emit(relax.op.multiply(act, up))
            out = bb.emit_output(bb.emit(relax.op.matmul(h, relax.const(w2))))
        bb.emit_func_output(out)
    return bb.get()


def _onnx_mlp(w1, w3, w2):
    """What torch.onnx.export writes for Llama's MLP: MatMul, Sigmoid, Mul (SiLU), MatMul, Mul, MatMul."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["gate"]),
        helper.make_node("Sigmoid", ["gate"], ["sig"]),
        helper.make_node("Mul", ["gate", "sig"], ["act"]),
        helper.make_node("MatMul", ["x", "w3"], ["up"]),
        helper.make_node("Mul", ["act", "up"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w3, "w3"), (w2, "w2"))]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, D])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _build_on_npu(mod):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    placed = {(p.device, p.composite) for p in report.placements}
    assert placed == {("npu", "npu.dense"), ("npu", "npu.silu"), ("npu", "npu.eltwise_multiply")}, report.table()
    assert len(report.regions) == 1 and len(npu_modules(ex)) == 1, report.table()
    return ex


def _close(got, ref):
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max()), np.abs(got - ref).max()


@pytest.mark.parametrize("silu_as_sigmoid", [False, True])
def test_relax_gated_mlp_is_one_npu_region_and_matches_llvm(rng, silu_as_sigmoid):
    w1, w3, w2 = _weights(rng)
    mod = _relax_mlp(w1, w3, w2, silu_as_sigmoid)
    ex = _build_on_npu(mod)
    for scale in (1.0, 4.0):
        x = (rng.standard_normal((T, D)) * scale).astype(np.float32)
        _close(run_vm(ex, x), run_cpu(mod, x))


def test_onnx_gated_mlp_as_torch_exports_it_matches_onnxruntime(rng):
    w1, w3, w2 = _weights(rng)
    model = _onnx_mlp(w1, w3, w2)
    ex = _build_on_npu(tvm_npu.from_onnx(model))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = (rng.standard_normal((T, D)) * 3).astype(np.float32)
    _close(run_vm(ex, x), sess.run(None, {"x": x})[0])
