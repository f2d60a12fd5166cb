"""Group-wise quantized weights (frontend/blockwise.py): onnxruntime's MatMulNBits and ONNX's blocked
DequantizeLinear (opset 21, int4 / uint4 / int8 initializers), imported and built for "npu" (the matmul
runs int4 on the NPU where CONV2D computes it, else on the CPU), against onnxruntime on the same model:
the import exactly (TVM's llvm build, 1e-5), the NPU build within the fp16 tolerance.

The models are packed here with numpy from the layouts the formats define (MatMulNBits: B uint8
[N, blocks, block * bits / 8], low bits first along K; zero points packed the same way along the blocks),
independently of the importer's unpacking."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import run_cpu, run_vm

M = 3


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes [..., n] -> bytes [..., n * bits / 8], low bits first."""
    if bits == 8:
        return codes.astype(np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _model(nodes, inits, K, N, opsets):
    graph = helper.make_graph(
        nodes,
        "blockwise",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def matmul_nbits(K, N, block, bits=4, zp="packed", bias=False, seed=0, scales=None):
    """A MatMulNBits model and the float32 weight [K, N] its codes stand for (numpy)."""
    rng = np.random.default_rng(seed)
    blocks = -(-K // block)
    codes = rng.integers(0, 1 << bits, (N, blocks * block)).astype(np.uint8)
    scale = rng.uniform(0.005, 0.05, (N, blocks)).astype(np.float32) if scales is None else scales
    inits = [numpy_helper.from_array(_pack(codes, bits).reshape(N, blocks, -1), "B")]
    inits.append(numpy_helper.from_array(scale.reshape(-1), "S"))
    names = ["A", "B", "S"]
    zeros = np.full((N, blocks), 1 << (bits - 1), np.float32)
    if zp == "packed":
        z = rng.integers(0, 1 << bits, (N, blocks + (blocks % 2 if bits == 4 else 0))).astype(np.uint8)
        inits.append(numpy_helper.from_array(_pack(z, bits).reshape(-1), "Z"))
        zeros = z[:, :blocks].astype(np.float32)
        names.append("Z")
    elif zp == "float":
        zeros = rng.uniform(0, (1 << bits) - 1, (N, blocks)).astype(np.float32)
        inits.append(numpy_helper.from_array(zeros.reshape(-1), "Z"))
        names.append("Z")
    if bias:  # inputs 3 (zero points) and 4 (g_idx) may be empty names
        names = names + [""] * (4 - len(names)) + ["", "bias"]
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=K, N=N, bits=bits, block_size=block)
    group = np.arange(K) // block
    weight = ((codes[:, :K].astype(np.float32) - zeros[:, group]) * scale[:, group]).T
    return _model([node], inits, K, N, [("", 21), ("com.microsoft", 1)]), weight


def blocked_dq(K, N, block, dtype=TensorProto.INT4, zp=True, seed=0):
    """DequantizeLinear(int4 / uint4 / int8 codes [K, N], scales [ceil(K / block), N], axis 0) -> MatMul."""
    rng = np.random.default_rng(seed)
    lo, hi = {TensorProto.INT4: (-8, 8), TensorProto.UINT4: (0, 16), TensorProto.INT8: (-128, 128)}[dtype]
    blocks = -(-K // block)
    codes = rng.integers(lo, hi, (K, N))
    scale = rng.uniform(0.005, 0.05, (blocks, N)).astype(np.float32)
    inits = [helper.make_tensor("W", dtype, [K, N], codes.flatten().tolist()), numpy_helper.from_array(scale, "S")]
    zeros = np.zeros((blocks, N), np.int64)
    if zp:
        zeros = rng.integers(lo, hi, (blocks, N))
        inits.append(helper.make_tensor("Z", dtype, [blocks, N], zeros.flatten().tolist()))
    dq = helper.make_node("DequantizeLinear", ["W", "S"] + (["Z"] if zp else []), ["Wf"], axis=0, block_size=block)
    mm = helper.make_node("MatMul", ["A", "Wf"], ["Y"])
    group = np.arange(K) // block
    weight = (codes - zeros[group]).astype(np.float32) * scale[group]
    return _model([dq, mm], inits, K, N, [("", 21)]), weight


def _ort(model, x):
    options = ort.SessionOptions()
    # Plain float kernels: at the default level onnxruntime may turn DequantizeLinear + MatMul into its
    # own MatMulNBits with int8 activations (accuracy_level 4), which is not what the model says.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options).run(None, {"A": x})[0]


def _npu(model, x):
    return run_vm(tvm_npu.build(tvm_npu.from_onnx(model)), x)


def _check(model, x, want):
    """The import exact (TVM's llvm build of it), the NPU build within fp16's tolerance."""
    np.testing.assert_allclose(run_cpu(tvm_npu.from_onnx(model), x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_npu(model, x), want, rtol=0, atol=1e-2 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize(
    "K,N,block,bits,zp,bias",
    [
        (64, 16, 32, 4, "packed", False),
        (40, 8, 16, 4, "packed", False),  # K not a multiple of the block: the last block padded
        (128, 24, 128, 4, None, True),  # default zero point 8, bias
        (96, 8, 32, 4, "float", False),
        (64, 8, 16, 8, "packed", False),
        (48, 8, 16, 8, None, True),
    ],
)
def test_matmul_nbits_matches_onnxruntime(K, N, block, bits, zp, bias):
    model, weight = matmul_nbits(K, N, block, bits, zp, bias)
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    want = _ort(model, x)
    bias_value = numpy_helper.to_array(model.graph.initializer[-1]) if bias else 0
    np.testing.assert_allclose(x @ weight + bias_value, want, rtol=1e-5, atol=1e-5)  # the packing above
    _check(model, x, want)


@pytest.mark.parametrize(
    "K,N,block,dtype,zp",
    [
        (64, 16, 32, TensorProto.INT4, True),
        (64, 16, 16, TensorProto.INT4, False),
        (72, 8, 32, TensorProto.UINT4, True),  # a partial last block
        (64, 8, 32, TensorProto.INT8, True),
    ],
)
def test_blocked_dequantize_matches_onnxruntime(K, N, block, dtype, zp):
    model, weight = blocked_dq(K, N, block, dtype, zp)
    x = np.random.default_rng(2).standard_normal((M, K)).astype(np.float32)
    want = _ort(model, x)
    np.testing.assert_allclose(x @ weight, want, rtol=1e-5, atol=1e-5)
    _check(model, x, want)


def test_int4_initializer_without_blocks_imports():
    """Per-tensor DequantizeLinear of an int4 initializer: TVM's importer cannot hold INT4; widened to int8."""
    codes = np.arange(-8, 8).reshape(4, 4)
    inits = [
        helper.make_tensor("W", TensorProto.INT4, [4, 4], codes.flatten().tolist()),
        numpy_helper.from_array(np.array(0.25, np.float32), "S"),
    ]
    nodes = [helper.make_node("DequantizeLinear", ["W", "S"], ["Wf"]), helper.make_node("MatMul", ["A", "Wf"], ["Y"])]
    model = _model(nodes, inits, 4, 4, [("", 21)])
    x = np.random.default_rng(3).standard_normal((M, 4)).astype(np.float32)
    _check(model, x, _ort(model, x))


def _with_attr(model, **attrs):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    for name, value in attrs.items():
        for a in node.attribute:
            if a.name == name:
                node.attribute.remove(a)
                break
        node.attribute.append(helper.make_attribute(name, value))
    return out


@pytest.mark.parametrize(
    "change,code,words",
    [
        (dict(bits=3), "ERR_OP_NOT_SUPPORTED", "bits 3"),
        (dict(block_size=24), "ERR_INVALID_MODEL", "power of two"),
        (dict(N=12), "ERR_INVALID_MODEL", "B is uint8"),
    ],
)
def test_matmul_nbits_bad_attributes_are_coded_errors(change, code, words):
    model, _ = matmul_nbits(64, 16, 32)
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.from_onnx(_with_attr(model, **change))
    assert err.value.code == code and words in str(err.value) and "MatMulNBits" in str(err.value)


def test_nan_scales_are_a_coded_error_naming_the_tensor():
    scales = np.full((16, 2), 0.01, np.float32)
    scales[3, 1] = np.nan
    model, _ = matmul_nbits(64, 16, 32, scales=scales)
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.from_onnx(model)
    assert err.value.code == "ERR_INVALID_MODEL" and "scales" in str(err.value) and "index 7" in str(err.value)


def test_blocked_scale_of_the_wrong_shape_is_a_coded_error():
    model, _ = blocked_dq(64, 8, 32)
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    bad.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.full((3, 8), 0.01, np.float32), "S"))
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.from_onnx(bad)
    assert err.value.code == "ERR_INVALID_MODEL" and "needs [2, 8]" in str(err.value)
