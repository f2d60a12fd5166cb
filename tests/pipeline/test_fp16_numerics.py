"""fp16 numerics (issue 19, items 4 and 7; docs/npu.md section 2, "fp16 numerics"): where fp16 cannot hold
a value the float32 model holds, the NPU either computes in a safe form (fp32 accumulation, the row max
subtracted), saturates with a count in the profile (model inputs beyond 65504), or leaves the op to the CPU
with a reason (a softmax of a model input). Each case against TVM's llvm build of the float32 model, within
the issue's fp16 tolerance: abs error <= 1e-2 * max(1, max abs(reference))."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import run_cpu, run_vm
from npu_ref import fp16
from tvm_npu.tools.trace import trace_events

F32 = np.float32


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def assert_fp16_close(got, want):
    """The issue's tolerance for the fp16 datapath against a float32 reference."""
    bound = 1e-2 * max(1.0, float(np.abs(want).max()))
    assert np.isfinite(got).all(), got
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= bound, (err, bound)


# --- softmax of a model input: the fp32 -> fp16 staging error, amplified, stays off the NPU --------------


@pytest.mark.parametrize(
    "fn,shape",
    [
        (lambda x: relax.op.nn.softmax(x, axis=-1), (4, 16)),
        (lambda x: relax.op.nn.softmax(relax.op.reshape(x, (4, 16)), axis=-1), (2, 2, 16)),
    ],
    ids=["direct", "through_a_reshape"],
)
def test_softmax_of_large_model_input_stays_on_cpu_and_matches_tvm(rng, fn, shape):
    """Inputs near 10000 move by up to 4 in their rounding to fp16; on the NPU the softmax of such a model
    input came out off by large factors (max abs error 0.5 of outputs <= 1). It runs on the CPU now, with
    NPU_E_RANGE naming the input."""
    mod = module(fn, [shape])
    ex, report = build(mod)
    (row,) = [p for p in report.placements if p.op == "relax.nn.softmax"]
    assert row.device == "cpu" and row.code == "NPU_E_RANGE" and "x0 is a model input" in row.reason, report.table()
    x = (rng.standard_normal(shape) * 5 + 10000).astype(F32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-5, atol=1e-7)


# --- model inputs beyond the fp16 range: saturated to +-65504, counted, warned about once ---------------

IMAGE = (1, 3, 16, 16)


def conv_model(rng):
    """conv3x3 + bias + relu over a float32 image (the whole model one NPU region), and the numpy
    reference NPU's result (npu_ref) for an input."""
    w, b = (rng.standard_normal((8, 3, 3, 3)) * 0.05).astype(F32), (rng.standard_normal(8) * 0.1).astype(F32)
    conv = lambda x: relax.op.nn.conv2d(x, relax.const(w), padding=1)  # noqa: E731
    mod = module(lambda x: relax.op.nn.relu(relax.op.add(conv(x), relax.const(b.reshape(1, 8, 1, 1)))), [IMAGE])
    return mod, lambda x: fp16.conv2d_nchw(fp16.stage(x), w, b, pad=(1, 1, 1, 1), act="relu").astype(F32)


def bright_image(rng):
    """A normal image with one finite element beyond the fp16 range (which ends at 65504)."""
    x = rng.standard_normal(IMAGE).astype(F32)
    x[0, 1, 7, 9] = 7e4
    return x


def saturated(x):
    """x with its finite values clipped to the fp16 range (inf and NaN kept): the staging policy."""
    return np.where(np.isfinite(x), np.clip(x, -65504, 65504), x).astype(F32)


@pytest.mark.parametrize("level", ["ref", "best"])
def test_input_beyond_fp16_range_saturates_and_is_counted(rng, capfd, level):
    """One element of 7e4 used to reach the NPU as inf and make every output near it inf (TVM llvm and
    onnxruntime stay finite). The runtime saturates it to 65504: the outputs are TVM's of the input
    clipped to +-65504, the profile counts 1, and stderr says so once per module."""
    mod, npu_ref = conv_model(rng)
    ex, report = build(mod)
    assert {p.device for p in report.placements} == {"npu"}, report.table()
    x = bright_image(rng)
    before = tvm_npu.runtime.kernel_level()
    tvm_npu.runtime.set_kernel_level(tvm_npu.runtime.best_kernel_level() if level == "best" else level)
    try:
        capfd.readouterr()
        got, vm = run_vm(ex, x, return_vm=True)
        first = capfd.readouterr().err
        again = vm["main"](tvm.runtime.tensor(x)).numpy()
        second = capfd.readouterr().err
    finally:
        tvm_npu.runtime.set_kernel_level(before)
    assert_fp16_close(got, run_cpu(mod, saturated(x)))
    np.testing.assert_array_equal(again, got)
    np.testing.assert_array_equal(got, npu_ref(x))  # bit for bit the contract's staging and conv
    (npu,) = tvm_npu.runtime.npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(npu)
    assert prof["last"]["saturated_inputs"] == [1] and prof["total"]["saturated_inputs"] == [1 + 1]
    assert tvm_npu.runtime.saturated_inputs(vm) == 2
    (line,) = [ln for ln in first.splitlines() if "saturated" in ln]
    assert "1 float32 input value(s)" in line and "(input 0: 1)" in line and "saturated_inputs" in line, first
    assert "saturated" not in second  # once per module instance


def test_saturation_leaves_inf_alone_and_shows_in_the_profile(rng):
    """inf (like NaN) is a value ONNX defines: it stays itself (an inf input gives the inf outputs TVM
    gives). Finite values past 65504 of either sign are counted in tvm_npu.profile, per region input, and
    in the Chrome trace."""
    mod, npu_ref = conv_model(rng)
    x = bright_image(rng)
    x[0, 0, 2, 2], x[0, 2, 12, 3], x[0, 0, 0, 0] = -3e38, np.inf, 65504.0  # 65504 itself is in range
    prof = tvm_npu.profile(mod, inputs=[x])
    assert prof["saturated_inputs"] == 2
    (region,) = prof["regions"].values()
    assert region["saturated_inputs"] == [2]
    events = trace_events(prof)
    (mark,) = [e for e in events if e["name"] == "saturated inputs"]
    assert mark["args"] == {"saturated_inputs": [2]}
    ex, _ = build(mod)
    got, want = run_vm(ex, x), run_cpu(mod, saturated(x))
    np.testing.assert_array_equal(got, npu_ref(x))
    assert np.array_equal(np.isinf(got), np.isinf(want)) and np.isinf(got).any()
    finite = np.isfinite(want)
    assert_fp16_close(got[finite], want[finite])
