"""The int8 forms of the transformer ops (MATMUL int8 x int8, format 1.4; docs/npu.md section 2) end to end:
small QDQ ONNX models imported with tvm_npu.from_onnx and built with tvm_npu.build, bit for bit against the
numpy model of the integer datapath (npu_ref.int8) and within 1 LSB of onnxruntime's integer kernels; the
forms that stay on the CPU and their reasons."""

import numpy as np
import pytest

import tvm_npu
from conftest import run_vm
from npu_ref import int8, norm, softmax
from qdq_transformer import QDQGraph, lsb_diff, ort_int8
from tvm_npu.partition.transformer_constraints import constraint_qmatmul_accumulator

F32 = np.float32


def build(model):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(tvm_npu.from_onnx(model), report=report), report


def placements(report, op):
    return [p for p in report.placements if p.op == op]


def qmatmul_model(a_shape, b_shape, transposed, qa, qb, qy):
    """y = DQ(Q(DQ(Q(a)) @ [Transpose](DQ(Q(b))))): attention's P x V, or Q x K^T with B transposed."""
    g = QDQGraph()
    a, b = g.qdq(g.input("a", a_shape), *qa), g.qdq(g.input("b", b_shape), *qb)
    if transposed:
        rank = len(b_shape)
        b = g.node("Transpose", [b], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    out_shape = list(a_shape[:-1]) + [b_shape[-2] if transposed else b_shape[-1]]
    return g.model(g.qdq(g.node("MatMul", [a, b]), *qy), out_shape)


def qmatmul_reference(a, b, transposed, qa, qb, qy):
    """The NPU's result by docs/npu.md: the inputs' quantized staging, MATMUL int8 with
    S = fp32(fp32(s_a * s_b) / s_y) over the flattened batches (B broadcast over A's), staging out."""
    ca, cb = int8.quantize(a, *qa), int8.quantize(b, *qb)
    batch = a.shape[:-2]
    cb = np.broadcast_to(cb, batch + cb.shape[-2:])
    flat = lambda x: x.reshape((-1,) + x.shape[-2:])  # noqa: E731
    S = int8.conv_scale(qa[0], qb[0], qy[0])
    y = int8.matmul(flat(ca), flat(cb), qa[1], qb[1], S, qy[1], 1, transposed)
    return int8.dequantize(y.reshape(batch + y.shape[-2:]), *qy)


CASES = [
    # (a, b, B transposed, (s_a, z_a), (s_b, z_b), (s_y, z_y)): Q x K^T, P x V, odd sizes, K beyond 32,
    # B's batch broadcast over the heads, asymmetric zero points.
    ([1, 4, 5, 16], [1, 4, 9, 16], True, (0.05, 3), (0.04, -7), (0.1, 5)),
    ([2, 3, 7, 40], [2, 3, 40, 33], False, (0.03, -20), (0.02, 11), (0.12, -3)),
    ([1, 6, 1, 64], [1, 1, 24, 64], True, (0.02, 0), (0.025, 0), (0.2, 0)),
    ([3, 6, 12], [3, 12, 70], False, (1 / 128, -128), (0.05, 100), (0.05, 17)),
]


@pytest.mark.parametrize("a_shape, b_shape, transposed, qa, qb, qy", CASES)
def test_qdq_matmul_runs_int8_and_matches_numpy_and_onnxruntime(a_shape, b_shape, transposed, qa, qb, qy):
    model = qmatmul_model(a_shape, b_shape, transposed, qa, qb, qy)
    ex, report = build(model)
    (row,) = placements(report, "relax.matmul")
    want = "npu.qmatmul_bt" if transposed else "npu.qmatmul"
    assert (row.device, row.precision, row.composite) == ("npu", "int8", want), report.table()
    sess, rng = ort_int8(model), np.random.default_rng(len(a_shape) * 7 + a_shape[-1])
    diffs = []
    for _ in range(4):
        a = (rng.standard_normal(a_shape) * 2).astype(F32)
        b = (rng.standard_normal(b_shape) * 2).astype(F32)
        got = run_vm(ex, a, b)
        np.testing.assert_array_equal(got, qmatmul_reference(a, b, transposed, qa, qb, qy))
        diffs.append(lsb_diff(got, sess.run(None, {"a": a, "b": b})[0], qy[0]))
    d = np.concatenate([x.ravel() for x in diffs])
    # onnxruntime's QLinearMatMul computes the same int32 sums and fp32 requantization: measured 0 LSB
    # on every element of these cases (1 is what the contract promises).
    assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))


def test_qdq_matmul_without_its_quantize_stays_on_the_cpu():
    """A float result (no QuantizeLinear after the MatMul) is not MATMUL's int8 form: NPU_E_QUANT_MATMUL."""
    g = QDQGraph()
    a, b = g.qdq(g.input("a", [2, 4, 16]), 0.05, 0), g.qdq(g.input("b", [2, 16, 8]), 0.05, 0)
    model = g.model(g.node("MatMul", [a, b]), [2, 4, 8])
    _, report = build(model)
    (row,) = placements(report, "relax.matmul")
    assert (row.device, row.code) == ("cpu", "NPU_E_QUANT_MATMUL"), report.table()


def test_int8_accumulator_bound():
    """k * (128 + |a_zp|) * (128 + |b_zp|) < 2^31 (docs/npu.md section 2): 32767 at the worst zero points."""
    assert constraint_qmatmul_accumulator(32767, -128, -128) is None
    assert "2^31" in constraint_qmatmul_accumulator(32768, -128, -128)
    assert constraint_qmatmul_accumulator(131071, 0, 0) is None
    assert constraint_qmatmul_accumulator(131072, 0, 0) is not None


