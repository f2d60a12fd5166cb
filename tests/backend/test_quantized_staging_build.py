"""Quantized staging (stream format 1.3, docs/npu.md section 2), the compiler's side: a model's input
quantizes and output dequantizes join its NPU region (the runtime converts them as it stages the region's
I/O), with the same results as the same build with them on the CPU and as TVM llvm's build of the QDQ
module; a quantize of a value the model computes stays on the CPU, with its reason."""

import numpy as np
import pytest

import tvm_npu
from conftest import npu_modules, run_vm
from tvm_npu.contract import stream


def staged_descriptors(ex):
    return [t for m in npu_modules(ex) for t in stream.decode(bytes(m["get_stream"]())).tensors if t.quantized]


def build_without_staging(mod, monkeypatch):
    """The same build with quantized staging off: the model's quantizes and dequantizes on the CPU."""
    from tvm_npu.partition import partitioner as partition

    with monkeypatch.context() as m:
        m.setattr(partition, "model_io", lambda func: None)
        return tvm_npu.build(mod)


@pytest.fixture(scope="module")
def kws():
    """The KWS LSTM of tutorials/lstm_wake_word.py in int8 with a 16-bit cell state (as
    benchmarks/host_speed.py builds it): X, h0, c0 in; logits, Y_h, Y_c out."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tutorials"))
    import lstm_wake_word as w

    rng = np.random.default_rng(0)
    h = w.HIDDEN
    p = {
        "Wx": rng.standard_normal((w.BANDS, 4 * h)) * 0.3,
        "Wh": rng.standard_normal((h, 4 * h)) * 0.1,
        "b": rng.standard_normal(4 * h) * 0.1,
        "Wy": rng.standard_normal((h, w.CLASSES)) * 0.3,
        "by": np.zeros(w.CLASSES),
    }
    model = w.export(p, (np.zeros(w.BANDS), np.ones(w.BANDS)))
    state = rng.standard_normal((1, 1, h)).astype(np.float32) * 0.3
    calib = [
        [rng.standard_normal((w.CHUNK, 1, w.BANDS)).astype(np.float32), state * np.float32(k), state * np.float32(k)]
        for k in np.linspace(-1, 1, 16)
    ]
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), calib, progress=False)
    report = tvm_npu.BuildReport()
    return qmod, tvm_npu.build(qmod, report=report), report, calib


def test_kws_lstm_input_quantizes_and_output_dequantizes_are_on_the_npu(kws):
    _, ex, report, _ = kws
    qdq = [p for p in report.placements if p.op in ("relax.quantize", "relax.dequantize")]
    assert len(qdq) == 6 and all(p.device == "npu" for p in qdq), report.table()
    assert not [p for p in report.placements if p.device == "cpu"], report.table()
    assert len(npu_modules(ex)) == 1
    staged = staged_descriptors(ex)
    assert sorted((t.role, t.dtype) for t in staged) == [
        ("input", "int16"),
        ("input", "int8"),
        ("input", "int8"),
        ("output", "int16"),
        ("output", "int8"),
        ("output", "int8"),
    ]


def test_kws_lstm_is_bit_equal_to_llvm_and_to_cpu_staging(kws, monkeypatch):
    import tvm
    from tvm import relax

    qmod, ex, _, calib = kws
    plain = build_without_staging(qmod, monkeypatch)
    assert not staged_descriptors(plain)
    vm = relax.VirtualMachine(tvm.compile(qmod, target="llvm"), tvm.cpu())
    rng = np.random.default_rng(11)
    for x, h0, c0 in calib[:3] + [[a + rng.standard_normal(a.shape).astype(np.float32) for a in calib[5]]]:
        got = run_vm(ex, x, h0, c0)
        want = [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(a) for a in (x, h0, c0)])]
        for g, p, w in zip(got, run_vm(plain, x, h0, c0), want):
            np.testing.assert_array_equal(g, p)
            np.testing.assert_array_equal(g, w)


@pytest.fixture(scope="module")
def qdq_cnn(tmp_path_factory):
    from qdq_models import op_zoo, quantize_with_ort

    rng = np.random.default_rng(100)
    model = op_zoo(seed=3)
    calib = [rng.standard_normal((1, 3, 17, 17)).astype(np.float32) for _ in range(16)]
    q = quantize_with_ort(model, calib, tmp_path_factory.mktemp("q") / "zoo.onnx")
    mod = tvm_npu.from_onnx(q)
    report = tvm_npu.BuildReport()
    return mod, tvm_npu.build(mod, report=report), report


def test_qdq_cnn_is_one_npu_region_with_its_io_conversions(qdq_cnn):
    _, ex, report = qdq_cnn
    assert not [p for p in report.placements if p.device == "cpu"], report.table()
    composites = {p.composite for p in report.placements}
    assert {"npu.qinput", "npu.qoutput"} <= composites, composites
    assert [(t.role, t.dtype, t.host_layout) for t in staged_descriptors(ex)] == [
        ("input", "int8", "NCHW"),
        ("output", "int8", "ROWS"),
    ]


def test_qdq_cnn_equals_llvm_and_cpu_staging(qdq_cnn, monkeypatch):
    import tvm
    from tvm import relax

    mod, ex, _ = qdq_cnn
    plain = build_without_staging(mod, monkeypatch)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    rng = np.random.default_rng(7)
    for k in range(8):
        x = rng.standard_normal((1, 3, 17, 17)).astype(np.float32) * (1 + k)
        x.flat[:3] = [np.nan, np.inf, -np.inf]
        got = run_vm(ex, x)
        np.testing.assert_array_equal(got, run_vm(plain, x))
        np.testing.assert_array_equal(got, vm["main"](tvm.runtime.tensor(x)).numpy())


def test_qdq_cnn_counts_the_input_values_its_staging_clamps(qdq_cnn):
    """An image 8x the calibration's spread, with a NaN and infinities: the runtime counts the values the
    input's staging clamped (docs/npu.md section 2), and tvm_npu.profile's collect has them per region input
    and summed; the numpy formula with the stream's scale and zero point gives the same count."""
    from tvm_npu.tools.commands import layer_table
    from tvm_npu.tools.profiler import collect

    _, ex, report = qdq_cnn
    (desc,) = [t for t in staged_descriptors(ex) if t.role == "input"]
    x = np.random.default_rng(8).standard_normal((1, 3, 17, 17)).astype(np.float32) * 8
    x.flat[:3] = [np.nan, np.inf, -np.inf]
    modules = npu_modules(ex)
    for m in modules:  # the fixture's module ran in the tests before
        m["reset_profile"]()
    run_vm(ex, x)
    prof = collect(report, [tvm_npu.runtime.profile_of(m) for m in modules])
    with np.errstate(invalid="ignore"):
        r = np.rint(x / np.float32(desc.scale)) + desc.zero_point
    want = int((~((r >= -128) & (r <= 127))).sum())
    assert want > 3
    (region,) = prof["regions"].values()
    assert region["clamped_inputs"][desc.io_index] == want and prof["clamped_inputs"] == want
    assert prof["saturated_inputs"] == 0 and tvm_npu.runtime.clamped_inputs(ex) == want
    assert f"{want} float32 input value(s) beyond an int8 / int16 input's range" in layer_table(prof)


