"""Property tests: whatever the planner does (row tiles, channel blocks, SRAM residency), results equal
the untiled numpy reference of the fp16 datapath bit for bit, and the verifier accepts the stream.
Shapes are drawn so that many layers are far larger than npu-small's 512 KiB of SRAM."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import relax

import tvm_npu
from builders import chain, chain_reference, conv_layer, dense_layer
from conftest import run_vm
from npu_ref import fp16

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    cin=st.integers(1, 40),
    cout=st.integers(1, 70),
    k=st.sampled_from([1, 3, 5]),
    stride=st.sampled_from([1, 2]),
    h=st.integers(5, 160),
    w=st.integers(5, 90),
    act=st.sampled_from(["none", "relu", "clip"]),
    seed=st.integers(0, 1000),
)
def test_conv_tiles_match_the_untiled_reference(cin, cout, k, stride, h, w, act, seed):
    rng = np.random.default_rng(seed)
    layer = conv_layer(rng, cin, cout, k, stride=stride, act=act)
    x = rng.standard_normal((1, cin, h, w)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, [layer]), config="npu-small")
    p = layer["pad"]
    want = fp16.conv2d_nchw(x, layer["w"], layer["b"], (stride, stride), (p,) * 4, act=act)
    np.testing.assert_array_equal(run_vm(ex, x), want)


@SETTINGS
@given(m=st.integers(1, 300), k=st.integers(1, 1500), n=st.integers(1, 700), seed=st.integers(0, 1000))
def test_dense_blocks_match_the_untiled_reference(m, k, n, seed):
    rng = np.random.default_rng(seed)
    layer = dense_layer(rng, k, n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, [layer]), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, x), fp16.dense(x, layer["w"], layer["b"]))


@SETTINGS
@given(
    c=st.integers(1, 64),
    h=st.integers(4, 200),
    w=st.integers(4, 120),
    kind=st.sampled_from(["max", "avg"]),
    k=st.sampled_from([2, 3]),
    stride=st.sampled_from([1, 2]),
    seed=st.integers(0, 1000),
)
def test_pool_tiles_match_the_untiled_reference(c, h, w, kind, k, stride, seed):
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, h, w), "float32"))
    pool = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(pool(x, pool_size=k, strides=stride)))
        bb.emit_func_output(out)
    xv = rng.standard_normal((1, c, h, w)).astype(np.float32)
    ex = tvm_npu.build(bb.get(), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, xv), fp16.pool_nchw(xv, kind, k, stride))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cin=st.integers(100, 300),
    cout=st.sampled_from([192, 256, 320]),
    hw=st.integers(3, 14),
    depth=st.integers(1, 2),
    seed=st.integers(0, 1000),
)
def test_convs_with_weights_larger_than_sram_match_the_untiled_reference(cin, cout, hw, depth, seed):
    # 3x3 fp16 weights of 0.35-1.7 MB on npu-small's 512 KiB: the layers run in output-channel blocks
    # that write their channels of each pixel through the output pixel stride (resident or DDR output).
    rng = np.random.default_rng(seed)
    layers = [conv_layer(rng, cin, cout, 3)] + [conv_layer(rng, cout, cout, 3) for _ in range(depth - 1)]
    x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, layers), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, x), chain_reference(x, layers))
