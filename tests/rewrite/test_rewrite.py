"""Graph rewrites before partitioning (tvm_npu.rewrite, one pass per file): the op counts before and after
each pass and after partition.prepare (which runs them all), placement, and outputs against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu import rewrite
from tvm_npu.ir import graph as relax_graph
from tvm_npu.partition import partitioner as partition

SHAPE = (1, 8, 14, 14)
X = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)


def count_ops(mod, name: str) -> int:
    """Calls of op `name` ("relax.nn.batch_norm") in `main`."""
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if relax_graph.op_name(e) == name else None)
    return len(found)


def make_model(nodes, inits, out_shape, opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def conv_weight(rng, cout, cin):
    return (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)


def bn_params(rng, c):
    """Seeded statistics far from the identity, so a wrong fold is visible."""
    values = (
        rng.uniform(0.5, 1.5, c),
        rng.standard_normal(c) * 0.2,
        rng.standard_normal(c) * 0.3,
        rng.uniform(0.3, 2.0, c),
    )
    return {f"bn_{n}": v.astype(np.float32) for n, v in zip(("gamma", "beta", "mean", "var"), values)}


def onnxruntime_ref(model, x):
    so = ort.SessionOptions()
    # ORT would fold the batch norm itself; the reference must compute it as written
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def build(model):
    report = tvm_npu.BuildReport()
    out = run_vm(tvm_npu.build(tvm_npu.from_onnx(model), report=report), X)
    return out, report


def conv_bn_relu(rng, bias=True, group=1, cout=16):
    cin = SHAPE[1]
    cout = cin if group > 1 else cout
    inits = {"w": conv_weight(rng, cout, cin // group)}
    if bias:
        inits["b"] = (rng.standard_normal(cout) * 0.2).astype(np.float32)
    inits.update(bn_params(rng, cout))
    nodes = [
        helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], pads=[1, 1, 1, 1], group=group),
        helper.make_node("BatchNormalization", ["c", "bn_gamma", "bn_beta", "bn_mean", "bn_var"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    return make_model(nodes, inits, [1, cout, 14, 14])


@pytest.mark.parametrize(
    "bias,group", [(True, 1), (False, 1), (True, SHAPE[1])], ids=["conv_bias", "conv_no_bias", "depthwise"]
)
def test_conv_batchnorm_relu_folds_into_one_npu_conv(rng, bias, group):
    model = conv_bn_relu(rng, bias, group)
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.nn.batch_norm") == 1
    assert count_ops(mod, "relax.add") == int(bias)
    folded = rewrite.fold_batch_norm(mod)
    assert count_ops(folded, "relax.nn.batch_norm") == 0
    assert count_ops(folded, "relax.nn.conv2d") == 1
    assert count_ops(folded, "relax.add") == 1  # the folded bias replaces the conv's own
    assert count_ops(folded, "relax.reshape") == 0  # nor is the old bias's reshape left behind
    prepared = partition.prepare(mod)
    assert count_ops(prepared, "relax.nn.batch_norm") == 0
    assert count_ops(prepared, "relax.nn.conv2d") == 1
    assert count_ops(prepared, "relax.add") == 1  # the folded bias, nothing of the decomposition

    out, report = build(model)
    assert [(p.op, p.device, p.composite) for p in report.placements] == [
        ("relax.nn.conv2d", "npu", "npu.conv2d_bias_relu"),
        ("relax.add", "npu", "npu.conv2d_bias_relu"),
        ("relax.nn.relu", "npu", "npu.conv2d_bias_relu"),
    ]
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


def pad_conv(rng, pads, conv_pads=(0, 0, 0, 0), value=None, opset=17, axes=None, stride=2, cin=SHAPE[1]):
    inits = {"w": conv_weight(rng, 16, cin), "pads": np.asarray(pads, np.int64)}
    pad_in = ["x", "pads"]
    if value is not None or axes is not None:
        inits["value"] = np.float32(0.0 if value is None else value)
        pad_in.append("value")
    if axes is not None:
        inits["axes"] = np.asarray(axes, np.int64)
        pad_in.append("axes")
    nodes = [
        helper.make_node("Pad", pad_in, ["p"], mode="constant"),
        helper.make_node("Conv", ["p", "w"], ["y"], strides=[stride, stride], pads=list(conv_pads)),
    ]
    return make_model(nodes, inits, ["n", 16, "h", "w"], opset=opset)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(pads=[0, 0, 1, 2, 0, 0, 1, 0]),  # TF "SAME" with stride 2: asymmetric
        dict(pads=[0, 0, 0, 1, 0, 0, 1, 1], conv_pads=(1, 1, 1, 1), stride=1),  # adds to the conv's own
        dict(pads=[1, 1, 1, 1], axes=[2, 3], opset=18),  # Pad-18 with axes
    ],
    ids=["same_stride2", "plus_conv_pads", "opset18_axes"],
)
def test_pad_conv_fuses_into_one_npu_conv(rng, kwargs):
    model = pad_conv(rng, **kwargs)
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.nn.pad") == 1
    fused = rewrite.fuse_pad_into_conv(mod)
    assert count_ops(fused, "relax.nn.pad") == 0
    assert count_ops(fused, "relax.nn.conv2d") == 1
    prepared = partition.prepare(mod)
    assert count_ops(prepared, "relax.nn.pad") == 0
    assert count_ops(prepared, "relax.nn.conv2d") == 1

    out, report = build(model)
    assert [(p.op, p.device) for p in report.placements] == [("relax.nn.conv2d", "npu")]
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.5),  # not zero: not the conv's padding
        dict(pads=[0, 1, 1, 1, 0, 0, 1, 1], cin=SHAPE[1] + 1),  # pads a channel: not a spatial padding
    ],
    ids=["nonzero_value", "channel_pad"],
)
def test_pad_that_is_not_a_conv_padding_stays_on_cpu(rng, kwargs):
    model = pad_conv(rng, **kwargs)
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.nn.pad") == 1
    assert rewrite.fuse_pad_into_conv(mod).same_as(mod)  # nothing matched: the module itself
    prepared = partition.prepare(mod)
    assert count_ops(prepared, "relax.nn.pad") == 1

    out, report = build(model)
    assert [(p.op, p.device) for p in report.placements] == [("relax.nn.pad", "cpu"), ("relax.nn.conv2d", "npu")]
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


def test_batch_norm_not_after_a_conv_is_decomposed_for_the_cpu(rng):
    """Relu -> BatchNormalization -> Conv: nothing to fold into, so the batch norm is decomposed into
    elementwise ops that TVM compiles for the CPU; the conv still runs on the NPU."""
    inits = dict(bn_params(rng, SHAPE[1]), w=conv_weight(rng, 16, SHAPE[1]))
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("BatchNormalization", ["r", "bn_gamma", "bn_beta", "bn_mean", "bn_var"], ["n"]),
        helper.make_node("Conv", ["n", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, inits, [1, 16, 14, 14])
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.nn.batch_norm") == 1
    assert count_ops(rewrite.fold_batch_norm(mod), "relax.nn.batch_norm") == 1
    decomposed = rewrite.decompose_batch_norm(mod)
    assert count_ops(decomposed, "relax.nn.batch_norm") == 0
    assert count_ops(decomposed, "relax.sqrt") == 1  # the decomposition's sqrt(var + eps)
    prepared = partition.prepare(mod)
    assert count_ops(prepared, "relax.nn.batch_norm") == 0
    assert count_ops(prepared, "relax.sqrt") == 1

    out, report = build(model)
    assert "relax.nn.batch_norm" not in {p.op for p in report.placements}
    assert [p.device for p in report.placements if p.op == "relax.nn.conv2d"] == ["npu"]
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


def test_conv_with_a_second_consumer_keeps_its_weights(rng):
    """The conv output also feeds an add: folding would change what the add sees, so the batch norm
    is decomposed instead and the conv is left as it was."""
    inits = dict(bn_params(rng, 16), w=conv_weight(rng, 16, SHAPE[1]))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_gamma", "bn_beta", "bn_mean", "bn_var"], ["n"]),
        helper.make_node("Add", ["c", "n"], ["y"]),
    ]
    model = make_model(nodes, inits, [1, 16, 14, 14])
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.nn.batch_norm") == 1
    assert rewrite.fold_batch_norm(mod).same_as(mod)  # declined: the batch norm stays for decomposition
    prepared = partition.prepare(mod)
    assert count_ops(prepared, "relax.nn.batch_norm") == 0
    assert count_ops(prepared, "relax.sqrt") == 1
    conv = [e for _, e in relax_graph.Graph(prepared["main"]).bindings if relax_graph.op_name(e) == "relax.nn.conv2d"]
    np.testing.assert_array_equal(conv[0].args[1].value.numpy(), inits["w"])

    out, report = build(model)
    assert [p.device for p in report.placements if p.op == "relax.nn.conv2d"] == ["npu"]
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


def test_squeeze_unsqueeze_flatten_become_npu_views(rng):
    """Conv -> GlobalAveragePool -> Squeeze -> Gemm -> Unsqueeze -> Flatten: the three shape ops are
    reshapes that keep the stored rows, so after views_as_reshape the whole model is one NPU region."""
    inits = {
        "w": conv_weight(rng, 16, SHAPE[1]),
        "axes": np.asarray([2, 3], np.int64),
        "axis0": np.asarray([1], np.int64),
        "g": (rng.standard_normal((16, 10)) * 0.3).astype(np.float32),
        "gb": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Squeeze", ["p", "axes"], ["s"]),
        helper.make_node("Gemm", ["s", "g", "gb"], ["f"]),
        helper.make_node("Unsqueeze", ["f", "axis0"], ["u"]),
        helper.make_node("Flatten", ["u"], ["y"], axis=1),
    ]
    model = make_model(nodes, inits, [1, 10])
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.squeeze") + count_ops(mod, "relax.expand_dims") == 2
    assert count_ops(mod, "relax.reshape") == 1  # TVM's importer writes Flatten as a reshape already
    views = rewrite.views_as_reshape(mod)
    assert count_ops(views, "relax.squeeze") + count_ops(views, "relax.expand_dims") == 0
    assert count_ops(views, "relax.reshape") == 3
    prepared = partition.prepare(mod)
    for op in ("relax.squeeze", "relax.expand_dims", "relax.flatten"):
        assert count_ops(prepared, op) == 0

    out, report = build(model)
    assert all(p.device == "npu" for p in report.placements), report.placements
    assert len(report.regions) == 1
    np.testing.assert_allclose(out, onnxruntime_ref(model, X), rtol=2e-2, atol=2e-2)


def test_lstm_final_state_and_classifier_share_one_region(rng):
    """An ONNX LSTM's Y_h is stack([h]); a classifier reads squeeze(Y_h). Both are views now, so the
    recurrence and the classifier run as one NPU region (they were two, with a host round trip)."""
    from onnx import shape_inference

    from tvm_npu.models import lstm

    base = lstm(T=4, B=1, I=6, H=8, init=False)
    g = base.graph
    g.initializer.extend(
        [
            numpy_helper.from_array(np.asarray([0], np.int64), "sq_axes"),
            numpy_helper.from_array((rng.standard_normal((8, 3)) * 0.3).astype(np.float32), "wc"),
        ]
    )
    g.node.extend(
        [
            helper.make_node("Squeeze", [g.output[1].name, "sq_axes"], ["hs"]),
            helper.make_node("MatMul", ["hs", "wc"], ["logits"]),
        ]
    )
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])])
    model = shape_inference.infer_shapes(base)
    mod = tvm_npu.from_onnx(model)
    assert (count_ops(mod, "relax.stack"), count_ops(mod, "relax.squeeze")) == (3, 1)
    views = rewrite.views_as_reshape(mod)
    assert (count_ops(views, "relax.stack"), count_ops(views, "relax.squeeze")) == (0, 0)
    assert count_ops(views, "relax.reshape") == count_ops(mod, "relax.reshape") + 4
    x = rng.standard_normal((4, 1, 6)).astype(np.float32)
    report = tvm_npu.BuildReport()
    out = run_vm(tvm_npu.build(mod, report=report), x)
    assert len(report.regions) == 1
    assert all(p.device == "npu" for p in report.placements), [p for p in report.placements if p.device != "npu"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(out, sess.run(None, {g.input[0].name: x})[0], rtol=2e-2, atol=2e-2)


def test_compute_on_constants_alone_is_folded(rng):
    """matmul(zeros, W) (a zero initial state's h @ R) next to a real dense layer: before folding, the NPU
    dense pattern took the constant as its data input and lowering crashed with an AttributeError."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8), "float32"))
    w = rng.standard_normal((8, 8)).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            z = bb.emit(relax.op.matmul(relax.const(np.full((1, 8), 0.5, np.float32)), relax.const(w)))
            y = bb.emit(relax.op.add(relax.op.matmul(x, relax.const(w)), z))
            out = bb.emit_output(bb.emit(relax.op.sigmoid(y)))
        bb.emit_func_output(out)
    mod = bb.get()
    assert count_ops(mod, "relax.matmul") == 2
    assert count_ops(rewrite.fold_constant_compute(mod), "relax.matmul") == 1
    assert count_ops(partition.prepare(mod), "relax.matmul") == 1
    xv = rng.standard_normal((1, 8)).astype(np.float32)
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(mod, report=report), xv)
    assert all(p.device == "npu" for p in report.placements), report.table()
    want = 1 / (1 + np.exp(-(xv @ w + np.full((1, 8), 0.5, np.float32) @ w)))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_column_split_of_a_dense_sum_becomes_one_dense_layer_per_part(rng):
    """split(x @ Wx + h @ Wh + b, 4, axis=-1), an LSTM step's gates as TVM's PyTorch frontend writes them:
    split_dense_columns takes each part's columns of the weights and bias, so the split is gone, there
    are two matmuls and two adds per part, and the values are TVM llvm's of the original."""
    w_x, w_h = (rng.standard_normal((n, 32)).astype(np.float32) for n in (5, 8))
    b = rng.standard_normal(32).astype(np.float32)
    bb = relax.BlockBuilder()
    x, h = relax.Var("x", relax.TensorType((1, 5), "float32")), relax.Var("h", relax.TensorType((1, 8), "float32"))
    with bb.function("main", [x, h]):
        with bb.dataflow():
            xw, hw = bb.emit(relax.op.matmul(x, relax.const(w_x))), bb.emit(relax.op.matmul(h, relax.const(w_h)))
            gates = bb.emit(
                relax.op.split(bb.emit(relax.op.add(bb.emit(relax.op.add(xw, hw)), relax.const(b))), 4, axis=-1)
            )
            parts = [bb.emit(relax.TupleGetItem(gates, k)) for k in range(4)]
            out = bb.emit_output(bb.emit(relax.op.concat(parts, axis=-1)))
        bb.emit_func_output(out)
    mod = bb.get()
    assert [count_ops(mod, op) for op in ("relax.split", "relax.matmul", "relax.add")] == [1, 2, 2]
    split = rewrite.split_dense_columns(mod)
    assert [count_ops(split, op) for op in ("relax.split", "relax.matmul", "relax.add")] == [0, 8, 8]
    args = [rng.standard_normal((1, 5)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)]
    np.testing.assert_allclose(run_cpu(split, *args), run_cpu(mod, *args), rtol=1e-5, atol=1e-5)


