"""ELTWISE (broadcast add / subtract / multiply / maximum / minimum), UNARY (sigmoid, tanh, hardswish, gelu,
leaky relu, silu, gelu tanh) and SOFTMAX (fp16) end to end: fp16 against the numpy model of docs/npu.md
(tests/npu_ref) and TVM's llvm build; int8 against onnxruntime and the same model's integer datapath; the
reasons unsupported forms stay on the CPU."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import QDQInterpreter, exact, fp16, int8, qdq
from qdq_models import GraphBuilder, quantize_with_ort
from tvm_npu.contract import stream

NCHW = (1, 8, 5, 6)
NEW_IN_1_4 = ("silu", "gelu_tanh")  # UNARY funcs 5 and 6


def stream_version(ex):
    """The format version the region's stream says: 1.4 only if it uses something of 1.4."""
    (m,) = npu_modules(ex)
    return stream.decode(bytes(m["get_stream"]())).version


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


RELAX_BINARY = {
    "add": relax.op.add,
    "subtract": relax.op.subtract,
    "multiply": relax.op.multiply,
    "maximum": relax.op.maximum,
    "minimum": relax.op.minimum,
}
# (a's shape, b's shape, b is a constant): every broadcast mode of docs/npu.md section 6.
B_CASES = {
    "same_tensor": (NCHW, NCHW, False),
    "channel_const": (NCHW, (1, 8, 1, 1), True),
    "channel_const_rank3": (NCHW, (8, 1, 1), True),
    "channel_tensor": (NCHW, (1, 8, 1, 1), False),
    "scalar_const": (NCHW, (), True),
    "rows_tensor": ((4, 40), (40,), False),
    "rows_const": ((3, 2, 40), (1, 40), True),
}


@pytest.mark.parametrize("kind", list(RELAX_BINARY))
@pytest.mark.parametrize("case", list(B_CASES))
def test_fp16_eltwise_is_bit_exact_and_close_to_tvm(rng, kind, case):
    a_shape, b_shape, const = B_CASES[case]
    b_val = rng.standard_normal(b_shape).astype(np.float32) * 2
    op = RELAX_BINARY[kind]
    if const:
        mod = module(lambda x: op(x, relax.const(b_val)), [a_shape])
    else:
        mod = module(lambda x, y: op(x, y), [a_shape, b_shape])
    ex, report = build(mod)
    assert len(npu_modules(ex)) == 1
    (row,) = report.placements
    expect = "npu.add" if kind == "add" and case == "same_tensor" else f"npu.eltwise_{kind}"
    assert row.device == "npu" and row.composite == expect, report.table()
    a = rng.standard_normal(a_shape).astype(np.float32) * 2
    args = [a] if const else [a, b_val]
    out = run_vm(ex, *args)
    np.testing.assert_array_equal(out, fp16.eltwise(kind, a, b_val))
    np.testing.assert_allclose(out, run_cpu(mod, *args), rtol=2e-3, atol=4e-3)


@pytest.mark.parametrize("kind,act", [("multiply", "relu"), ("subtract", "clip"), ("maximum", "relu")])
def test_fp16_eltwise_fuses_the_following_activation(rng, kind, act):
    c = rng.standard_normal((1, 8, 1, 1)).astype(np.float32) * 3
    wrap = (lambda y: relax.op.nn.relu(y)) if act == "relu" else (lambda y: relax.op.clip(y, 0, 6))
    mod = module(lambda x: wrap(RELAX_BINARY[kind](x, relax.const(c))), [NCHW])
    ex, report = build(mod)
    assert {p.composite for p in report.placements} == {f"npu.eltwise_{kind}_{act}"}, report.table()
    x = rng.standard_normal(NCHW).astype(np.float32) * 4
    np.testing.assert_array_equal(run_vm(ex, x), fp16.eltwise(kind, x, c, act=act))