def test_sessions_count_the_values_their_staging_clamps(qdq_cnn):
    """StreamingSession and AsyncModel give the clamped count of their calls, against the numpy formula
    with the stream's scale and zero point, summed over two calls."""
    _, ex, _ = qdq_cnn
    (desc,) = [t for t in staged_descriptors(ex) if t.role == "input"]
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal((1, 3, 17, 17)).astype(np.float32) * s for s in (8, 3)]
    r = [np.rint(x / np.float32(desc.scale)) + desc.zero_point for x in xs]
    want = int(sum((~((q >= -128) & (q <= 127))).sum() for q in r))
    assert want > 0
    am = tvm_npu.AsyncModel(ex)
    for m in npu_modules(am.vm):
        m["reset_profile"]()
    for x in xs:
        am.start(x).wait(timeout=60)
    assert am.clamped_inputs() == want and am.saturated_inputs() == 0
    sess = tvm_npu.StreamingSession(ex, {"x": (1, 3, 17, 17)}, ["y"], state={})
    for m in npu_modules(sess.vm):
        m["reset_profile"]()
    for x in xs:
        sess(x=x)
    assert sess.clamped_inputs() == want


def test_a_quantize_of_an_npu_result_stays_on_the_cpu_with_a_reason():
    """quantize(x @ w) in a float model: the dense layer runs on the NPU (fp16), its quantize does not (the
    NPU has no float-to-integer command); the reason says so."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4, 64), "float32"))
    w = relax.const(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32) * 0.1)
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.matmul(x, w))
            q = bb.emit(
                relax.op.quantize(
                    s, relax.const(np.float32(1 / 256)), relax.const(np.int8(-128)), axis=-1, out_dtype="int8"
                )
            )
            d = bb.emit_output(
                relax.op.dequantize(
                    q, relax.const(np.float32(1 / 256)), relax.const(np.int8(-128)), axis=-1, out_dtype="float32"
                )
            )
        bb.emit_func_output(d)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(bb.get(), report=report)
    where = {p.op: p for p in report.placements}
    assert where["relax.matmul"].device == "npu"
    assert where["relax.quantize"].device == "cpu" and where["relax.quantize"].code == "NPU_E_QUANT_IO"
    assert where["relax.dequantize"].device == "cpu" and where["relax.dequantize"].code == "NPU_E_QUANT_IO"
    xv = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    assert run_vm(ex, xv).shape == (4, 64)


def test_a_region_cut_into_tasks_keeps_each_conversion_with_its_op():
    """Over max_tensors a region is cut into tasks (regions.py); a model input's quantize goes with the
    task that reads it, an output's dequantize with the one that makes it: the same results as one task."""
    from lstm_models import calibration, feeds_of, lstm_model

    model = lstm_model(T=4, B=1, I=8, H=16, seed=5)
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), calibration(model), progress=False)
    whole = tvm_npu.build(qmod)
    cut = tvm_npu.build(qmod, config=tvm_npu.get_config("npu-ref").replace(max_tensors=5))
    assert len(npu_modules(whole)) == 1 and len(npu_modules(cut)) >= 2
    # Y's 4-D reshape runs on the NPU too (its tensor stored as rows, partition/layouts.py): 6 staged.
    assert len(staged_descriptors(cut)) == len(staged_descriptors(whole)) == 6
    for seed in (7, 8):
        feeds = feeds_of(model, seed=seed)
        args = [feeds[i.name] for i in model.graph.input]
        for a, b in zip(run_vm(cut, *args), run_vm(whole, *args)):
            np.testing.assert_array_equal(a, b)