def _uint8_module():
    """x (float) quantized to uint8 and dequantized, plus a uint8 constant and a uint8 model input
    dequantized; the uint8 codes are also reshaped and returned (readers that need the uint8 bytes)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 16), "float32"))
    c = relax.Var("c", relax.TensorType((2, 16), "uint8"))
    s, z = relax.const(0.1, "float32"), relax.const(np.uint8(130))
    codes = np.random.default_rng(1).integers(0, 256, (2, 16)).astype(np.uint8)
    with bb.function("main", [x, c]):
        with bb.dataflow():
            q = bb.emit(relax.op.quantize(x, s, z, out_dtype="uint8"))
            a = bb.emit(relax.op.dequantize(q, s, z))
            w = bb.emit(
                relax.op.dequantize(relax.const(codes), relax.const(0.05, "float32"), relax.const(np.uint8(128)))
            )
            d = bb.emit(relax.op.dequantize(c, relax.const(0.2, "float32"), relax.const(np.uint8(100))))
            y = bb.emit(relax.op.add(relax.op.add(a, w), d))
            r = bb.emit(relax.op.reshape(q, (32,)))
            out = bb.emit_output(relax.Tuple([y, q, r]))
        bb.emit_func_output(out)
    return bb.get()


def test_uint8_qdq_becomes_int8_with_zero_point_minus_128_and_the_same_values():
    mod = _uint8_module()
    after = rewrite.uint8_as_int8(mod)

    def uint8_qdq(m):
        found = []
        relax.analysis.post_order_visit(
            m["main"],
            lambda e: (
                found.append(e)
                if relax_graph.op_name(e) in ("relax.quantize", "relax.dequantize")
                and "uint8" in (str(e.ty.dtype), str(e.args[0].ty.dtype))
                else None
            ),
        )
        return len(found)

    assert (uint8_qdq(mod), uint8_qdq(after)) == (4, 0)
    # The uint8 model input is shifted to int8 for its dequantize, the quantize's codes back to uint8 for
    # the reshape and the result: 2 shifts of 2 casts each.
    assert (count_ops(mod, "relax.astype"), count_ops(after, "relax.astype")) == (0, 4)
    rng = np.random.default_rng(2)
    for scale in (1.0, 30.0):  # 30: most of x beyond the codes' range, the clamps decide
        x = (rng.standard_normal((2, 16)) * scale).astype(np.float32)
        c = rng.integers(0, 256, (2, 16)).astype(np.uint8)
        for want, got in zip(run_cpu(mod, x, c), run_cpu(after, x, c)):
            assert want.dtype == got.dtype
            np.testing.assert_array_equal(want, got)
