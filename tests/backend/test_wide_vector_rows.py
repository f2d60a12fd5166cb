"""Elementwise rows wider than max_width (SD-1.5's GEGLU: GELU and multiply over 5,120 columns, npu-laptop's
max_width 4,096) run on the NPU as several commands over column slices (plan/row_slices.py). Here on npu-ref
with max_width 256, so the models stay tiny: a GEGLU (Linear, chunk, GELU, multiply) and a row add, tanh
and per-column bias, against onnxruntime on the same ONNX file and against the same model built with a
max_width that needs no slices (bit for bit: slicing an elementwise row changes no element)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import npu_modules, run_vm
from tvm_npu.contract import stream

ort = pytest.importorskip("onnxruntime")

NARROW = tvm_npu.get_config("npu-ref").replace(max_width=256)
WIDE = tvm_npu.get_config("npu-ref").replace(max_width=2048)


def _geglu(tokens: int, dim: int, inner: int, seed: int = 0) -> onnx.ModelProto:
    """y = h * gelu(g), [h, g] = chunk(x @ W + b, 2) as diffusers' GEGLU exports it; then x2 = y + bias_row
    and tanh(x2) * y (a same-shape multiply), every row `inner` wide."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, 2 * inner)) / np.sqrt(dim)).astype(np.float32)
    b = (0.1 * rng.standard_normal(2 * inner)).astype(np.float32)
    col = (0.1 * rng.standard_normal(inner)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p0"]),
        helper.make_node("Add", ["p0", "b"], ["p"]),
        helper.make_node("Split", ["p", "split"], ["h", "g"], axis=-1),
        helper.make_node("Gelu", ["g"], ["gg"], domain=""),
        helper.make_node("Mul", ["h", "gg"], ["y"]),
        helper.make_node("Add", ["y", "col"], ["y2"]),
        helper.make_node("Tanh", ["y2"], ["t"]),
        helper.make_node("Mul", ["t", "y"], ["out"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (col, "col"))]
    inits.append(numpy_helper.from_array(np.array([inner, inner], np.int64), "split"))
    graph = helper.make_graph(
        nodes,
        "geglu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, dim])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, tokens, inner])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _build(model, cfg):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), config=cfg, report=report)
    return ex, report


@pytest.mark.parametrize("inner", [640, 300])  # 640: slices of 256, 256, 128; 300: 256 and 44
def test_wide_geglu_runs_on_the_npu_in_column_slices(inner):
    model = _geglu(8, 64, inner)
    x = np.random.default_rng(1).standard_normal((1, 8, 64)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    ex, report = _build(model, NARROW)
    cpu = [(p.op, p.code, p.reason) for p in report.placements if p.device != "npu"]
    assert not cpu, cpu
    assert report.fallback_cost()["regions"] == 1
    got = run_vm(ex, x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, float(np.abs(ref).max()))
    # The same model where no row needs slicing: identical bits.
    wide_ex, _ = _build(model, WIDE)
    np.testing.assert_array_equal(got, run_vm(wide_ex, x))
    # Every vector command of the sliced build is at most max_width wide, and some were sliced.
    streams = [stream.decode(bytes(m["get_stream"]())) for m in npu_modules(ex)]
    rows = [c.args["row_elems"] for s in streams for c in s.commands if c.op in ("ELTWISE", "UNARY", "ADD")]
    assert max(rows) <= NARROW.max_width and inner not in rows, rows


def test_wide_4d_elementwise_is_still_refused_with_its_reason():
    # A 4-D tensor's layout is its region's choice: its last axis keeps the max_width limit.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 300])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 300])
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "sig", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    _, report = _build(model, NARROW)
    refused = [(p.code, p.reason) for p in report.placements if p.device != "npu"]
    assert len(refused) == 1 and refused[0][0] == "NPU_E_WIDTH", report.table()
    assert refused[0][1].endswith("(width 300 of a 4-D tensor > 256)"), refused
