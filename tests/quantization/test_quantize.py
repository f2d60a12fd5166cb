"""Post-training quantization (tvm_npu.quantize), the calibration observers and the per-layer SQNR tool,
against independent references: numpy for the observers, TVM's own llvm build of the float model for
the QDQ model's accuracy, and the NPU pattern table for the QDQ form."""

import math

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tvm_npu.quantization import calibrate as cal
from tvm_npu.quantization.ptq import quantize
from tvm_npu.tools.accuracy import format_sqnr_table, layer_sqnr


def llvm(mod):
    return tvm.compile(mod, target="llvm")


def run(ex, *inputs):
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(i) for i in inputs])
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


def cosine(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def calls(mod, op):
    return [
        b.value
        for blk in mod["main"].body.blocks
        for b in blk.bindings
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax." + op
    ]


# --- observers ----------------------------------------------------------------------------------


def test_minmax_is_exact():
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2, 3, 5)) * s + o for s, o in ((1, 0), (3, 1), (0.1, -2))]
    obs = cal.make_observer("minmax")
    for b in batches:
        obs.update(b)
    allv = np.concatenate([b.ravel() for b in batches])
    assert obs.range() == (allv.min(), allv.max())


@pytest.mark.parametrize("p", [99.99, 99.0, 100.0])
def test_percentile_matches_numpy(p):
    # growing scales force the histogram to double its bin width (exactly) several times
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal(50_000) * s + 0.5 for s in (0.25, 1.0, 4.0, 2.0)]
    obs = cal.make_observer("percentile", percentile=p)
    for b in batches:
        obs.update(b)
    allv = np.concatenate(batches)
    assert obs.hist.sum() == allv.size
    lo, hi = obs.range()
    ref_lo, ref_hi = np.percentile(allv, [100 - p, p])
    assert abs(lo - ref_lo) <= 2 * obs.width and abs(hi - ref_hi) <= 2 * obs.width
    assert obs.width < 0.01


def test_entropy_ignores_outliers():
    rng = np.random.default_rng(2)
    data = np.concatenate([rng.standard_normal(200_000), [60.0, -55.0, 58.0]])
    ent, mm = cal.make_observer("entropy"), cal.make_observer("minmax")
    for chunk in np.array_split(data, 4):
        ent.update(chunk)
        mm.update(chunk)
    lo, hi = ent.range()
    assert mm.range() == (-55.0, 60.0)
    # a much tighter range that still keeps the bulk (|x| < 3 holds 99.7% of a unit normal)
    assert 3.0 < hi < 15.0 and -15.0 < lo < -3.0
    relu = np.maximum(rng.standard_normal(100_000), 0)
    obs = cal.make_observer("entropy")
    obs.update(relu)
    assert obs.range()[0] == 0.0 and 1.5 < obs.range()[1] <= relu.max()


def test_qparams():
    s, z = cal.activation_qparams(-1.0, 3.0)
    assert math.isclose(s, 4 / 255, rel_tol=1e-6) and z == round(-128 + 1 / s)
    assert cal.activation_qparams(2.0, 5.0) == cal.activation_qparams(0.0, 5.0)  # widened to 0
    assert cal.activation_qparams(2.0, 5.0)[1] == -128
    assert cal.activation_qparams(0.0, 0.0) is None
    assert cal.activation_qparams(float("nan"), 1.0) is None
    obs = cal.make_observer("minmax")
    obs.update(np.array([1.0, np.inf]))
    assert cal.activation_qparams(*obs.range()) is None
    w = np.zeros((3, 2, 1, 1), np.float32)
    w[1] = [[[0.5]], [[-1.27]]]
    sc = cal.weight_scales(w, 0)
    assert sc[0] > 0 and math.isclose(sc[1], 0.01, rel_tol=1e-6)
    assert cal.quantize_weight(w, sc, 0)[1].ravel().tolist() == [50, -127]


# --- the float CNN ------------------------------------------------------------------------------


