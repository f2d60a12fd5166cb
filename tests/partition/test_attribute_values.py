"""Single-op ONNX models (onnx.helper) at the attribute values the NPU does not run, and at some it does
(issue 19): a value the NPU does not run builds, falls back to the CPU with its reason code in the
why-not report and gives TVM llvm's numbers; a value it runs runs on the NPU and matches llvm within the
fp16 tolerance. Values TVM's importer cannot give the meaning of stop the import with a coded error.
The generated conformance suite (tests/conformance/) covers the ops at large; these are the attributes."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu.contract.errors import NPUError

X = (1, 8, 9, 9)  # odd spatial size: SAME padding is uneven at stride 2


def model(op, attrs=None, inits=None, shape=X, opset=17, inputs=None, n_out=1, nodes=(), data="x"):
    """One `op` node on `data` (model input x, or the output of `nodes` before it) and `inputs` (default:
    the named initializers), outputs typed by ONNX shape inference."""
    inits = dict(inits or {})
    node = helper.make_node(op, [data] + list(inputs or inits), [f"y{i}" for i in range(n_out)], **(attrs or {}))
    graph = helper.make_graph(
        list(nodes) + [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        # A second output is MaxPool's Indices (int64).
        [
            helper.make_tensor_value_info(f"y{i}", TensorProto.INT64 if i else TensorProto.FLOAT, None)
            for i in range(n_out)
        ],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def onnxruntime_run(m, x):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def close(got, want):
    """fp16 tolerance: max error <= 1e-2 x max(1, max |want|)."""
    assert got.shape == want.shape
    err, bound = float(np.abs(got - want).max(initial=0)), 1e-2 * max(1.0, float(np.abs(want).max(initial=0)))
    assert err <= bound, f"max error {err} > {bound}"


def check(m, op, device, code="", ort_too=False, seed=0):
    """Build `m`; `op` placed on `device` (with reason `code` when on the CPU); outputs match llvm."""
    mod = tvm_npu.from_onnx(m)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    rows = [p for p in report.placements if p.op == op]
    assert rows and all(p.device == device for p in rows), report.table()
    if code:
        assert all(p.code == code for p in rows), report.table()
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    got = run_vm(ex, x)
    close(got, run_cpu(mod, x))
    if ort_too:  # where the import itself computes the attribute's meaning
        close(got, onnxruntime_run(m, x))


def w(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = {
    # Conv
    "conv_stride_3": (
        model("Conv", {"strides": [3, 3]}, {"w": w((8, 8, 3, 3))}),
        "relax.nn.conv2d",
        "cpu",
        "NPU_E_STRIDE",
    ),
    "conv_grouped": (model("Conv", {"group": 2}, {"w": w((8, 4, 3, 3))}), "relax.nn.conv2d", "cpu", "NPU_E_GROUPS"),
    "conv_depthwise": (model("Conv", {"group": 8}, {"w": w((8, 1, 3, 3))}), "relax.nn.conv2d", "npu", ""),
    "conv_dilated": (
        model("Conv", {"dilations": [2, 2], "pads": [2, 1, 2, 1]}, {"w": w((8, 8, 3, 3))}),
        "relax.nn.conv2d",
        "npu",
        "",
    ),
    "conv_same_lower": (
        model("Conv", {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, {"w": w((8, 8, 4, 4))}),
        "relax.nn.conv2d",
        "npu",
        "",
    ),
    "conv_asymmetric_pads": (
        model("Conv", {"pads": [0, 2, 1, 0]}, {"w": w((8, 8, 3, 3))}),
        "relax.nn.conv2d",
        "npu",
        "",
    ),
    # Pools
    "maxpool_ceil_mode": (
        model("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        "relax.nn.max_pool2d",
        "cpu",
        "NPU_E_POOL",
    ),
    "maxpool_stride_3": (
        model("MaxPool", {"kernel_shape": [3, 3], "strides": [3, 3]}),
        "relax.nn.max_pool2d",
        "cpu",
        "NPU_E_POOL",
    ),
    "maxpool_same_lower": (
        model("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        "relax.nn.max_pool2d",
        "npu",
        "",
    ),
    "maxpool_storage_order": (
        model("MaxPool", {"kernel_shape": [3, 3], "storage_order": 1}),
        "relax.nn.max_pool2d",
        "npu",
        "",
    ),
    "avgpool_exclude_pad": (
        model("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        "relax.nn.avg_pool2d",
        "cpu",
        "NPU_E_POOL",
    ),
    "avgpool_include_pad": (
        model("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        "relax.nn.avg_pool2d",
        "npu",
        "",
    ),
    "avgpool_same_upper": (
        model(
            "AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER", "count_include_pad": 1}
        ),
        "relax.nn.avg_pool2d",
        "npu",
        "",
    ),
    "reducemean_no_keepdims": (
        model("ReduceMean", {"axes": [2, 3], "keepdims": 0}, opset=13),
        "relax.mean",
        "cpu",
        "NPU_E_POOL",
    ),
    # Gemm / MatMul
    "gemm_alpha_beta_transb": (
        model("Gemm", {"alpha": 0.5, "beta": 2.0, "transB": 1}, {"b": w((16, 24)), "c": w((16,), 2)}, shape=(4, 24)),
        "relax.matmul",
        "npu",
        "",
    ),
    "gemm_full_c": (
        model("Gemm", {}, {"b": w((24, 16)), "c": w((4, 16), 2)}, shape=(4, 24)),
        "relax.matmul",
        "npu",
        "",
    ),
    "matmul_batched_data": (model("MatMul", {}, {"b": w((24, 16))}, shape=(2, 3, 24)), "relax.matmul", "npu", ""),
    # Softmax
    # opset < 13 coerces to 2-D at the axis: over 1 x 16 here (an axis-1 softmax would give all ones)
    "softmax_opset11_coerced": (
        # On a value the NPU computes: a softmax of a float32 model input stays on the CPU (NPU_E_RANGE).
        model(
            "Softmax",
            {"axis": 1},
            shape=(4, 1, 16),
            opset=11,
            nodes=[helper.make_node("Sigmoid", ["x"], ["r"])],
            data="r",
        ),
        "relax.nn.softmax",
        "npu",
        "",
    ),
    "softmax_axis_0": (model("Softmax", {"axis": 0}, shape=(4, 8), opset=13), "relax.nn.softmax", "cpu", "NPU_E_AXIS"),
    # Activations
    "leakyrelu_alpha": (model("LeakyRelu", {"alpha": 0.3}, shape=(4, 16)), "relax.nn.leakyrelu", "npu", ""),
    "gelu_tanh": (model("Gelu", {"approximate": "tanh"}, shape=(4, 16), opset=20), "relax.nn.gelu_tanh", "npu", ""),
    "gelu_none": (model("Gelu", {}, shape=(4, 16), opset=20), "relax.nn.gelu", "npu", ""),
    "hardsigmoid_alpha_beta": (
        model("HardSigmoid", {"alpha": 0.3, "beta": 0.6}, shape=(4, 16)),
        "relax.multiply",
        "npu",
        "",
    ),
    # Clip with only its min input (relu-like, max the float32 maximum), fused into the conv
    "clip_min_only": (
        model(
            "Clip",
            {},
            {"wc": w((8, 8, 3, 3)), "lo": np.float32(0.5)},
            opset=13,
            inputs=["lo"],
            data="c",
            nodes=[helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1])],
        ),
        "relax.clip",
        "npu",
        "",
    ),
    # Concat with a negative axis: channels of an NCHW map
    "concat_negative_axis": (
        model(
            "Concat",
            {"axis": -3},
            {"wc": w((8, 8, 3, 3))},
            nodes=[helper.make_node("Conv", ["x", "wc"], ["r"], pads=[1, 1, 1, 1])],
            inputs=["r"],
        ),
        "relax.concat",
        "npu",
        "",
    ),
}

ORT_TOO = {
    "conv_same_lower",
    "maxpool_same_lower",
    "avgpool_same_upper",
    "softmax_opset11_coerced",
    "gemm_alpha_beta_transb",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attribute_value(case):
    m, op, device, code = CASES[case]
    check(m, op, device, code, ort_too=case in ORT_TOO)


@pytest.mark.parametrize(
    "case, m, code",
    [
        ("maxpool_indices", model("MaxPool", {"kernel_shape": [2, 2]}, n_out=2), "ERR_OP_NOT_SUPPORTED"),
        (
            "add_legacy_broadcast",
            model("Add", {"broadcast": 1, "axis": 1}, {"b": np.ones(8, np.float32)}, opset=6),
            "ERR_OP_NOT_SUPPORTED",
        ),
        ("conv_kernel_shape", model("Conv", {"kernel_shape": [3, 3]}, {"w": w((8, 8, 2, 2))}), "ERR_INVALID_MODEL"),
        (  # blocked DequantizeLinear is imported (frontend/blockwise.py); blocked quantization is not
            "quantize_block_size",
            model(
                "DequantizeLinear",
                inits={"s": np.ones((4, 8), np.float32), "s1": np.float32(1.0)},
                inputs=["s1"],
                nodes=(helper.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, block_size=2),),
                data="q",
                shape=(4, 16),
                opset=21,
            ),
            "ERR_OP_NOT_SUPPORTED",
        ),
    ],
)
def test_attribute_value_refused_at_import(case, m, code):
    with pytest.raises(NPUError) as err:
        tvm_npu.from_onnx(m)
    assert err.value.code == code, str(err.value)


def _qdq_conv(w_axis: int, act_dtype=TensorProto.INT8):
    """x -> Q -> DQ -> Conv(DQ(w, per-channel along w_axis)) -> Q -> DQ, 8 -> 8 channels."""
    codes = np.random.default_rng(3).integers(-127, 128, (8, 8, 3, 3)).astype(np.int8)
    zp = np.int8(0) if act_dtype == TensorProto.INT8 else np.uint16(0)
    inits = {
        "wq": codes,
        "ws": np.linspace(0.01, 0.05, 8).astype(np.float32),
        "wz": np.zeros(8, np.int8),
        "sx": np.float32(0.05),
        "zx": zp,
        "sy": np.float32(0.2),
        "zy": zp,
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=w_axis),
        helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X)],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    graph.node.append(helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y0"]))
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def test_per_channel_weight_scales_on_the_input_channels_fall_back():
    """The int8 requantization applies one weight scale per output channel: scales along the input
    channels (DequantizeLinear axis=1) used to be applied per output channel, silently. Now the int8
    form refuses it (NPU_E_QUANT_WEIGHT) and the conv runs on the fp16 datapath with the weights
    dequantized exactly."""
    m = _qdq_conv(w_axis=1)
    mod = tvm_npu.from_onnx(m)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    (row,) = [p for p in report.placements if p.op == "relax.nn.conv2d"]
    assert row.precision == "fp16" and row.code == "NPU_E_QUANT_WEIGHT", report.table()
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    got, want = run_vm(ex, x), run_cpu(mod, x)
    assert np.abs(got - want).max() <= 0.2 + 1e-6  # at most one output step (fp16 vs fp32 rounding)
    assert np.mean(got == want) > 0.95


def test_per_channel_weight_scales_on_the_output_channels_run_int8():
    m = _qdq_conv(w_axis=0)
    report = tvm_npu.BuildReport()
    mod = tvm_npu.from_onnx(m)
    ex = tvm_npu.build(mod, report=report)
    (row,) = [p for p in report.placements if p.op == "relax.nn.conv2d"]
    assert row.device == "npu" and row.precision == "int8", report.table()
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    assert np.abs(run_vm(ex, x) - run_cpu(mod, x)).max() <= 0.2 + 1e-6


def test_uint16_activations_stay_on_the_cpu():
    m = _qdq_conv(w_axis=0, act_dtype=TensorProto.UINT16)
    report = tvm_npu.BuildReport()
    mod = tvm_npu.from_onnx(m)
    ex = tvm_npu.build(mod, report=report)
    (row,) = [p for p in report.placements if p.op == "relax.nn.conv2d"]
    assert row.precision != "int8" and row.code == "NPU_E_QUANT_DTYPE", report.table()
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))


def _relax(shape, body):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(body(x))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(
    "name, shape, body",
    [
        # permute_dims of a conv weight used to be dropped (the weight read in its un-permuted layout)
        (
            "conv_permuted_weight",
            (1, 4, 8, 8),
            lambda x: relax.op.nn.conv2d(
                x, relax.op.permute_dims(relax.const(w((3, 3, 4, 8))), [3, 2, 0, 1]), padding=1
            ),
        ),
        # an identity permute_dims of a dense weight used to count as a transpose
        (
            "dense_identity_permute",
            (4, 16),
            lambda x: relax.op.matmul(x, relax.op.permute_dims(relax.const(w((16, 8))), [0, 1])),
        ),
        # a slice begin before the axis' start is clamped to 0 (it used to address rows before the tensor)
        (
            "slice_begin_clamped",
            (8, 16),
            lambda x: relax.op.matmul(
                relax.op.strided_slice(relax.op.matmul(x, relax.const(w((16, 16)))), [0], [-100], [4]),
                relax.const(w((16, 8), 2)),
            ),
        ),
    ],
)
def test_weights_and_views_run_as_tvm_defines_them(name, shape, body):
    mod = _relax(shape, body)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    assert all(p.device == "npu" for p in report.placements if p.op != "relax.permute_dims"), report.table()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))
