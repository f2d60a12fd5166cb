"""ROPE (rotary position embedding, rotate-half form; fp16) end to end from Relax: modules with constant and
run-time cos / sin tables built for the NPU, bit for bit against the numpy model of docs/npu.md
(tests/npu_ref/rope.py) and within 1e-2 * max(1, max|ref|) of TVM's llvm build; the cycles against the
formula and the cost model; and the forms it does not run staying on the CPU with their reasons."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import assert_fp16_close, npu_modules, run_cpu, run_vm
from npu_ref import fp16
from npu_ref import rope as npu_rope
from tvm_npu.ir.values import static_shape
from tvm_npu.partition.transformer_constraints import constraint_rope_float

R = relax.op


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def tables(s, d, base=10000.0):
    """Llama's cos / sin rows for positions 0..s-1 (rotate-half layout: the angles twice), float32 [s, d]."""
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    emb = np.concatenate([np.arange(s)[:, None] * inv[None, :]] * 2, axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def rotate_half(x, axis=-1, shape=None):
    shape = shape or static_shape(x)
    d, rank = shape[axis], len(shape)
    ax = axis % rank
    hi = R.strided_slice(x, [ax], [d // 2], [d])
    lo = R.strided_slice(x, [ax], [0], [d // 2])
    return R.concat([R.negative(hi), lo], axis=axis)


def rope(x, cos, sin, axis=-1, shape=None):
    """Hugging Face Llama's apply_rotary_pos_emb for one tensor (`shape`: x's, for an unnormalized x)."""
    return R.add(R.multiply(x, cos), R.multiply(rotate_half(x, axis, shape), sin))


def _placed_on_npu(report):
    return [(p.device, p.composite) for p in report.placements if p.op == "relax.add"] == [("npu", "npu.rope")]


def _npu_ref(x, cos, sin):
    d = x.shape[-1]
    return npu_rope.rope(fp16.stage(x).reshape(-1, d), cos.reshape(-1, d), sin.reshape(-1, d)).reshape(x.shape)


@pytest.mark.parametrize(
    "x_shape,t_shape",
    [((3, 5, 16), (5, 16)), ((1, 4, 7, 64), (1, 1, 7, 64)), ((9, 128), (9, 128)), ((2, 3, 1, 32), (1, 32))],
)
def test_rope_with_constant_tables_bit_exact_and_close_to_tvm(rng, x_shape, t_shape):
    s, d = (t_shape[-2] if len(t_shape) > 1 else 1), t_shape[-1]
    cos, sin = (t.reshape(t_shape) for t in tables(s, d))
    mod = module(lambda x: rope(x, relax.const(cos), relax.const(sin)), [x_shape])
    ex, report = build(mod)
    assert _placed_on_npu(report) and all(p.device == "npu" for p in report.placements), report.table()
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    out = run_vm(ex, x)
    np.testing.assert_array_equal(out, _npu_ref(x, cos, sin).astype(np.float32))
    assert_fp16_close(out, run_cpu(mod, x))


@pytest.mark.parametrize("x_shape,t_shape", [((4, 6, 32), (6, 32)), ((1, 3, 5, 64), (1, 1, 5, 64))])
def test_rope_with_run_time_tables_bit_exact_and_close_to_tvm(rng, x_shape, t_shape):
    mod = module(rope, [x_shape, t_shape, t_shape])
    ex, report = build(mod)
    assert _placed_on_npu(report) and all(p.device == "npu" for p in report.placements), report.table()
    s, d = t_shape[-2], t_shape[-1]
    cos, sin = (t.reshape(t_shape) for t in tables(s, d))
    x = (rng.standard_normal(x_shape) * 2).astype(np.float32)
    out = run_vm(ex, x, cos, sin)
    np.testing.assert_array_equal(out, _npu_ref(x, cos, sin).astype(np.float32))
    assert_fp16_close(out, run_cpu(mod, x, cos, sin))


def test_rope_cycles_follow_the_formula_and_the_cost_model(rng):
    """The emulator's ROPE records: op_overhead + ceil(2 * rows * D / (vector_lanes / 2)) per row tile
    (section 5; npu-ref fp16: 32 + ceil(2 * rows * 64 / 32)); the region's total = the estimate."""
    shape = (8, 32, 64)
    cos, sin = tables(32, 64)
    mod = module(lambda x: rope(x, relax.const(cos), relax.const(sin)), [shape])
    ex, report = build(mod)
    out, vm = run_vm(ex, rng.standard_normal(shape).astype(np.float32), return_vm=True)
    (module_,) = npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module_)["last"]
    (est,) = report.regions.values()
    assert prof["total_cycles"] == est["estimated_cycles"]
    recs = [r for r in prof["records"] if r["opcode"] == "ROPE"]
    allowed = {32 + -(-2 * n * 64 // 32) for n in range(1, 8 * 32 + 1)}
    assert recs and all(r["end"] - r["start"] in allowed for r in recs)
    assert sum(r["end"] - r["start"] - 32 for r in recs) == 2 * 8 * 32 * 64 // 32


def _interleaved(x, cos, sin):
    """GPT-J's rotate_every_two: pairs (2i, 2i+1) rotated, written with strided slices and a stack."""
    shape = list(static_shape(x))
    even = R.strided_slice(x, [2], [0], [shape[2]], [2])
    odd = R.strided_slice(x, [2], [1], [shape[2]], [2])
    rot = R.reshape(R.stack([R.negative(odd), even], axis=-1), shape)
    return R.add(R.multiply(x, cos), R.multiply(rot, sin))


def _outside_unit(x):
    cos, sin = tables(5, 16)
    return rope(x, relax.const(cos * 2), relax.const(sin))


@pytest.mark.parametrize(
    "fn,shapes,code",
    [
        # odd D: the halves differ in length, no rotate-half pairing
        (lambda x, c, s: rope(x, c, s), [(3, 5, 15), (5, 15), (5, 15)], "NPU_E_ROPE"),
        # a rotation over the position axis, not the head dimension
        (lambda x, c, s: rope(x, c, s, axis=1), [(3, 6, 16), (6, 16), (6, 16)], "NPU_E_ROPE"),
        # cos broadcast the other way: one row per head, not per position (row r is not r % rows)
        (lambda x, c, s: rope(x, c, s), [(3, 5, 16), (3, 1, 16), (3, 1, 16)], "NPU_E_ROPE_TABLE"),
        # x broadcast up by its table
        (lambda x, c, s: rope(x, c, s), [(1, 5, 16), (3, 5, 16), (3, 5, 16)], "NPU_E_ROPE_TABLE"),
        (lambda x: _outside_unit(x), [(3, 5, 16)], "NPU_E_ROPE_TABLE"),
    ],
)
def test_forms_rope_does_not_run_stay_on_cpu_with_reason(rng, fn, shapes, code):
    mod = module(fn, shapes)
    ex, report = build(mod)
    (neg,) = [p for p in report.placements if p.op == "relax.negative"]  # the op only ROPE takes
    assert neg.device == "cpu" and neg.code == code, report.table()
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_allclose(run_vm(ex, *args), run_cpu(mod, *args), rtol=1e-5, atol=1e-5)


def test_interleaved_rope_does_not_match(rng):
    """The GPT-J form has other ops (stride-2 slices, a stack): no ROPE, the model runs as TVM computes it."""
    shapes = [(2, 4, 16), (4, 16), (4, 16)]
    mod = module(_interleaved, shapes)
    ex, report = build(mod)
    assert not any(p.composite == "npu.rope" for p in report.placements), report.table()
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    np.testing.assert_allclose(run_vm(ex, *args), run_cpu(mod, *args), rtol=1e-5, atol=1e-5)


def test_quantized_rope_does_not_match(rng):
    """The QDQ form: x dequantized from int8 codes (the pipeline gives each reader its own dequantize, so the
    slices and the multiply read different tensors): no ROPE, the rotation runs as TVM computes it."""
    cos, sin = tables(5, 16)

    def fn(x):
        q = R.quantize(x, relax.const(np.float32(0.05)), relax.const(np.int8(0)), axis=-1, out_dtype="int8")
        dq = R.dequantize(q, relax.const(np.float32(0.05)), relax.const(np.int8(0)), axis=-1)
        return rope(dq, relax.const(cos), relax.const(sin), shape=(3, 5, 16))

    mod = module(fn, [(3, 5, 16)])
    ex, report = build(mod)
    assert not any(p.composite == "npu.rope" for p in report.placements), report.table()
    x = rng.standard_normal((3, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-5, atol=1e-5)


def test_rope_of_a_dequantized_tensor_is_refused():
    """Were one dequantize to feed the whole rotation, the check refuses it (ROPE has no int8 form)."""
    x = relax.Var("x", relax.TensorType((3, 5, 16), "int8"))
    dq = R.dequantize(x, relax.const(np.float32(0.05)), relax.const(np.int8(0)), axis=-1)
    assert constraint_rope_float(dq) == "x is dequantized"
    assert constraint_rope_float(relax.Var("y", relax.TensorType((3, 5, 16), "float32"))) is None