def small_cnn(seed=0):
    """conv3x3+bias+relu, depthwise 3x3+bias+clip, conv1x1+bias, residual add, global average pool
    (R.mean), dense (matmul with a transposed constant) + bias."""
    rng = np.random.default_rng(seed)

    def c(a):
        return relax.const(np.asarray(a, np.float32))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 16, 16), "float32"))
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, c(rng.standard_normal((8, 3, 3, 3)) / 5), padding=1), "conv1")
            y = bb.emit(relax.op.add(y, c(rng.standard_normal((1, 8, 1, 1)) * 0.1)), "bias1")
            r = bb.emit(relax.op.nn.relu(y), "relu1")
            y = bb.emit(relax.op.nn.conv2d(r, c(rng.standard_normal((8, 1, 3, 3)) / 3), padding=1, groups=8), "dw")
            y = bb.emit(relax.op.add(y, c(rng.standard_normal((1, 8, 1, 1)) * 0.1)), "bias2")
            y = bb.emit(relax.op.clip(y, 0, 6), "clip2")
            y = bb.emit(relax.op.nn.conv2d(y, c(rng.standard_normal((8, 8, 1, 1)) / 3)), "pw")
            y = bb.emit(relax.op.add(y, c(rng.standard_normal((1, 8, 1, 1)) * 0.1)), "bias3")
            y = bb.emit(relax.op.add(y, r), "res")
            y = bb.emit(relax.op.mean(y, axis=[2, 3]), "gap")
            wt = bb.emit(relax.op.permute_dims(c(rng.standard_normal((10, 8)) / 3)), "fcT")
            y = bb.emit(relax.op.matmul(y, wt), "fc")
            y = bb.emit_output(relax.op.add(y, c(rng.standard_normal(10) * 0.1)), "logits")
        bb.emit_func_output(y)
    return bb.get()


def images(n, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 3, 16, 16)) * scale).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def cnn():
    mod = small_cnn()
    qmod, report = quantize(mod, images(16, seed=10), progress=False)
    return mod, qmod, report


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_qdq_cnn_matches_float(cnn, method):
    mod = cnn[0]
    qmod = cnn[1] if method == "minmax" else quantize(mod, images(16, seed=10), method=method, progress=False)[0]
    fex, qex = llvm(mod), llvm(qmod)
    for x in images(6, seed=99):  # held out
        assert cosine(run(fex, x), run(qex, x)) >= 0.99


def test_qdq_structure(cnn):
    _, qmod, report = cnn
    # x, relu1, clip2, bias3 (pw out), res, gap, logits: one quantize each; + 4 weights + 4 biases
    names = [t.name for t in report.tensors]
    assert names == ["x", "relu1", "clip2", "bias3", "res", "gap", "logits"]
    assert len(calls(qmod, "quantize")) == 7 and len(calls(qmod, "dequantize")) == 7 + 8
    assert not report.skipped and [op for _, op in report.ops] == ["nn.conv2d"] * 3 + ["add", "mean", "matmul"]
    act_scale = {t.name: t.scale for t in report.tensors}
    for q in calls(qmod, "quantize"):
        assert q.args[1].value.numpy().shape == () and str(q.args[2].value.numpy().dtype) == "int8"
        assert q.attrs.axis == 1 and q.attrs.out_dtype == "int8"
    consts = [d for d in calls(qmod, "dequantize") if isinstance(d.args[0], tvm.ir.Constant)]
    weights = [d for d in consts if d.args[0].value.numpy().dtype == np.int8]
    biases = [d for d in consts if d.args[0].value.numpy().dtype == np.int32]
    # quantize() folds constants first, so the dense weight is the folded [K, N] transpose, per N.
    assert [w.args[0].value.numpy().shape for w in weights] == [(8, 3, 3, 3), (8, 1, 3, 3), (8, 8, 1, 1), (8, 10)]
    for w, b, s_x, axis in zip(weights, biases, ["x", "relu1", "clip2", "gap"], [0, 0, 0, 1]):
        wq, ws, wz = (a.value.numpy() for a in w.args)
        assert w.attrs.axis == axis and ws.shape == (wq.shape[axis],) and not wz.any()
        per_channel = np.moveaxis(wq, axis, 0).reshape(wq.shape[axis], -1)
        assert np.abs(per_channel).max(1).max() == 127  # symmetric, full range
        bq, bs, bz = (a.value.numpy() for a in b.args)
        assert bq.dtype == np.int32 and not bz.any() and bz.dtype == np.int32
        np.testing.assert_allclose(bs, act_scale[s_x] * ws, rtol=1e-6)
    # the conv chains keep relu / clip before the quantize
    text = qmod.script()
    assert "R.nn.relu(bias1)" in text and "R.clip(bias2, 0, 6)" in text
    assert "R.quantize(relu1," in text and "R.quantize(clip2," in text


