"""Concatenation and row slices on the NPU (slices.py): producers write straight into their channels of a
resident tensor; other inputs are copied (int8: requantized) into theirs. Checked against the numpy
model of the fp16 datapath, TVM's llvm build and onnxruntime (fp16 and int8 QDQ)."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from conftest import run_vm
from npu_ref import fp16
from qdq_models import GraphBuilder, ort_session, output_scale, quantize_with_ort


def _w(rng, o, i, k):
    return (rng.standard_normal((o, i, k, k)) / np.sqrt(i * k * k)).astype(np.float32)


def joins(rng, c=16, hw=12):
    """conv1x1 | conv3x3 -> concat -> conv1x1, then concat with the region input and max-pool it."""
    ws = _w(rng, 8, c, 1), _w(rng, 16, c, 3), _w(rng, 24, 24, 1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, hw, hw), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(ws[0]))))
            b = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(ws[1]), padding=1)))
            d = bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.concat([a, b], axis=1)), relax.const(ws[2])))
            e = bb.emit(relax.op.concat([d, x], axis=1))
            out = bb.emit_output(bb.emit(relax.op.nn.max_pool2d(e, pool_size=2, strides=2)))
        bb.emit_func_output(out)
    return bb.get(), ws


def joins_reference(x, ws):
    a = fp16.conv2d_nchw(x, ws[0], act="relu")
    b = fp16.conv2d_nchw(x, ws[1], pad=(1, 1, 1, 1), act="relu")
    d = fp16.conv2d_nchw(np.concatenate([a, b], 1), ws[2])
    return fp16.pool_nchw(np.concatenate([d, x.astype(np.float16).astype(np.float32)], 1), "max", 2, 2)


@pytest.mark.parametrize("config,hw", [("npu-ref", 12), ("npu-small", 40)])
def test_concat_joins_run_in_one_region_bit_exact(rng, config, hw):
    mod, ws = joins(rng, hw=hw)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, config=config, report=report)
    assert len(report.regions) == 1 and all(p.device == "npu" for p in report.placements)
    x = rng.standard_normal((1, 16, hw, hw)).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, x), joins_reference(x, ws))
    # The two convolutions feeding the first concat write into it in place; the region input x needs
    # one copy pass into the second, and nothing else is copied.
    (info,) = report.regions.values()
    copies = [lay["name"] for lay in info["layers"] if ".copy" in lay["name"]]
    assert len(copies) == 1


def fire_net(seed=0, size=16, expand=32):
    """A SqueezeNet fire module between two convolutions, ending in a global average pool."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 32, 3, stride=2)
    s = g.conv(x, 32, 16, 1)
    y = g.node("Concat", [g.conv(s, 16, expand, 1), g.conv(s, 16, expand, 3)], axis=1)
    y = g.node("GlobalAveragePool", [g.conv(y, 2 * expand, 32, 1)])
    return g.model([1, 3, size, size], y, [1, 32, 1, 1])


def test_fire_module_fp16_matches_onnxruntime():
    model = fire_net()
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(model), report=report), x)
    assert len(report.regions) == 1 and all(p.device == "npu" for p in report.placements)
    want = ort_session(model, False).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def test_fire_module_int8_within_one_lsb_of_onnxruntime(tmp_path):
    model = fire_net(seed=1)
    rng = np.random.default_rng(3)
    calib = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    qmodel = quantize_with_ort(model, calib, tmp_path / "fire.onnx")
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(qmodel), report=report)
    concat = [p for p in report.placements if p.op == "relax.concat"]
    assert [(p.device, p.precision, p.composite) for p in concat] == [("npu", "int8", "npu.qconcat")]
    assert len(report.regions) == 1
    # onnxruntime gives the concat its first input's scale: the second input is requantized on its
    # way in (one copy pass), the first written in place.
    (info,) = report.regions.values()
    assert sum(".copy" in lay["name"] for lay in info["layers"]) == 1
    sess = ort_session(qmodel, True)
    lsb = output_scale(qmodel)
    for x in calib + [rng.standard_normal((1, 3, 16, 16)).astype(np.float32)]:
        diff = np.abs(run_vm(ex, x) - sess.run(None, {"input": x})[0]) / lsb
        assert diff.max() <= 1.0 + 1e-3


