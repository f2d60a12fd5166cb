"""Every reason code a placement can carry, triggered by a small model; the report names it, and the
build still computes the right answer (against numpy or TVM's own CPU build). Codes tested elsewhere:
NPU_E_DTYPE, NPU_E_RANK, NPU_E_WIDTH (test_bad_inputs.py), NPU_E_BROADCAST (test_ops_fp16.py),
NPU_E_DYNAMIC_SHAPE, NPU_E_LAYOUT, NPU_E_STRIDE, NPU_E_UNSUPPORTED_OP (test_report.py), NPU_E_CONCAT
(test_concat.py). Also the task
limits of regions.py: regions over max_tensors split, regions too small for their boundary refused."""

import math

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from conftest import npu_modules, run_cpu, run_vm
from tvm_npu.partition.checks import PartitionRun

CFG = tvm_npu.contract.config.get_config("npu-ref")
SHAPE = (1, 4, 8, 8)


def module(body, shapes=(SHAPE,)):
    """main(x0, x1, ...) = body(bb, *xs)."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *xs))
        bb.emit_func_output(out)
    return bb.get()


def build(mod, config=None):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report, config=config), report


def row(report, op):
    (r,) = [p for p in report.placements if p.op == op]
    return r


def named(report, r, code):
    """The row carries `code`, and the readable table says it next to the op."""
    assert r.code == code and r.reason, report.table()
    assert any(r.op in line and code in line for line in report.table().splitlines())


def conv(bb, x, w, **kw):
    return bb.emit(relax.op.nn.conv2d(x, relax.const(w), padding=1, **kw))


def test_grouped_conv_npu_e_groups(rng):
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)  # 2 groups of 2 channels: not depthwise
    mod = module(lambda bb, x: conv(bb, x, w, groups=2))
    ex, report = build(mod)
    named(report, row(report, "relax.nn.conv2d"), "NPU_E_GROUPS")
    x = rng.standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-5, atol=1e-5)


def test_ceil_mode_pool_npu_e_pool(rng):
    mod = module(lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, pool_size=3, strides=2, ceil_mode=True)))
    ex, report = build(mod)
    named(report, row(report, "relax.nn.max_pool2d"), "NPU_E_POOL")
    x = rng.standard_normal(SHAPE).astype(np.float32)
    # ceil mode: windows start at 0, 2, 4, 6 (the last one clipped to rows 6..7)
    want = np.stack([x[:, :, 2 * i : 2 * i + 3].max(axis=2) for i in range(4)], axis=2)
    want = np.stack([want[..., 2 * j : 2 * j + 3].max(axis=-1) for j in range(4)], axis=-1)
    np.testing.assert_array_equal(run_vm(ex, x), want)


@pytest.mark.parametrize("hw,device", [(45, "npu"), (64, "cpu")], ids=["fits", "too_large"])
def test_global_pool_larger_than_sram_npu_e_sram(rng, hw, device):
    """A global average pool reads its whole map for its one output row. On npu-small (512 KiB of SRAM) a
    64-channel 45x45 fp16 map (253 KB, twice that double-buffered) pools on the NPU; 32x64x64 (256 KB)
    pools on the CPU with NPU_E_SRAM -- it used to fail the build with ERR_SRAM_OVERFLOW."""
    shape = (1, 64 if hw == 45 else 32, hw, hw)
    mod = module(lambda bb, x: bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True)), shapes=(shape,))
    ex, report = build(mod, config="npu-small")
    r = row(report, "relax.mean")
    assert r.device == device, report.table()
    if device == "cpu":
        named(report, r, "NPU_E_SRAM")
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), x.mean(axis=(2, 3), keepdims=True), rtol=1e-2, atol=1e-3)


def test_non_per_channel_bias_npu_e_bias(rng):
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(SHAPE).astype(np.float32)  # a bias per element, not per channel
    mod = module(lambda bb, x: bb.emit(relax.op.add(conv(bb, x, w), relax.const(b))))
    ex, report = build(mod)
    assert row(report, "relax.nn.conv2d").device == "npu"  # the conv runs, without the add fused
    add = row(report, "relax.add")
    assert add.device == "cpu" and "[1, 4, 8, 8]" in add.reason
    named(report, add, "NPU_E_BIAS")
    x = rng.standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=2e-2, atol=2e-2)


def test_symbolic_clip_bound_npu_e_activation(rng):
    """clip(conv, n, 6) with n a symbolic dimension. TVM 0.27's MergeCompositeFunctions fails on such a
    module (an internal check in its graph partitioner), so this stops after pattern matching and
    reads the report of that module."""
    n = tvm.tirx.Var("n", "int64")
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    bb = relax.BlockBuilder()
    x, s = relax.Var("x", relax.TensorType(SHAPE, "float32")), relax.Var("s", relax.TensorType([n], "float32"))
    with bb.function("main", [x, s]):
        with bb.dataflow():
            out = bb.emit_output(relax.Tuple([bb.emit(relax.op.clip(conv(bb, x, w), n, 6)), s]))
        bb.emit_func_output(out)
    log = []
    run = PartitionRun(CFG, log)
    fused = relax.transform.FuseOpsByPattern(
        tvm_npu.partition.patterns.bind(run), bind_constants=True, annotate_codegen=False
    )(bb.get())
    report = tvm_npu.BuildReport()
    report.record_partition(fused, log)
    clip = row(report, "relax.clip")
    assert clip.device == "cpu" and "is not a constant" in clip.reason
    named(report, clip, "NPU_E_ACTIVATION")


def qdq(bb, x, scale, zp, dtype="int8"):
    """quantize -> dequantize of x along axis 1 (per-tensor when scale and zp are scalars)."""
    sc, z = relax.const(np.asarray(scale, np.float32)), relax.const(np.asarray(zp, dtype))
    q = bb.emit(relax.op.quantize(x, sc, z, axis=1, out_dtype=dtype))
    return bb.emit(relax.op.dequantize(q, sc, z, axis=1, out_dtype="float32"))


def qconv_model(rng, act_dtype="int8", act_scale=0.05, w_zp=0):
    """x -> QDQ -> conv(dequantized int8 weights, per-channel) -> QDQ: what onnxruntime's quantizer emits."""
    codes = rng.integers(-100, 100, (4, 4, 3, 3)).astype(np.int8)
    w_scale = np.full(4, 0.01, np.float32)

    def body(bb, x):
        zp = 128 if act_dtype == "uint8" else 0
        wdq = relax.op.dequantize(
            relax.const(codes),
            relax.const(w_scale),
            relax.const(np.full(4, w_zp, np.int8)),
            axis=0,
            out_dtype="float32",
        )
        y = bb.emit(
            relax.op.nn.conv2d(qdq(bb, x, act_scale, np.full(np.shape(act_scale), zp), act_dtype), wdq, padding=1)
        )
        return qdq(bb, y, 0.1, zp, act_dtype)

    return module(body)


