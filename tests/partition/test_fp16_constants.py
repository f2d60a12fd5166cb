"""Float constants the fp16 datapath reads (conv and dense weights, elementwise operands) are converted
to fp16 at compile time: one beyond fp16's range (|x| > 65504) would become inf and turn finite answers
into inf or NaN. Such an op stays on the CPU with NPU_E_RANGE; the answer is TVM's own."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import chain, conv_layer, dense_layer, module_of
from conftest import npu_modules, run_cpu, run_vm

BIG = np.float32(7e4)  # finite in float32, beyond fp16's 65504


def _assert_cpu_with_range_reason(mod, x, op):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    got, want = run_vm(ex, x), run_cpu(mod, x)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))
    placed = [p for p in report.placements if p.op == op]
    assert placed and all(p.device == "cpu" and p.code == "NPU_E_RANGE" for p in placed), report.table()
    return ex


def test_a_conv_weight_beyond_fp16_stays_on_the_cpu(rng):
    layer = conv_layer(rng, 3, 4, 3, act="none")
    layer["w"][1, 2, 1, 1] = BIG
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32) * np.float32(1e-3)
    _assert_cpu_with_range_reason(chain((1, 3, 8, 8), [layer]), x, "relax.nn.conv2d")


def test_a_dense_weight_beyond_fp16_stays_on_the_cpu(rng):
    layer = dense_layer(rng, 16, 8)
    layer["w"][3, 5] = -BIG
    x = rng.standard_normal((1, 16)).astype(np.float32) * np.float32(1e-3)
    _assert_cpu_with_range_reason(chain((1, 16), [layer]), x, "relax.matmul")


@pytest.mark.parametrize("shape", [(16,), ()], ids=["per-channel", "scalar"])
def test_an_elementwise_constant_beyond_fp16_stays_on_the_cpu(rng, shape):
    c = rng.uniform(1, 2, shape).astype(np.float32)
    c.reshape(-1)[0] = BIG

    x = rng.standard_normal((1, 8, 16)).astype(np.float32) * np.float32(1e-3)
    _assert_cpu_with_range_reason(
        module_of(lambda x: relax.op.multiply(x, relax.const(c)), [(1, 8, 16)]), x, "relax.multiply"
    )


def test_weights_within_fp16_still_run_on_the_npu(rng):
    layer = dense_layer(rng, 16, 8)
    layer["w"][3, 5] = np.float32(65504.0)  # fp16's largest finite value converts exactly
    x = rng.standard_normal((1, 16)).astype(np.float32) * np.float32(1e-3)
    mod = chain((1, 16), [layer])
    ex = tvm_npu.build(mod)
    assert len(npu_modules(ex)) == 1
    want = run_cpu(mod, x)
    np.testing.assert_allclose(run_vm(ex, x), want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))
