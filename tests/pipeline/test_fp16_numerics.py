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
from conftest import assert_fp16_close, run_cpu, run_vm
from npu_ref import fp16
from tvm_npu.tools.trace import trace_events

F32 = np.float32


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


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


# --- sums fp16 cannot hold: fp32 accumulators (and a two-level pool sum) keep them -------------------------


def near_60000(rng, shape, split=False):
    """fp16-exact values in [57344, 57568] (multiples of 32), the last axis's second half negated when
    `split`: the staging moves nothing, so a comparison sees the accumulation alone, and a sum along that
    axis climbs to (K / 2) * 57344 before it falls back."""
    x = (F32(57344) + F32(32) * rng.integers(0, 8, shape)).astype(F32)
    if split:
        x[..., shape[-1] // 2 :] *= -1
    return x


def test_global_average_pool_of_a_large_map_is_accurate(rng):
    """A global average pool over 512 x 2048 values near 63488 (a configuration with 8 MiB of SRAM holds
    the window). The fp32 sum in one running order drifted 1.6% (64480: TVM's llvm build, which sums the
    same way, gives 64479); per-row sums added together give the exact mean, 63488."""
    shape = (1, 1, 512, 2048)
    mod = module(lambda x: relax.op.mean(x, axis=[2, 3], keepdims=True), [shape])
    report = tvm_npu.BuildReport()
    big = tvm_npu.contract.config.get_config("npu-ref").replace(sram_bytes=8 << 20)
    ex = tvm_npu.build(mod, config=big, report=report)
    assert report.placements[0].device == "npu", report.table()
    x = np.full(shape, 63488, F32)
    x[0, 0, ::3, ::5] = 61440  # not all equal
    assert_fp16_close(run_vm(ex, x), x.astype(np.float64).mean(axis=(2, 3), keepdims=True))


def test_global_average_pool_near_fp16_max_matches_tvm(rng):
    """64 x 64 x 8 values near 60000: their sum (2.4e8) is far beyond fp16, the fp32 sum holds it."""
    shape = (1, 8, 64, 64)
    mod = module(lambda x: relax.op.mean(x, axis=[2, 3], keepdims=True), [shape])
    ex, report = build(mod)
    assert report.placements[0].device == "npu", report.table()
    x = near_60000(rng, shape)
    assert_fp16_close(run_vm(ex, x), run_cpu(mod, x))


@pytest.mark.parametrize("kind", ["dense_k2048", "conv_k4608"])
def test_long_sums_of_large_products_match_tvm(rng, kind):
    """Products near 57344 summed over K = 2048 (dense; the widest inner dimension) or 3 x 3 x 512 (conv):
    the partial sums climb to 1e7 (fp16 ends at 65504) and cancel to a result fp16 holds. An fp32
    accumulator holds them exactly (multiples of 4 below 2^26)."""
    scales = F32([0.125, -0.25, 0.5, 1.0])  # one per output channel
    if kind == "dense_k2048":
        x = near_60000(rng, (4, 2048), split=True)
        w = np.repeat(scales, 2)[:, None] * np.ones((8, 2048), F32)
        mod = module(lambda v: relax.op.matmul(v, relax.const(w.T.copy())), [x.shape])
    else:
        x = np.moveaxis(near_60000(rng, (1, 6, 6, 512), split=True), 3, 1).copy()  # channels split
        w = scales[:, None, None, None] * np.ones((4, 512, 3, 3), F32)
        mod = module(lambda v: relax.op.nn.conv2d(v, relax.const(w), padding=1), [x.shape])
    ex, report = build(mod)
    assert {p.device for p in report.placements} == {"npu"}, report.table()
    want = run_cpu(mod, x)
    assert 65504 > np.abs(want).max() > 256, np.abs(want).max()  # representable, and not small
    assert_fp16_close(run_vm(ex, x), want)


def test_a_result_beyond_fp16_is_inf(rng):
    """The policy for a float32 model whose values leave the fp16 range inside the NPU: an op's result
    beyond 65504 rounds to +-inf (IEEE overflow; docs/npu.md section 2), where the float32 model stays
    finite. Each output is either within tolerance of TVM's, or inf of the same sign where TVM's exceeds
    the fp16 range (rounds past 65520)."""
    x = near_60000(rng, (4, 64))
    w = rng.uniform(-0.05, 0.05, (16, 64)).astype(F32)
    w[:4] = np.abs(w[:4]) + 0.05  # rows 0-3 sum to well beyond 65504, the rest mostly within
    mod = module(lambda v: relax.op.matmul(v, relax.const(w.T.copy())), [x.shape])
    ex, _ = build(mod)
    got, want = run_vm(ex, x), run_cpu(mod, x)
    over = np.abs(want) >= 65520
    assert over[:, :4].all() and not over.all()
    np.testing.assert_array_equal(got[over], np.sign(want[over]) * np.inf)
    assert_fp16_close(got[~over], want[~over])
