"""frontend/contrib/group_norm.py: onnxruntime's com.microsoft GroupNorm (NHWC or NCHW X, SiLU or no
activation) imports as relax.nn.group_norm, which rewrite/fuse_group_norm.py writes as a layer_norm of
grouped rows. onnxruntime runs the op on CUDA / ROCm only, so the reference is numpy's GroupNorm."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu import rewrite

C, G, HW = 32, 8, 8
RNG = np.random.default_rng(1)
GAMMA = (1 + 0.1 * RNG.standard_normal(C)).astype(np.float32)
BETA = (0.1 * RNG.standard_normal(C)).astype(np.float32)


def contrib_model(channels_last=1, activation=1, groups=G, elem=TensorProto.FLOAT, gamma=GAMMA):
    shape = (1, HW, HW, C) if channels_last else (1, C, HW, HW)
    node = helper.make_node(
        "GroupNorm",
        ["x", "gamma", "beta"],
        ["y"],
        name="gn0",
        domain="com.microsoft",
        activation=activation,
        groups=groups,
        epsilon=1e-5,
        channels_last=channels_last,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape)],
        [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(BETA, "beta")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), shape


def numpy_group_norm(x, channels_last, activation):
    """GroupNorm by its definition: biased variance over each group's channels and pixels, eps under
    the root, then gamma, beta and SiLU."""
    nchw = np.moveaxis(x, -1, 1) if channels_last else x
    g = nchw.astype(np.float64).reshape(1, G, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(nchw.shape)
    y = y * GAMMA.reshape(1, C, 1, 1) + BETA.reshape(1, C, 1, 1)
    y = y / (1 + np.exp(-y)) if activation else y
    return np.moveaxis(y, 1, -1) if channels_last else y


@pytest.mark.parametrize("channels_last, activation", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_contrib_group_norm_becomes_layer_norm_and_matches_numpy(channels_last, activation):
    model, shape = contrib_model(channels_last, activation)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.layer_norm") == 1 and count_ops(mod, "relax.nn.group_norm") == 0, mod
    assert count_ops(mod, "relax.nn.silu") == activation
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    ref = numpy_group_norm(x, channels_last, activation)
    bound = max(1.0, np.abs(ref).max())
    # the rewrite is exact: TVM's float32 build of the rewritten module; then the NPU build, where the
    # NCHW form runs as GN_STATS / GN_APPLY in fp16 (the NHWC form's transposes keep it on the CPU)
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * bound
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(model)), x)
    assert np.abs(got - ref).max() <= 1e-2 * bound


@pytest.mark.parametrize(
    "change, code, words",
    [
        (dict(activation=2), "ERR_OP_NOT_SUPPORTED", ["activation", "gn0"]),
        (dict(groups=5), "ERR_INVALID_MODEL", ["groups 5", "gn0"]),
        (dict(elem=TensorProto.FLOAT16), "ERR_OP_NOT_SUPPORTED", ["float16", "gn0"]),
        (dict(gamma=np.ones(C // 2, np.float32)), "ERR_INVALID_MODEL", ["gamma", "gn0"]),
    ],
    ids=["activation", "groups", "float16", "gamma_shape"],
)
def test_a_group_norm_it_does_not_import_is_a_coded_error(change, code, words):
    model, _ = contrib_model(**change)
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.from_onnx(model)
    assert err.value.code == code, str(err.value)
    for w in words:
        assert w in str(err.value), str(err.value)