def composites(mod):
    """The composites the NPU pattern table forms (its patterns only: whether int8 is supported is
    the checks' business)."""
    from tvm_npu.partition.patterns import npu_patterns

    pats = [(p.name, p.pattern, p.annotation_patterns) for p in npu_patterns()]
    fused = relax.transform.FuseOpsByPattern(pats, bind_constants=True, annotate_codegen=False)(mod)
    return sorted(
        str(f.attrs["Composite"]) for f in fused.functions.values() if f.attrs is not None and "Composite" in f.attrs
    )


def test_qdq_form_matches_npu_patterns(cnn):
    """The quantized convs, mean and dense are taken whole by the NPU's int8 patterns."""
    comps = composites(cnn[1])
    assert {
        "npu.qconv2d_bias_relu",
        "npu.qconv2d_bias_clip",
        "npu.qconv2d_bias",
        "npu.qglobal_avg_pool",
        "npu.qdense_bias",
    } <= set(comps)
    # relu1's dequantize feeds both the depthwise conv and the residual add (as in onnxruntime's QDQ
    # models): one binding cannot join two composites, so the add is matched here only when its
    # operands' dequantizes are its own
    bb = relax.BlockBuilder()
    a, b = (relax.Var(n, relax.TensorType((1, 4, 8, 8), "float32")) for n in "ab")
    with bb.function("main", [a, b]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(a, b), "s")
            out = bb.emit_output(relax.op.nn.max_pool2d(s, 2, 2), "p")
        bb.emit_func_output(out)
    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((1, 4, 8, 8)), rng.standard_normal((1, 4, 8, 8))) for _ in range(2)]
    qmod, report = quantize(bb.get(), batches, progress=False)
    assert [t.name for t in report.tensors] == ["a", "b", "s", "p"]
    # and the model's input quantizes and output dequantize (quantized staging, format 1.3)
    assert composites(qmod) == ["npu.qadd", "npu.qinput", "npu.qinput", "npu.qmax_pool2d", "npu.qoutput"]


def test_skip_keeps_ops_float():
    mod = small_cnn()
    qmod, report = quantize(mod, images(4, seed=3), skip=("dw", "add"), progress=False)
    skipped = {s.name: (s.op, s.reason) for s in report.skipped}
    assert skipped == {"dw": ("nn.conv2d", "skipped by the user ('dw')"), "res": ("add", "skipped by the user ('add')")}
    # the depthwise conv keeps its float weight and bias; its input is still quantized (by conv1)
    dw = [c for c in calls(qmod, "nn.conv2d") if c.attrs.groups == 8][0]
    assert isinstance(dw.args[1], tvm.ir.Constant) and dw.args[1].value.numpy().dtype == np.float32
    # the float add still gets a QDQ pair on its output: the quantized mean reads it
    assert {t.name: t.op for t in report.tensors}["res"] == "add"
    assert len(calls(qmod, "quantize")) == len(report.tensors)
    assert cosine(run(llvm(mod), images(1, 5)[0]), run(llvm(qmod), images(1, 5)[0])) > 0.99


def test_unquantizable_ops_are_reported():
    """Activation x activation matmul (no constant weight) and a conv whose output is always 0 stay
    float, with their reasons; the calibration batches may come as dicts, from a generator."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            zero = bb.emit(relax.op.nn.conv2d(x, relax.const(np.zeros((4, 4, 1, 1), np.float32))), "zero")
            a = bb.emit(relax.op.reshape(x, (4, 64)), "a")
            mm = bb.emit(relax.op.matmul(a, relax.op.permute_dims(a)), "mm")
            out = bb.emit_output(relax.Tuple([zero, mm]))
        bb.emit_func_output(out)
    rng = np.random.default_rng(4)
    gen = ({"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(3))
    qmod, report = quantize(bb.get(), gen, progress=False)
    assert report.batches == 3 and not report.tensors and not report.ops
    reasons = {s.name: s.reason for s in report.skipped}
    assert reasons["mm"] == "weight is not a constant"
    assert reasons["zero"].startswith("activation range of zero is empty")
    assert not calls(qmod, "quantize")


def _onnx_cnn():
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((8, 3, 3, 3)) / 5).astype(np.float32)
    w2 = (rng.standard_normal((10, 8)) / 3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1),
        helper.make_node("Softmax", ["y"], ["p"]),
    ]
    inits = [
        numpy_helper.from_array(a, n)
        for a, n in [
            (w1, "W1"),
            (rng.standard_normal(8).astype(np.float32) * 0.1, "B1"),
            (w2, "W2"),
            (rng.standard_normal(10).astype(np.float32) * 0.1, "B2"),
        ]
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    from tvm.relax.frontend.onnx import from_onnx

    return relax.transform.FoldConstant()(from_onnx(model, keep_params_in_input=False))


def test_onnx_import_gemm_weight_per_column():
    """FoldConstant turns Gemm's transposed weight into a [K, N] constant: scales along axis 1."""
    mod = _onnx_cnn()
    qmod, report = quantize(mod, (x for x in images(8, seed=6)), method="percentile", progress=False)
    dense_w = [
        d
        for d in calls(qmod, "dequantize")
        if isinstance(d.args[0], tvm.ir.Constant) and d.args[0].value.numpy().shape == (8, 10)
    ]
    assert len(dense_w) == 1 and dense_w[0].attrs.axis == 1
    assert dense_w[0].args[1].value.numpy().shape == (10,)
    assert [op for _, op in report.ops] == ["nn.conv2d", "mean", "reshape", "matmul"]
    # Flatten's reshape moves quantized data: it keeps the mean's scale and zero point (a view on the NPU)
    assert [t.op for t in report.tensors] == ["input", "nn.conv2d", "mean", "reshape", "matmul"]
    q = {t.op: (t.scale, t.zero_point) for t in report.tensors}
    assert q["reshape"] == q["mean"]
    fex, qex = llvm(mod), llvm(qmod)
    for x in images(4, seed=7):
        assert cosine(run(fex, x), run(qex, x)) >= 0.99