@pytest.mark.parametrize(
    "code, kwargs",
    [
        ("NPU_E_QUANT_DTYPE", dict(act_dtype="int16")),  # int16 into a conv (uint8 runs as int8)
        ("NPU_E_QUANT_SCALE", dict(act_scale=np.full(4, 0.05, np.float32))),  # per-channel activations
        ("NPU_E_QUANT_WEIGHT", dict(w_zp=3)),  # asymmetric weights
    ],
)
def test_int8_refusals_fall_back_to_fp16_and_say_why(rng, code, kwargs):
    mod = qconv_model(rng, **kwargs)
    ex, report = build(mod)
    c = row(report, "relax.nn.conv2d")
    # The int8 form refused the conv; the fp16 form took it with the weights dequantized at compile time.
    assert c.device == "npu" and c.precision == "fp16"
    named(report, c, code)
    assert f"fp16 because {code}" in report.table()
    x = rng.standard_normal(SHAPE).astype(np.float32)
    got, want = run_vm(ex, x), run_cpu(mod, x)
    assert np.abs(got - want).max() <= 0.1 + 1e-6  # one step of the output quantization at most


# --- task limits (regions.py) ----------------------------------------------------------------------


def boundary_cycles(shapes, elem=2):
    """The documented boundary cost: one DMA per region input and output (dma_latency + bytes / bw)."""
    return sum(CFG.dma_latency + math.ceil(math.prod(s) * elem / CFG.ddr_bytes_per_cycle) for s in shapes)


def vector_cycles(steps):
    return CFG.op_overhead + math.ceil(steps / (CFG.vector_lanes // 2))  # fp16 lanes


def test_lone_add_between_cpu_ops_npu_e_region_too_small(rng):
    mod = module(
        lambda bb, x: bb.emit(relax.op.sin(bb.emit(relax.op.add(bb.emit(relax.op.sin(x)), bb.emit(relax.op.cos(x))))))
    )
    assert vector_cycles(math.prod(SHAPE)) < boundary_cycles([SHAPE] * 3)  # 48 < 576: below threshold
    ex, report = build(mod)
    assert not npu_modules(ex)
    add = row(report, "relax.add")
    assert add.device == "cpu" and "compute cycles <" in add.reason
    named(report, add, "NPU_E_REGION_TOO_SMALL")
    x = rng.standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), np.sin(np.sin(x) + np.cos(x)), rtol=1e-5, atol=1e-6)