def test_fp16_broadcast_first_operand_of_a_commutative_op(rng):
    c = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    mod = module(lambda x, y: relax.op.multiply(y, relax.op.add(relax.const(c), x)), [NCHW, (1, 8, 1, 1)])
    ex, report = build(mod)
    assert all(p.device == "npu" for p in report.placements), report.table()
    x, y = rng.standard_normal(NCHW).astype(np.float32), rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, x, y), fp16.eltwise("multiply", fp16.eltwise("add", x, c), y))


def _unary_inputs(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) * 4
    flat = x.reshape(-1)
    specials = [0.0, -0.0, 1e-5, -1e-5, 2.5, -2.5, -3.0, 3.0, -9.0, 9.0, -17.5, 17.5, 60000.0, -60000.0, np.nan]
    flat[: len(specials)] = specials
    flat[len(specials) : len(specials) + 200] = np.linspace(-12, 12, 200)  # the curved parts, densely
    return x


UNARY_RELAX = {
    "sigmoid": relax.op.sigmoid,
    "tanh": relax.op.tanh,
    "gelu": relax.op.nn.gelu,
    "leaky_relu": lambda x: relax.op.nn.leakyrelu(x, 0.2),
    "silu": relax.op.nn.silu,
    "gelu_tanh": relax.op.nn.gelu_tanh,
    "hardswish": lambda x: relax.op.multiply(
        x, relax.op.divide(relax.op.clip(relax.op.add(x, relax.const(3.0)), 0, 6), relax.const(6.0))
    ),
}


@pytest.mark.parametrize("func", list(UNARY_RELAX))
@pytest.mark.parametrize("shape", [(1, 8, 9, 7), (4, 100)])
def test_fp16_unary_meets_its_documented_guarantee(rng, func, shape):
    mod = module(UNARY_RELAX[func], [shape])
    ex, report = build(mod)
    assert {(p.device, p.composite) for p in report.placements} == {("npu", f"npu.{func}")}, report.table()
    assert stream_version(ex) == ((1, 4) if func in NEW_IN_1_4 else (1, 3))
    x = _unary_inputs(rng, shape)
    out = run_vm(ex, x)
    if func in ("hardswish", "leaky_relu"):  # only IEEE fp32 operations: bit-exact
        np.testing.assert_array_equal(out, fp16.unary(func, x, alpha=0.2))
    else:
        ulps = exact.fp16_ulps(out, exact.unary(func, x))
        assert ulps.max() <= 1, (ulps.max(), x.reshape(-1)[np.argmax(ulps)])
    np.testing.assert_allclose(out, run_cpu(mod, x), rtol=2e-3, atol=2e-3)


