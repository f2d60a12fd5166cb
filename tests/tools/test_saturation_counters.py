"""The profile's saturation and overflow counters (docs/npu.md section 5): a model built to saturate one
layer shows a count on exactly that layer, equal to a count on the numpy model of the documented
arithmetic (tests/npu_ref), at every kernel level and thread count."""

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tvm_npu
from builders import chain, chain_reference, conv_layer
from npu_ref import QDQInterpreter, int8
from npu_ref.qdq import _ints, _nhwc, out_size
from qdq_models import GraphBuilder, quantize_with_ort
from tvm_npu.tools.profiler import profile, saturation_warnings

ORDER = ["ref", "portable", "avx2", "avx512vnni"]
LEVELS = ORDER[: ORDER.index(tvm_npu.runtime.best_kernel_level()) + 1]
SHRINK = 16.0  # the saturating layer's output scale, divided: its outputs need 16x the int8 range


def three_convs(seed=5):
    """conv3x3 + relu -> conv3x3 (no activation: both sides can saturate) -> conv1x1 + relu."""
    g = GraphBuilder(seed)
    a = g.conv("input", 3, 16, 3)
    b = g.conv(a, 16, 16, 3, act=None)
    c = g.conv(b, 16, 8, 1)
    return g.model((1, 3, 12, 12), c, (1, 8, 12, 12))


def shrink_output_scale(model, conv_index, factor):
    """Divides the output scale of the `conv_index`-th Conv by `factor`: that layer alone saturates."""
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    return shrink_output_scale_of(model, convs[conv_index].output[0], factor)


def shrink_output_scale_of(model, out, factor):
    """Divides the scale of tensor `out`'s QuantizeLinear by `factor` (and of the DequantizeLinear after
    it, which shares the change)."""
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == out)
    names = {q.input[1]} | {
        n.input[1] for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0]
    }
    for init in model.graph.initializer:
        if init.name in names:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) / np.float32(factor), init.name))
    return model


def numpy_counts(model, x):
    """Per Conv node, its saturated results on the numpy model: the accumulator, S and the clamp of
    docs/npu.md section 2 from the QDQ graph's codes and scales (QDQInterpreter's int8 tensors)."""
    ref = QDQInterpreter(model)
    ref.run(x)
    nodes = model.graph.node
    counts = []
    for node in (n for n in nodes if n.op_type == "Conv"):
        consumers = [n for n in nodes if node.output[0] in n.input]
        act = "relu" if consumers[0].op_type == "Relu" else "none"
        y = consumers[0].output[0] if act == "relu" else node.output[0]
        q = next(n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] == y)
        _, s_y, z_y = ref.q[q.output[0]]
        codes, s_x, z_x = ref.q[ref.dq_of[node.input[0]]]
        _, w, w_s, _ = ref.init[node.input[1]]
        bias = ref.init[node.input[2]][1]
        attrs = {a.name: a for a in node.attribute}
        kh, kw = w.shape[2:]
        pads = _ints(attrs, "pads", [0, 0, 0, 0])
        out_hw = (
            out_size(codes.shape[2], kh, 1, 1, pads[0], pads[2]),
            out_size(codes.shape[3], kw, 1, 1, pads[1], pads[3]),
        )
        S = int8.conv_scale(s_x, np.asarray(w_s, np.float64).reshape(-1), s_y)
        acc = int8.conv2d_acc(_nhwc(codes), _nhwc(w), bias, out_hw, pad=pads[:2], z_x=z_x)
        lo, hi = int8.clamp(act, s_y, z_y)
        counts.append(int8.saturated(acc, S, z_y, lo, hi))
    return counts


@pytest.fixture(scope="module")
def saturating(tmp_path_factory):
    rng = np.random.default_rng(11)
    calib = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(8)]
    q = quantize_with_ort(three_convs(), calib, tmp_path_factory.mktemp("sat") / "q.onnx")
    return shrink_output_scale(q, 1, SHRINK), calib[0]


