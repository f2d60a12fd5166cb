"""The fp16 datapath's other ops: depthwise convolution, residual add, max / average / global pooling."""

import numpy as np
from tvm import relax

import tvm_npu
from builders import residual_block
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import fp16


def numpy_block(x, w1, wd, w2):
    a = fp16.conv2d_nchw(x, w1, pad=(1,) * 4, act="relu")
    d = fp16.conv2d_nchw(a, wd, pad=(1,) * 4, act="clip", groups=wd.shape[0])
    p = fp16.conv2d_nchw(d, w2)
    r = fp16.add(a, p)
    m = fp16.pool_nchw(r, "max", 2, 2)
    v = fp16.pool_nchw(m, "avg", 3, 2)
    return fp16.pool_nchw(v, "avg", v.shape[2], 1)


def test_residual_block_runs_in_one_npu_region_bit_exact(rng):
    mod, weights = residual_block(rng)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    assert len(npu_modules(ex)) == 1
    assert report.npu_ops == len(report.placements), report.table()
    x = rng.standard_normal((1, 3, 20, 20)).astype(np.float32)
    out = run_vm(ex, x)
    np.testing.assert_array_equal(out, numpy_block(x, *weights))
    np.testing.assert_allclose(out, run_cpu(mod, x), rtol=2e-2, atol=2e-2)


def test_vector_and_depthwise_cycles_agree_with_the_cost_model(rng):
    mod, _ = residual_block(rng, c=64, hw=32)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    _, vm = run_vm(ex, rng.standard_normal((1, 3, 32, 32)).astype(np.float32), return_vm=True)
    (module,) = npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module)["last"]
    (est,) = report.regions.values()
    assert prof["total_cycles"] == est["estimated_cycles"]
    ops = {r["opcode"] for r in prof["records"]}
    assert {"CONV2D", "ADD", "POOL"} <= ops


def test_broadcast_add_stays_on_cpu_with_reason(rng):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    y = relax.Var("y", relax.TensorType((1, 1, 4, 4), "float32"))  # per-channel b runs (ELTWISE); spatial not
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.add(x, y)))
        bb.emit_func_output(out)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(bb.get(), report=report)
    (row,) = report.placements
    assert row.device == "cpu" and row.code == "NPU_E_BROADCAST"
    a, b = rng.standard_normal((1, 8, 4, 4)).astype("float32"), rng.standard_normal((1, 1, 4, 4)).astype("float32")
    np.testing.assert_allclose(run_vm(ex, a, b), a + b, rtol=1e-6)