def test_vector_chain_is_one_region_and_cycles_match_the_cost_model(rng):
    c = rng.standard_normal((1, 16, 1, 1)).astype(np.float32)
    mod = module(lambda x: relax.op.nn.gelu(relax.op.sigmoid(relax.op.multiply(x, relax.const(c)))), [(1, 16, 40, 40)])
    ex, report = build(mod)
    _, vm = run_vm(ex, rng.standard_normal((1, 16, 40, 40)).astype(np.float32), return_vm=True)
    (module_,) = npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module_)["last"]
    (est,) = report.regions.values()
    assert prof["total_cycles"] == est["estimated_cycles"]
    ops = [r["opcode"] for r in prof["records"]]
    assert {"ELTWISE", "UNARY"} <= set(ops)
    # docs section 5: op_overhead + ceil(elements / lanes), fp16 lanes = vector_lanes / 2 = 32 (npu-ref).
    for r in prof["records"]:
        if r["opcode"] in ("ELTWISE", "UNARY"):
            assert r["end"] - r["start"] in {32 + -(-16 * 40 * rows // 32) for rows in range(1, 41)}


def half_softmax(x):
    """softmax(x * 0.5): a softmax of a value the NPU computes (of a model input it would stay on the CPU,
    NPU_E_RANGE); halving an fp16 value is exact, so the softmax sees the staged input halved."""
    return relax.op.nn.softmax(relax.op.multiply(x, relax.const(np.float32(0.5))), axis=-1)


@pytest.mark.parametrize("shape,scale", [((1, 1000), 4.0), ((3, 5, 40), 20.0), ((2, 7), 0.01)])
def test_fp16_softmax_within_1_ulp_and_close_to_tvm(rng, shape, scale):
    mod = module(half_softmax, [shape])
    ex, report = build(mod)
    placed = [(p.device, p.composite) for p in report.placements]
    assert placed == [("npu", "npu.eltwise_multiply"), ("npu", "npu.softmax")], report.table()
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(2 * scale)
    out, vm = run_vm(ex, x, return_vm=True)
    ulps = exact.fp16_ulps(out, exact.softmax(fp16.widen(x) * np.float32(0.5)))
    assert ulps.max() <= 1, ulps.max()
    # The inputs round to fp16 first (a logit of 60 moves by up to 0.016): a loose bound against fp32.
    np.testing.assert_allclose(out, run_cpu(mod, x), rtol=3e-2, atol=1e-3)
    (module_,) = npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module_)["last"]
    (est,) = report.regions.values()
    assert prof["total_cycles"] == est["estimated_cycles"]
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    recs = [r for r in prof["records"] if r["opcode"] == "SOFTMAX"]  # one per row tile
    assert recs and all(
        r["end"] - r["start"] in {32 + -(-3 * n * k // 32) for n in range(1, rows + 1)} for r in recs
    )  # docs section 5, npu-ref fp16 lanes = 32


def test_fp16_softmax_with_nan_row_is_nan_only_there(rng):
    mod = module(half_softmax, [(3, 16)])
    ex, report = build(mod)
    assert report.placements[-1].composite == "npu.softmax", report.table()
    x = rng.standard_normal((3, 16)).astype(np.float32)
    x[1, 5] = np.nan
    out = run_vm(ex, x)
    assert np.isnan(out[1]).all() and not np.isnan(out[[0, 2]]).any()


# --- reasons --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes",
    [
        ((1, 8, 4, 4), (1, 1, 4, 4)),  # spatial broadcast
        ((1, 8, 4, 4), (8, 1, 1)),  # rank-3 per-channel tensor
        ((1, 1, 4, 4), (1, 8, 1, 1)),
    ],
)  # a is the broadcast one
def test_unsupported_broadcast_stays_on_cpu_with_reason(rng, shapes):
    mod = module(lambda x, y: relax.op.subtract(x, y), list(shapes))
    ex, report = build(mod)
    (row,) = report.placements
    assert row.device == "cpu" and row.code == "NPU_E_BROADCAST", report.table()
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    np.testing.assert_allclose(run_vm(ex, a, b), a - b, rtol=1e-6)


@pytest.mark.parametrize("fn,n", [(relax.op.sigmoid, 1), (relax.op.multiply, 2), (relax.op.add, 2)])
def test_rank_0_tensors_stay_on_cpu_with_reason(fn, n):
    """A scalar tensor has no stored row; a scalar *constant* operand is fine (scalar_const above)."""
    import tvm

    mod = module(fn, [()] * n)
    ex, report = build(mod)
    (row,) = report.placements
    assert row.device == "cpu" and row.code == "NPU_E_RANK", report.table()
    args = [tvm.runtime.tensor(np.array(0.5, np.float32)) for _ in range(n)]  # run_vm would make them 1-D
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
    want = {"sigmoid": 1 / (1 + np.exp(-0.5)), "multiply": 0.25, "add": 1.0}[fn.__name__]
    assert got.shape == () and np.isclose(got, want)


@pytest.mark.parametrize("shape,axis", [((1, 8, 4, 4), 2), ((4, 10), 0)])
def test_softmax_off_the_last_row_axis_stays_on_cpu_with_reason(rng, shape, axis):
    mod = module(lambda x: relax.op.nn.softmax(x, axis=axis), [shape])
    ex, report = build(mod)
    (row,) = report.placements
    assert row.device == "cpu" and row.code == "NPU_E_AXIS", report.table()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-6)


def test_int8_multiplier_out_of_range_runs_fp16_with_reason(rng):
    """s_a * s_b / s_y >= 2^30 leaves no shift for the integer multiplier: the int8 form is refused."""
    x = relax.Var("x", relax.TensorType(NCHW, "int8"))
    bb = relax.BlockBuilder()
    f32 = lambda v: relax.const(np.float32(v))  # noqa: E731
    i8 = lambda v: relax.const(np.int8(v))  # noqa: E731
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.dequantize(x, f32(1000.0), i8(0)))
            b = bb.emit(relax.op.dequantize(relax.const(np.full((1, 8, 1, 1), 3, np.int8)), f32(1000.0), i8(0)))
            m = bb.emit(relax.op.multiply(a, b))
            # The relu keeps the multiply's var inside the fp16 composite, where the report finds it.
            r = bb.emit(relax.op.nn.relu(m))
            out = bb.emit_output(bb.emit(relax.op.quantize(r, f32(1e-4), i8(0), out_dtype="int8")))
        bb.emit_func_output(out)
    ex, report = build(bb.get())
    (row,) = [p for p in report.placements if p.op == "relax.multiply"]
    assert row.code == "NPU_E_QUANT_SCALE" and row.precision == "fp16", report.table()
    assert "NPU_E_QUANT_SCALE" in report.table()