def conv_layers(prof):
    return [lay for lay in prof["layers"] if lay["kind"] == "conv"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("level", LEVELS)
def test_int8_saturation_on_exactly_the_layer_with_the_small_scale(saturating, level, threads):
    model, x = saturating
    want = numpy_counts(model, x)
    assert want[0] == want[2] == 0 and want[1] > 0.1 * 12 * 12 * 16, want  # the model does what it says
    before = tvm_npu.runtime.kernel_level(), tvm_npu.runtime.threads()
    try:
        tvm_npu.runtime.set_kernel_level(level)
        tvm_npu.runtime.set_threads(threads)
        prof = profile(tvm_npu.from_onnx(model), [x])
    finally:
        tvm_npu.runtime.set_kernel_level(before[0])
        tvm_npu.runtime.set_threads(before[1])
    convs = conv_layers(prof)
    assert [lay["saturated"] for lay in convs] == want
    assert [lay["outputs"] for lay in convs] == [12 * 12 * 16, 12 * 12 * 16, 12 * 12 * 8]
    assert convs[1]["saturated_fraction"] == want[1] / (12 * 12 * 16)
    others = [lay for lay in prof["layers"] if lay is not convs[1]]
    assert all(lay["saturated"] == lay["fp16_overflow"] == lay["nan"] == 0 for lay in others)
    warnings = saturation_warnings(prof)
    assert len(warnings) == 1 and convs[1]["name"] in warnings[0], warnings


def test_calibrated_model_saturates_nowhere(tmp_path):
    rng = np.random.default_rng(11)
    calib = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(8)]
    q = quantize_with_ort(three_convs(), calib, tmp_path / "q.onnx")
    assert numpy_counts(q, calib[0]) == [0, 0, 0]
    prof = profile(tvm_npu.from_onnx(q), [calib[0]])
    assert [lay["saturated"] for lay in prof["layers"]] == [0] * len(prof["layers"])
    assert saturation_warnings(prof) == []


def test_fp16_overflow_on_exactly_the_layer_beyond_65504(rng):
    layers = [conv_layer(rng, 3, 16, 3), conv_layer(rng, 16, 16, 3), conv_layer(rng, 16, 8, 1)]
    layers[2]["w"] = layers[2]["w"] * np.float32(3e4)  # weights stay within fp16
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32) * np.float32(8)  # last layer: beyond 65504
    want = chain_reference(x, layers)  # the fp16 numpy model: +-inf where a result passed 65504
    assert 0 < np.isinf(want).sum() < want.size and not np.isnan(want).any()
    prof = profile(chain((1, 3, 10, 10), layers), [x])
    convs = conv_layers(prof)
    assert [lay["fp16_overflow"] for lay in convs] == [0, 0, int(np.isinf(want).sum())]
    assert [lay["nan"] for lay in convs] == [0, 0, 0]
    assert [lay["saturated"] for lay in convs] == [0, 0, 0]
    assert convs[2]["fp16_overflow_fraction"] == np.isinf(want).sum() / want.size


def test_cli_warns_once_for_the_layer_and_html_highlights_it(saturating, tmp_path, capsys):
    from tvm_npu.tools.cli import main

    model, x = saturating
    onnx.save(model, tmp_path / "sat.onnx")
    np.save(tmp_path / "x.npy", x)
    html_path, trace_path = tmp_path / "r.html", tmp_path / "t.json"
    argv = ["profile", str(tmp_path / "sat.onnx"), "--input", str(tmp_path / "x.npy")]
    assert main([*argv, "--html", str(html_path), "--trace", str(trace_path)]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "saturated at requantization" in ln]
    want = numpy_counts(model, x)[1]
    assert len(lines) == 1 and f"{want} of {12 * 12 * 16} outputs" in lines[0], err
    page = html_path.read_text()
    table = page[page.index('<table id="saturation">') :]
    table = table[: table.index("</table>")]
    assert table.count('<tr class="warn">') == 1 and f'<td class="num">{want}</td>' in table
    spans = [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("cat") == "layer"]
    assert sorted(e["args"]["saturated"] for e in spans) == sorted([0] * (len(spans) - 1) + [want])