def test_pool_that_pays_for_its_boundary_stays_on_the_npu(rng):
    shape = (1, 16, 16, 16)
    mod = module(
        lambda bb, x: bb.emit(
            relax.op.sin(bb.emit(relax.op.nn.max_pool2d(bb.emit(relax.op.sin(x)), pool_size=3, strides=1, padding=1)))
        ),
        shapes=(shape,),
    )
    assert vector_cycles(math.prod(shape) * 9) >= boundary_cycles([shape] * 2)  # 1184 >= 1152
    ex, report = build(mod)
    assert row(report, "relax.nn.max_pool2d").device == "npu" and len(npu_modules(ex)) == 1
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=2e-3, atol=2e-3)


def test_a_lone_add_that_is_the_whole_model_stays_on_the_npu(rng):
    mod = module(lambda bb, x, y: bb.emit(relax.op.add(x, y)), shapes=(SHAPE, SHAPE))
    ex, report = build(mod)
    assert row(report, "relax.add").device == "npu" and len(npu_modules(ex)) == 1


def conv1x1(x, w):
    return np.einsum("oc,nchw->nohw", w[:, :, 0, 0], x)


def fan_out(rng, n):
    """conv -> n x (conv -> sin): one NPU region with 1 input and n outputs; and its numpy reference."""
    ws = [rng.standard_normal((4, 4, 1, 1)).astype(np.float32) / 2 for _ in range(n + 1)]

    def body(bb, x):
        y = bb.emit(relax.op.nn.conv2d(x, relax.const(ws[0])))
        return relax.Tuple([bb.emit(relax.op.sin(bb.emit(relax.op.nn.conv2d(y, relax.const(w))))) for w in ws[1:]])

    return module(body), [4, 8, 8], lambda x: [np.sin(conv1x1(conv1x1(x, ws[0]), w)) for w in ws[1:]]


def fan_in(rng, n):
    """split into n parts on the CPU -> a chain of adds -> conv: one NPU region with n inputs and
    1 output; and its numpy reference."""
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32) / 2

    def body(bb, x):
        parts = bb.emit(relax.op.split(x, n, axis=1))
        acc = bb.emit(relax.TupleGetItem(parts, 0))
        for i in range(1, n):
            acc = bb.emit(relax.op.add(acc, bb.emit(relax.TupleGetItem(parts, i))))
        return bb.emit(relax.op.nn.conv2d(acc, relax.const(w)))

    return (
        module(body, shapes=((1, 4 * n, 8, 8),)),
        [4 * n, 8, 8],
        lambda x: [conv1x1(x.reshape(n, 4, 8, 8).sum(axis=0, keepdims=True), w)],
    )


@pytest.mark.parametrize("make", [fan_out, fan_in])
def test_region_over_max_tensors_is_split_into_tasks(rng, make):
    mod, shape, reference = make(rng, 66)  # 66 + 1 tensors > 64
    ex, report = build(mod)
    assert report.mac_percent() == 100.0  # every conv (and add) still runs on the NPU
    assert all(p.device == "npu" for p in report.placements if p.op in ("relax.nn.conv2d", "relax.add"))
    tensors = [len(r["input_bytes"]) + len(r["output_bytes"]) for r in report.regions.values()]
    assert len(tensors) >= 2 and max(tensors) <= CFG.max_tensors, tensors
    assert len(npu_modules(ex)) == len(tensors)
    x = rng.standard_normal([1] + shape).astype(np.float32)
    got = run_vm(ex, x)
    for g, w in zip(got if isinstance(got, list) else [got], reference(x)):
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2)


def test_an_op_that_alone_exceeds_max_tensors_is_err_task_too_complex(rng):
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)

    def body(bb, x):
        y = conv(bb, x, w)
        return relax.Tuple([y, bb.emit(relax.op.add(y, x))])

    mod = module(body)
    # The region (x in; y, sum out) needs 3 tensors, so it is split: the conv (x in, y out) fits in 2,
    # the add (y, x in, sum out) alone needs 3.
    with pytest.raises(tvm_npu.NPUError, match="ERR_TASK_TOO_COMPLEX.*alone needs 3 tensors"):
        build(mod, config=CFG.replace(max_tensors=2))