def _concat_model(shapes, axis=1):
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            ys = [bb.emit(relax.op.nn.relu(x)) for x in xs]
            out = bb.emit_output(bb.emit(relax.op.concat(ys, axis=axis)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(
    "shapes,axis,detail",
    [
        ([(1, 8, 4, 4), (1, 8, 4, 4)], 2, "axis 2"),
        ([(1, 8, 4, 4), (1, 12, 4, 4)], 1, "input channels [12] are not multiples of 8"),
        ([(1, 64, 64, 64), (1, 64, 64, 64)], 1, "> 524288"),
    ],
)
def test_concat_the_npu_cannot_take_stays_on_the_cpu_with_its_reason(shapes, axis, detail):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(_concat_model(shapes, axis), report=report)
    (concat,) = [p for p in report.placements if p.op == "relax.concat"]
    assert concat.device == "cpu" and concat.code == "NPU_E_CONCAT" and detail in concat.reason + str(concat)
    xs = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    np.testing.assert_array_equal(run_vm(ex, *xs), np.concatenate([np.maximum(x, 0) for x in xs], axis))


def recurrent_rows(rng, T=4, B=2, K=24, H=32):
    """x [T*B, K] projected once, then per step: rows t of the projection + h W2 -> relu; the steps'
    outputs stacked along rows. The row slices are views and the stack writes each step in place."""
    w1, w2 = ((rng.standard_normal(s) / 5).astype(np.float32) for s in ((H, K), (H, H)))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((T * B, K), "float32"))
    h0 = relax.Var("h0", relax.TensorType((B, H), "float32"))
    with bb.function("main", [x, h0]):
        with bb.dataflow():
            xw = bb.emit(relax.op.matmul(x, relax.const(w1.T.copy())))
            h, hs = h0, []
            for t in range(T):
                step = bb.emit(relax.op.strided_slice(xw, [0], [t * B], [(t + 1) * B]))
                h = bb.emit(relax.op.nn.relu(relax.op.add(step, relax.op.matmul(h, relax.const(w2.T.copy())))))
                hs.append(h)
            out = bb.emit_output(bb.emit(relax.op.concat(hs, axis=0)))
        bb.emit_func_output(out)
    return bb.get(), (w1, w2)


def test_row_slices_and_row_stacks_run_in_place_bit_exact(rng):
    mod, (w1, w2) = recurrent_rows(rng)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    assert len(report.regions) == 1 and all(p.device == "npu" for p in report.placements), report.table()
    (info,) = report.regions.values()
    # h_1..h_3 feed the next step (recurrent state, pinned in SRAM): they are copied into the stack;
    # h_4 is written there in place. The row slices of the projection are views: no commands.
    assert len(info["pinned_state"]) == 3
    assert len([lay for lay in info["layers"] if ".copy" in lay["name"]]) == 3
    x = rng.standard_normal((8, 24)).astype(np.float32)
    h0 = rng.standard_normal((2, 32)).astype(np.float32)
    xw, h, hs = fp16.dense(x, w1), h0, []
    for t in range(4):
        h = fp16.add(xw[2 * t : 2 * t + 2], fp16.dense(h, w2), act="relu")
        hs.append(h)
    np.testing.assert_array_equal(run_vm(ex, x, h0), np.concatenate(hs))


def test_a_slice_across_columns_stays_on_the_cpu_with_its_reason(rng):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.strided_slice(x, [1], [8], [24])))
        bb.emit_func_output(out)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(bb.get(), report=report)
    (sl,) = report.placements
    assert sl.device == "cpu" and sl.code == "NPU_E_LAYOUT"
    xv = rng.standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, xv), xv[:, 8:24])