def test_fp16_nan_counted_where_inf_minus_inf_makes_it(rng):
    """conv (its results partly beyond 65504: +-inf) -> y - y (inf - inf = NaN there): the conv counts the
    infinities, the subtract the NaNs, each equal to the fp16 numpy model's count. Odd sizes leave a tail
    shorter than a vector."""
    from tvm import relax

    layer = conv_layer(rng, 3, 3, 3, act="none")
    layer["w"] = layer["w"] * np.float32(3e4)
    x = rng.standard_normal((1, 3, 5, 7)).astype(np.float32) * np.float32(8)
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType((1, 3, 5, 7), "float32"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(xv, relax.const(layer["w"]), padding=1))
            y = bb.emit(relax.op.add(y, relax.const(layer["b"].reshape(1, 3, 1, 1))))
            out = bb.emit_output(relax.op.subtract(y, y))
        bb.emit_func_output(out)
    want = chain_reference(x, [layer])
    assert 0 < np.isinf(want).sum() < want.size and not np.isnan(want).any()
    prof = profile(bb.get(), [x])
    kinds = [(lay["kind"], lay["fp16_overflow"], lay["nan"]) for lay in prof["layers"]]
    inf = int(np.isinf(want).sum())
    assert [k[1:] for k in kinds] == [(inf, 0), (0, inf)], kinds


def conv_add_model(seed=6):
    """conv -> conv -> Add(both) -> conv1x1, no activations (an int8 ADD on the NPU)."""
    g = GraphBuilder(seed)
    a = g.conv("input", 3, 16, 3, act=None)
    b = g.conv(a, 16, 16, 3, act=None)
    r = g.node("Add", [a, b])
    return g.model((1, 3, 12, 12), g.conv(r, 16, 8, 1, act=None), (1, 8, 12, 12))


def numpy_add_count(model, x):
    """The Add's saturated results on the numpy model: z_y + rshift_rne(t, n) of docs/npu.md section 2
    beyond [-128, 127] (no activation: the clamp is the dtype's)."""
    ref = QDQInterpreter(model)
    ref.run(x)
    add = next(n for n in model.graph.node if n.op_type == "Add")
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == add.output[0])
    _, s_y, z_y = ref.q[q.output[0]]
    (a, s_a, z_a), (b, s_b, z_b) = (ref.q[ref.dq_of[i]] for i in add.input)
    m_a, m_b, n = int8.eltwise_multipliers("add", s_a, s_b, s_y)
    t = (a.astype(np.int64) - z_a) * m_a + (b.astype(np.int64) - z_b) * m_b
    y = z_y + int8.rshift_rne(t, n)
    return int((((y > 127) & (z_y != 127)) | ((y < -128) & (z_y != -128))).sum())


def test_int8_add_saturation_alike_at_every_level(tmp_path):
    rng = np.random.default_rng(12)
    calib = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(8)]
    q = quantize_with_ort(conv_add_model(), calib, tmp_path / "q.onnx")
    adds = [n for n in q.graph.node if n.op_type == "Add"]
    q = shrink_output_scale_of(q, adds[0].output[0], SHRINK)
    want = numpy_add_count(q, calib[0])
    assert want > 0.1 * 12 * 12 * 16
    seen = []
    before = tvm_npu.runtime.kernel_level(), tvm_npu.runtime.threads()
    try:
        for level in LEVELS:
            for threads in (1, 2):
                tvm_npu.runtime.set_kernel_level(level)
                tvm_npu.runtime.set_threads(threads)
                prof = profile(tvm_npu.from_onnx(q), [calib[0]])
                seen.append([(lay["kind"], lay["saturated"]) for lay in prof["layers"] if lay["saturated"]])
    finally:
        tvm_npu.runtime.set_kernel_level(before[0])
        tvm_npu.runtime.set_threads(before[1])
    assert all(s == seen[0] for s in seen), seen
    assert [count for _, count in seen[0]] == [want], seen[0]
