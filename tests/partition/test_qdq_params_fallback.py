"""QDQ parameters the NPU cannot use (docs/npu.md section 8): a zero, negative, NaN or infinite scale, a
zero point outside its dtype's range. The QDQ group stays on the CPU with reason NPU_E_QUANT_SCALE (its
float entry refuses it too), the build succeeds, and the outputs are TVM llvm's on the same file, bit
for bit; onnxruntime's integer kernels, where they accept the model, agree within one output step."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm
from qdq_models import ort_session

SHAPE = (1, 4, 8, 8)


def qdq_conv(xs=0.05, ws=0.02, ys=0.1) -> onnx.ModelProto:
    """input -> Q/DQ (xs) -> Conv(DQ(int8 codes, ws per channel)) -> Q/DQ (ys): quantize_static's form."""
    w = np.random.default_rng(0).integers(-50, 50, (8, 4, 3, 3)).astype(np.int8)
    inits = [
        nh.from_array(np.array(xs, np.float32), "xs"),
        nh.from_array(np.array(0, np.int8), "xz"),
        nh.from_array(w, "wq"),
        nh.from_array(np.full(8, ws, np.float32), "ws"),
        nh.from_array(np.zeros(8, np.int8), "wz"),
        nh.from_array(np.array(ys, np.float32), "ys"),
        nh.from_array(np.array(0, np.int8), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def assert_conv_on_cpu_with_reason(report, detail: str):
    (conv,) = [p for p in report.placements if p.op == "relax.nn.conv2d"]
    assert conv.device == "cpu" and conv.code == "NPU_E_QUANT_SCALE", report.table()
    assert "finite and > 0" in conv.reason
    assert detail in conv.reason, conv.reason  # the parameter the NPU could not use, by value
    assert any("NPU_E_QUANT_SCALE" in line and "conv2d" in line for line in report.table().splitlines())


@pytest.mark.parametrize(
    "kwargs, detail, ort_agrees",
    [
        (dict(xs=-0.05), "scale -0.05 of dequantize", True),  # before: ERR_BAD_STREAM stopped the build
        (dict(ys=float("inf")), "scale inf of quantize", True),  # before: ERR_BAD_STREAM
        (dict(ys=float("nan")), "scale nan of quantize", True),
        # NaN weights make the conv NaN, and quantize(NaN) is 127 in TVM (clamp as compare-and-select,
        # docs/npu.md section 2) but -128 in onnxruntime: only TVM llvm is the reference here.
        (dict(ws=float("nan")), "scale nan of dequantize", False),
        (dict(ws=-0.02), "scale -0.02 of dequantize", True),
        # A dequantize by 0 is defined (zeros); a quantize by 0 TVM's own llvm build cannot compile.
        (dict(ws=0.0), "scale 0 of dequantize", True),
    ],
)
def test_bad_qdq_scales_run_on_the_cpu_as_tvm_computes_them(kwargs, detail, ort_agrees):
    model = qdq_conv(**kwargs)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    want = run_cpu(tvm.relax.frontend.onnx.from_onnx(model), x)  # TVM llvm on the same file
    ex, report = build(tvm_npu.from_onnx(model))
    assert_conv_on_cpu_with_reason(report, detail)
    got = run_vm(ex, x)
    np.testing.assert_array_equal(got, want)  # NaN where llvm has NaN
    if not ort_agrees:
        return
    # The second reference: onnxruntime's integer kernels on the same file.
    ort = ort_session(model, int8_kernels=True).run(None, {"input": x})[0]
    assert np.array_equal(np.isnan(ort), np.isnan(got))
    finite = np.isfinite(got)
    step = abs(kwargs.get("ys", 0.1)) if np.isfinite(kwargs.get("ys", 0.1)) else 0.0
    assert np.abs(ort[finite] - got[finite]).max(initial=0.0) <= step + 1e-6


def test_zero_point_out_of_range_runs_on_the_cpu():
    """An int32 zero point of 300 under an int8 quantize (a hand-built module; ONNX types the zero point
    as the codes): TVM saturates every code; the NPU could not store it, so the group stays on the CPU."""
    codes = np.random.default_rng(2).integers(-50, 50, (8, 4, 3, 3)).astype(np.int8)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s, z = relax.const(np.float32(0.05)), relax.const(np.int32(300))
            q = bb.emit(relax.op.quantize(x, s, z, axis=1, out_dtype="int8"))
            xd = bb.emit(relax.op.dequantize(q, s, z, axis=1, out_dtype="float32"))
            w = relax.op.dequantize(
                relax.const(codes), relax.const(np.full(8, 0.02, np.float32)), relax.const(np.zeros(8, np.int8)), axis=0
            )
            y = bb.emit(relax.op.nn.conv2d(xd, w, padding=1))
            s2, z2 = relax.const(np.float32(0.5)), relax.const(np.int8(0))
            yq = bb.emit(relax.op.quantize(y, s2, z2, axis=1, out_dtype="int8"))
            out = bb.emit_output(bb.emit(relax.op.dequantize(yq, s2, z2, axis=1, out_dtype="float32")))
        bb.emit_func_output(out)
    mod = bb.get()
    xv = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    ex, report = build(mod)
    assert_conv_on_cpu_with_reason(report, "zero point 300 of int8 dequantize (range -128..127)")
    np.testing.assert_array_equal(run_vm(ex, xv), run_cpu(mod, xv))
