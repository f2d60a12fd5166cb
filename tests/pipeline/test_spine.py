"""End to end: Relax -> partition -> codegen -> runtime module -> reference NPU, against references."""

import numpy as np
import pytest

import tvm_npu
from builders import chain, chain_reference, conv_layer, dense_layer
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import fp16


@pytest.mark.parametrize(
    "spec",
    [
        dict(cin=3, cout=16, k=3, stride=1),
        dict(cin=8, cout=40, k=3, stride=2),
        dict(cin=5, cout=7, k=5, stride=1, pad=1, dil=2, act="clip"),
        dict(cin=33, cout=64, k=1, stride=1, act="none", bias=False),
    ],
)
def test_single_conv_is_bit_exact(rng, spec):
    layer = conv_layer(rng, **spec)
    x = rng.standard_normal((1, spec["cin"], 19, 23)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, [layer]))
    assert len(npu_modules(ex)) == 1
    np.testing.assert_array_equal(run_vm(ex, x), chain_reference(x, [layer]))


@pytest.mark.parametrize("pad", [(1, 2, 3, 2), (0, 0, 4, 0), (4, 0, 0, 0)])
def test_rows_reading_only_padding_are_exact(rng, pad):
    """Output rows whose window lies wholly in the bottom (or top) padding: a row tile cannot start
    inside the bottom padding, so those rows join the tile before (tiling.row_tiles)."""
    layer = conv_layer(rng, 4, 8, 3, pad=pad)
    x = rng.standard_normal((1, 4, 14, 14)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, [layer]), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, x), chain_reference(x, [layer]))


def test_conv_chain_matches_numpy_and_tvm_cpu(rng):
    layers = [conv_layer(rng, 3, 16, 3, stride=2), conv_layer(rng, 16, 32, 3), conv_layer(rng, 32, 24, 1, act="clip")]
    x = rng.standard_normal((2, 3, 40, 36)).astype(np.float32)
    mod = chain(x.shape, layers)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    out = run_vm(ex, x)
    assert len(npu_modules(ex)) == 1, "the three layers merge into one NPU region"
    assert report.npu_ops == len(report.placements)
    # NHWC inside the region: one transpose in (NCHW input), one out, none between the layers.
    (region,) = report.regions.values()
    assert region["boundary_transposes"] == 2
    np.testing.assert_array_equal(out, chain_reference(x, layers))
    np.testing.assert_allclose(out, run_cpu(mod, x), rtol=2e-2, atol=2e-2)


def test_dense_chain_matches(rng):
    layers = [dense_layer(rng, 300, 128, act="relu"), dense_layer(rng, 128, 10)]
    x = rng.standard_normal((4, 300)).astype(np.float32)
    mod = chain(x.shape, layers)
    out = run_vm(tvm_npu.build(mod), x)
    np.testing.assert_array_equal(out, chain_reference(x, layers))
    np.testing.assert_allclose(out, run_cpu(mod, x), rtol=2e-2, atol=2e-2)


def test_rejected_op_falls_back_with_reason(rng):
    layer = conv_layer(rng, 4, 8, 3, stride=3)
    x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    mod = chain(x.shape, [layer])
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    # The conv falls back; its bias add and relu alone would not pay for an NPU region's boundary.
    assert npu_modules(ex) == []
    conv = [p for p in report.placements if p.op == "relax.nn.conv2d"][0]
    assert conv.device == "cpu" and conv.code == "NPU_E_STRIDE" and "[3, 3]" in conv.reason
    add = [p for p in report.placements if p.op == "relax.add"][0]
    assert add.device == "cpu" and add.code == "NPU_E_REGION_TOO_SMALL"
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-5, atol=1e-5)


def test_params_are_bound_like_relay_build(rng):
    from tvm import relax

    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 10, 10), "float32"))
    wv = relax.Var("w", relax.TensorType(w.shape, "float32"))
    with bb.function("main", [x, wv]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, wv, padding=1))))
        bb.emit_func_output(out)
    ex = tvm_npu.build(bb.get(), target="npu", params={"w": w})
    assert len(npu_modules(ex)) == 1
    xv = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    ref = fp16.conv2d_nchw(xv, w, pad=(1, 1, 1, 1), act="relu")
    np.testing.assert_array_equal(run_vm(ex, xv), ref)
    with pytest.raises(tvm_npu.NPUError, match="ERR_SHAPE_MISMATCH"):
        tvm_npu.build(bb.get(), params={"weights": w})


def test_emulator_cycles_agree_with_cost_model(rng):
    layers = [conv_layer(rng, 16, 32, 3), conv_layer(rng, 32, 32, 3, stride=2), conv_layer(rng, 32, 64, 1)]
    x = rng.standard_normal((1, 16, 64, 64)).astype(np.float32)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(chain(x.shape, layers), report=report)
    _, vm = run_vm(ex, x, return_vm=True)
    (module,) = npu_modules(vm)
    measured = tvm_npu.runtime.profile_of(module)["last"]
    (estimate,) = report.regions.values()
    assert measured["total_cycles"] == pytest.approx(estimate["estimated_cycles"], rel=0.05)
    assert measured["macs"] == estimate["macs"]
    expected_macs = sum(int(np.prod(l["w"].shape)) for l in layers[:1]) * 64 * 64
    assert measured["macs"] > expected_macs