# --- per-layer SQNR -----------------------------------------------------------------------------


def test_layer_sqnr(cnn):
    mod, qmod, report = cnn
    x = images(1, seed=42)[0]
    rows = layer_sqnr(mod, qmod, report, (x,), build=llvm)
    assert [r[0] for r in rows] == [t.name for t in report.tensors]
    assert rows[0][1] == "input" and rows[1][1] == "nn.conv2d"
    assert all(math.isfinite(db) and db > 20 for _, _, db in rows), rows
    # a calibration on inputs 1000x too small saturates the input and the first conv's output
    bad_q, bad_report = quantize(mod, images(16, seed=10, scale=1e-3), progress=False)
    bad = layer_sqnr(mod, bad_q, bad_report, {"x": x}, build=llvm)
    assert bad[0][2] < rows[0][2] - 20 and bad[1][2] < rows[1][2] - 10
    table = format_sqnr_table(bad)
    assert "relu1" in table and "<" in table.splitlines()[2]


def test_layer_sqnr_default_build(cnn):
    """Through tvm_npu.build (NPU regions where they form, CPU elsewhere): the same SQNR as llvm."""
    mod, qmod, report = cnn
    x = images(1, seed=43)[0]
    rows = layer_sqnr(mod, qmod, report, x)
    ref = layer_sqnr(mod, qmod, report, x, build=llvm)
    assert [r[:2] for r in rows] == [r[:2] for r in ref]
    for (_, _, db), (_, _, db_ref) in zip(rows, ref):
        assert db > 20 and abs(db - db_ref) < 3


def test_gates_and_row_slices_are_quantized_for_the_npu():
    # The ops of an LSTM cell: a projection, a row slice of it, sigmoid / tanh and their product. The
    # slice keeps its input's scale and zero point (a view on the NPU); the rest get their own.
    import tvm_npu

    rng = np.random.default_rng(7)
    w = (rng.standard_normal((32, 16)) / 4).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(w.T.copy())))
            s = bb.emit(relax.op.strided_slice(y, [0], [2], [6]))
            gate = bb.emit(relax.op.multiply(relax.op.sigmoid(s), relax.op.tanh(s)))
            out = bb.emit_output(bb.emit(relax.op.subtract(gate, relax.op.tanh(s))))
        bb.emit_func_output(out)
    mod = bb.get()
    calib = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(8)]
    qmod, qrep = quantize(mod, calib, progress=False)
    ops = {op for _, op in qrep.ops}
    assert {"strided_slice", "sigmoid", "tanh", "multiply", "subtract"} <= ops, qrep.summary()
    by_op = {t.op: (t.scale, t.zero_point) for t in qrep.tensors}
    assert by_op["strided_slice"] == by_op["matmul"]
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(qmod, report=report)
    composites = {p.composite for p in report.placements if p.device == "npu"}
    assert {"npu.qslice_rows", "npu.qsigmoid", "npu.qtanh"} <= composites, report.table()
    assert all(p.precision == "int8" for p in report.placements if p.device == "npu")
    xv = calib[0]
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    out_scale = [t.scale for t in qrep.tensors if t.op == "subtract"][0]
    assert np.abs(got - want).max() <= 4 * out_scale
