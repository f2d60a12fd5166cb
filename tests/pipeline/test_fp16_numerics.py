"""fp16 numerics (issue 19, items 4 and 7; docs/npu.md section 2, "fp16 numerics"): where fp16 cannot hold
a value the float32 model holds, the NPU either computes in a safe form (fp32 accumulation, the row max
subtracted), saturates with a count in the profile (model inputs beyond 65504), or leaves the op to the CPU
with a reason (a softmax of a model input). Each case against TVM's llvm build of the float32 model, within
the issue's fp16 tolerance: abs error <= 1e-2 * max(1, max abs(reference))."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import run_cpu, run_vm

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