# --- int8 -----------------------------------------------------------------------------------------


def _ort(model, int8_kernels=False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    if int8_kernels:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _out_scale(model):
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(init[model.graph.node[-1].input[1]])


def _xs(n, shape, seed):
    r = np.random.default_rng(seed)
    return [r.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _check_int8(q, composites, shape, max_lsb=1, int8_kernels=(False,)):
    ex, report = build(tvm_npu.from_onnx(q))
    got_composites = {p.composite for p in report.placements if p.device == "npu"}
    assert composites <= got_composites and all(
        p.precision == "int8" for p in report.placements if p.device == "npu"
    ), report.table()
    ref, s = QDQInterpreter(q), _out_scale(q)
    worst = 0
    for x in _xs(6, shape, 11):
        got = run_vm(ex, x)
        np.testing.assert_array_equal(got, ref.run(x))  # the documented integer arithmetic, exactly
        for k in int8_kernels:
            worst = max(worst, int(np.rint(np.abs(got - _ort(q, k).run(None, {"input": x})[0]) / s).max()))
    assert worst <= max_lsb
    return worst


def test_int8_ort_quantized_broadcast_ops_and_activations(tmp_path):
    g = GraphBuilder(5)
    x = g.conv("input", 3, 8, 3, act=None)
    m = g.node("Mul", [x, g.const(g.rng.standard_normal((8, 1, 1)) * 0.5)])
    a = g.node("Add", [m, g.const(np.array(0.3))])
    s = g.node("Sigmoid", [a])
    c = g.conv(s, 8, 8, 3, act=None)
    lr = g.node("LeakyRelu", [c], alpha=0.1)
    y = g.node("Add", [lr, g.const(g.rng.standard_normal((1, 8, 1, 1)))])
    model = g.model([1, 3, 9, 9], y, [1, 8, 9, 9])
    q = quantize_with_ort(model, _xs(8, (1, 3, 9, 9), 1), tmp_path / "m.onnx")
    _check_int8(
        q,
        {"npu.qeltwise_multiply", "npu.qeltwise_add", "npu.qsigmoid", "npu.qleaky_relu"},
        (1, 3, 9, 9),
        int8_kernels=(False, True),
    )


def _qdq_model(build_body, shape, opset=20, seed=0):
    """input -> Q -> DQ -> body -> Q -> DQ -> output, with hand-picked scales: the QDQ form of an op the
    onnxruntime quantizer does not quantize (Sub, Max, Min, Tanh, Gelu, HardSwish)."""
    r = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def q_dq(src, scale, zp, tag):
        const(f"s_{tag}", np.float32(scale))
        const(f"z_{tag}", np.int8(zp))
        nodes.append(helper.make_node("QuantizeLinear", [src, f"s_{tag}", f"z_{tag}"], [f"q_{tag}"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"q_{tag}", f"s_{tag}", f"z_{tag}"], [f"dq_{tag}"]))
        return f"dq_{tag}"

    def qconst(value, scale, zp, tag):
        codes = np.clip(np.rint(value / scale) + zp, -128, 127).astype(np.int8)
        const(f"c_{tag}", codes)
        const(f"cs_{tag}", np.float32(scale))
        const(f"cz_{tag}", np.int8(zp))
        nodes.append(helper.make_node("DequantizeLinear", [f"c_{tag}", f"cs_{tag}", f"cz_{tag}"], [f"dq_{tag}"]))
        return f"dq_{tag}"

    x = q_dq("input", 0.03, 5, "in")
    y, s_y, z_y = build_body(x, nodes, qconst, q_dq, r)
    out = q_dq(y, s_y, z_y, "out")
    nodes.append(helper.make_node("Identity", [out], ["output"]))
    # The interpreter reads the output's scale from the last DequantizeLinear: drop the Identity.
    nodes.pop()
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _binary_body(op, b_kind):
    def body(x, nodes, qconst, q_dq, r):
        if b_kind == "channel_const":
            b = qconst(r.standard_normal((1, 8, 1, 1)).astype(np.float32), 0.02, -3, "b")
        elif b_kind == "scalar_const":
            b = qconst(np.float32(0.7), 0.01, 0, "b")
        else:  # a per-channel tensor: the global average pool of x
            nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
            b = q_dq("gap", 0.01, 0, "gap")
        nodes.append(helper.make_node(op, [x, b], ["y"]))
        return "y", 0.05, -7

    return body


@pytest.mark.parametrize("op", ["Sub", "Mul", "Add"])  # ONNX Max / Min import as stack + max: below
@pytest.mark.parametrize("b_kind", ["channel_const", "scalar_const", "channel_tensor"])
def test_int8_eltwise_matches_numpy_exactly_and_onnxruntime_within_1_lsb(op, b_kind):
    q = _qdq_model(_binary_body(op, b_kind), [1, 8, 6, 5])
    name = {"Sub": "subtract", "Mul": "multiply", "Max": "maximum", "Min": "minimum", "Add": "add"}[op]
    _check_int8(q, {f"npu.qeltwise_{name}"}, (1, 8, 6, 5))


@pytest.mark.parametrize(
    "op,attrs,composite",
    [
        ("Tanh", {}, "npu.qtanh"),
        ("Gelu", {}, "npu.qgelu"),
        ("Gelu", {"approximate": "tanh"}, "npu.qgelu_tanh"),
        ("HardSwish", {}, "npu.qhardswish"),
        ("Sigmoid", {}, "npu.qsigmoid"),
        ("LeakyRelu", {"alpha": 0.15}, "npu.qleaky_relu"),
    ],
)
def test_int8_unary_table_matches_numpy_exactly_and_onnxruntime_within_1_lsb(op, attrs, composite):
    def body(x, nodes, qconst, q_dq, r):
        nodes.append(helper.make_node(op, [x], ["y"], **attrs))
        return "y", 0.008, -20

    q = _qdq_model(body, [1, 8, 6, 5])
    _check_int8(q, {composite}, (1, 8, 6, 5))


@pytest.mark.parametrize("kind", ["Max", "Min"])
@pytest.mark.parametrize("b_shape", [(1, 8, 1, 1), ()])
def test_int8_maximum_minimum_match_numpy_exactly_and_float_within_1_lsb(rng, kind, b_shape):
    """Relax QDQ maximum / minimum (TVM imports ONNX Max / Min as broadcast_to + stack + max instead)."""
    s_a, z_a, s_b, z_b, s_y, z_y = 0.03, 5, 0.02, -3, 0.05, -7
    codes_b = rng.integers(-128, 128, b_shape).astype(np.int8)
    x = relax.Var("x", relax.TensorType(NCHW, "int8"))
    bb = relax.BlockBuilder()
    f32 = lambda v: relax.const(np.float32(v))  # noqa: E731
    i8 = lambda v: relax.const(np.int8(v))  # noqa: E731
    op = relax.op.maximum if kind == "Max" else relax.op.minimum
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.dequantize(x, f32(s_a), i8(z_a)))
            b = bb.emit(relax.op.dequantize(relax.const(codes_b), f32(s_b), i8(z_b)))
            out = bb.emit_output(bb.emit(relax.op.quantize(op(b, a), f32(s_y), i8(z_y), out_dtype="int8")))
        bb.emit_func_output(out)
    ex, report = build(bb.get())
    assert {p.composite for p in report.placements} == {f"npu.qeltwise_{'maximum' if kind == 'Max' else 'minimum'}"}
    xq = rng.integers(-128, 128, NCHW).astype(np.int8)
    got = run_vm(ex, xq)
    np.testing.assert_array_equal(
        got, int8.eltwise_quantized(qdq.ELTWISE[kind], (xq, s_a, z_a), (codes_b, s_b, z_b), s_y, z_y)
    )
    fa, fb = (xq.astype(np.float64) - z_a) * s_a, (codes_b.astype(np.float64) - z_b) * s_b
    want = np.clip(np.rint((np.maximum if kind == "Max" else np.minimum)(fa, fb) / s_y) + z_y, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 1


@pytest.mark.parametrize("func", ["silu", "gelu_tanh"])
def test_int8_silu_and_gelu_tanh_tables_match_numpy_exactly_and_float64_within_1_lsb(rng, func):
    """dequantize -> silu / gelu_tanh -> quantize in Relax (ONNX has no SiLU op to quantize): the NPU's
    table lookup against the numpy table of docs/npu.md section 2, and the float64 function of every
    input code."""
    s_x, z_x, s_y, z_y = 0.05, 3, 0.02, -40
    x = relax.Var("x", relax.TensorType((3, 256), "int8"))
    bb = relax.BlockBuilder()
    f32, i8 = (lambda v: relax.const(np.float32(v))), (lambda v: relax.const(np.int8(v)))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.dequantize(x, f32(s_x), i8(z_x)))
            y = bb.emit(getattr(relax.op.nn, func)(a))
            out = bb.emit_output(bb.emit(relax.op.quantize(y, f32(s_y), i8(z_y), out_dtype="int8")))
        bb.emit_func_output(out)
    ex, report = build(bb.get())
    assert {(p.device, p.composite) for p in report.placements} == {("npu", f"npu.q{func}")}, report.table()
    assert stream_version(ex) == (1, 4)
    xq = np.tile(np.arange(-128, 128, dtype=np.int8), (3, 1))
    xq[1] = rng.integers(-128, 128, 256)
    got = run_vm(ex, xq)
    np.testing.assert_array_equal(got, int8.unary_table(func, 0.0, s_x, z_x, s_y, z_y)[xq.astype(np.int64) + 128])
    fx = (xq.astype(np.float64) - z_x) * s_x
    f = fx / (1 + np.exp(-fx)) if func == "silu" else 0.5 * fx * (1 + np.tanh(0.7978845608 * (fx + 0.044715 * fx**3)))
    want = np.clip(np.rint(f / s_y) + z_y, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 1