# --- softmax (SOFTMAX int8: dequantize exactly, the fp32 softmax, quantize; docs/npu.md section 2) ---


def qsoftmax_model(shape, qx, qy, scale=None, mask=None):
    """y = DQ(Q(softmax(DQ(Q(x)) [* scale] [+ mask]))) over the last axis."""
    g = QDQGraph()
    z = g.qdq(g.input("x", shape), *qx)
    if scale is not None:
        z = g.node("Mul", [z, g.const(scale, np.float32)])
    if mask is not None:
        z = g.node("Add", [z, g.const(mask, np.float32)])
    return g.model(g.qdq(g.node("Softmax", [z], axis=-1), *qy), shape)


def qsoftmax_reference(x, qx, qy, scale=None, mask=None):
    rows = x.reshape(-1, x.shape[-1])
    m = None if mask is None else np.asarray(mask, np.float32).reshape(-1, x.shape[-1])
    y = softmax.softmax_int8(int8.quantize(rows, *qx), *qx, *qy, scale=scale, mask=m)
    return int8.dequantize(y, *qy).reshape(x.shape)


def causal_mask(t):
    return np.triu(np.full((t, t), -np.inf, np.float32), 1)


SOFTMAX_CASES = [
    # (x shape, (s_x, z_x), (s_y, z_y), scale, mask): onnxruntime's softmax output quantization (1/256, -128)
    ([1, 4, 6, 6], (0.08, 0), (1 / 256, -128), None, None),
    ([2, 5, 33], (0.05, -10), (1 / 256, -128), None, None),
    ([1, 2, 8, 8], (0.1, 3), (1 / 255, -128), 0.25, causal_mask(8)),
    ([4, 100], (0.03, 0), (0.004, -120), None, None),
]


@pytest.mark.parametrize("shape, qx, qy, scale, mask", SOFTMAX_CASES)
def test_qdq_softmax_runs_int8_and_matches_numpy_and_onnxruntime(shape, qx, qy, scale, mask):
    model = qsoftmax_model(shape, qx, qy, scale, mask)
    ex, report = build(model)
    (row,) = placements(report, "relax.nn.softmax")
    assert (row.device, row.precision) == ("npu", "int8") and row.composite.startswith("npu.qsoftmax"), report.table()
    sess, rng = ort_int8(model), np.random.default_rng(shape[-1])
    diffs = []
    for _ in range(4):
        x = (rng.standard_normal(shape) * 3).astype(F32)
        got = run_vm(ex, x)
        np.testing.assert_array_equal(got, qsoftmax_reference(x, qx, qy, scale, mask))
        diffs.append(lsb_diff(got, sess.run(None, {"x": x})[0], qy[0]))
    d = np.concatenate([x.ravel() for x in diffs])
    assert d.max() <= 1 and np.mean(d == 0) >= 0.95, (d.max(), np.mean(d == 0))


# --- LayerNorm / RMSNorm (NORM int8: dequantize exactly, the fp32 norm, quantize; docs/npu.md section 2) ---


def qnorm_model(kind, shape, qx, qy, gamma, beta, eps):
    """y = DQ(Q(norm(DQ(Q(x))))): ONNX LayerNormalization (17) or RMSNormalization (23) over the last axis."""
    g = QDQGraph()
    x = g.qdq(g.input("x", shape), *qx)
    params = [g.const(gamma, np.float32)] + ([g.const(beta, np.float32)] if beta is not None else [])
    op = "LayerNormalization" if kind == "layernorm" else "RMSNormalization"
    return g.model(g.qdq(g.node(op, [x] + params, axis=-1, epsilon=eps), *qy), shape, opset=23)


NORM_CASES = [
    # (kind, x shape, (s_x, z_x), (s_y, z_y), beta?): GPT-2's LayerNorm and Llama's RMSNorm on QDQ rows
    ("layernorm", [1, 7, 64], (0.05, 10), (0.03, -5), True),
    ("layernorm", [2, 3, 100], (0.1, -30), (0.02, 0), False),
    ("rmsnorm", [1, 5, 48], (0.04, 0), (0.025, 3), False),
    ("rmsnorm", [4, 96], (0.08, -12), (0.015, 0), False),
]


@pytest.mark.parametrize("kind, shape, qx, qy, with_beta", NORM_CASES)
def test_qdq_norm_runs_int8_and_matches_numpy_and_onnxruntime(kind, shape, qx, qy, with_beta):
    rng = np.random.default_rng(shape[-1])
    gamma = (rng.standard_normal(shape[-1]) * 0.3 + 1).astype(F32)
    beta = (rng.standard_normal(shape[-1]) * 0.2).astype(F32) if with_beta else None
    model = qnorm_model(kind, shape, qx, qy, gamma, beta, 1e-5)
    ex, report = build(model)
    op = "relax.nn.layer_norm" if kind == "layernorm" else "relax.nn.rms_norm"
    (row,) = placements(report, op)
    want = "npu.qlayer_norm" if kind == "layernorm" else "npu.qrms_norm"
    assert (row.device, row.precision, row.composite) == ("npu", "int8", want), report.table()
    sess = ort_int8(model)
    diffs = []
    for _ in range(4):
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(F32)
        got = run_vm(ex, x)
        codes = int8.quantize(x, *qx).reshape(-1, shape[-1])
        want_y = norm.norm_int8(kind, codes, *qx, *qy, gamma, beta, 1e-5)
        np.testing.assert_array_equal(got, int8.dequantize(want_y, *qy).reshape(shape))
        diffs.append(lsb_diff(got, sess.run(None, {"x": x})[0], qy[0]))
    d = np.concatenate([x.ravel() for x in diffs])
    assert d.max() <= 1 and np.mean(d == 0) >= 0.95, (d.max(), np.mean(d == 0))
