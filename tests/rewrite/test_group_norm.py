"""rewrite/fuse_group_norm.py: GroupNorm in each form an exporter writes it — (a) written out, (b)
InstanceNormalization on a [N, G, -1] reshape, (c) GroupNormalization-21 — becomes one layer_norm of
the grouped rows, only when the function is exactly GroupNorm; every model matches onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu import rewrite
from tvm_npu.rewrite import fuse_group_norm

N, C, H, W, G = 1, 32, 8, 8, 8
RNG = np.random.default_rng(0)
GAMMA = (1 + 0.1 * RNG.standard_normal((C, 1, 1))).astype(np.float32)
BETA = (0.1 * RNG.standard_normal((C, 1, 1))).astype(np.float32)
CONV_W = (0.1 * RNG.standard_normal((C, C, 3, 3))).astype(np.float32)
DECOMPOSED = ("relax.mean", "relax.variance", "relax.sqrt", "relax.divide", "relax.power", "relax.nn.group_norm")


def _model(nodes, inits, opset=17, dtype=np.float32, hw=H):
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    cast = {k: (v.astype(dtype) if v.dtype == np.float32 else v) for k, v in inits.items()}
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, (N, C, hw, hw))],
        [helper.make_tensor_value_info("y", elem, (N, C, hw, hw))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in cast.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _affine(src):
    return [helper.make_node("Mul", [src, "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]


VIEWS = {"s1": np.array([N, G, -1], np.int64), "s2": np.array([N, C, H, W], np.int64), "gamma": GAMMA, "beta": BETA}


def written_out(square="pow", axis=-1, eps_under_root=True, extra_use=False, dtype=np.float32, hw=H):
    """Form (a): Reshape -> ReduceMean -> Sub -> Pow -> ReduceMean -> Add eps -> Sqrt -> Div -> Reshape."""
    sq = (
        helper.make_node("Pow", ["d", "two"], ["sq"])
        if square == "pow"
        else helper.make_node("Mul", ["d", "d"], ["sq"])
    )
    root = (
        [helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"])]
        if eps_under_root  # a near miss: sqrt(var) + eps
        else [helper.make_node("Sqrt", ["v"], ["sv"]), helper.make_node("Add", ["sv", "eps"], ["sd"])]
    )
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[axis], keepdims=1),
        helper.make_node("Sub", ["r", "m"], ["d"]),
        sq,
        helper.make_node("ReduceMean", ["sq"], ["v"], axes=[axis], keepdims=1),
        *root,
        helper.make_node("Div", ["d", "sd"], ["n0" if extra_use else "n"]),
    ]
    if extra_use:  # the squares are read elsewhere too: the chain must stay
        nodes += [helper.make_node("ReduceMean", ["sq"], ["v2"], axes=[axis], keepdims=1)]
        nodes += [helper.make_node("Add", ["n0", "v2"], ["n"])]
    nodes += [helper.make_node("Reshape", ["n", "s2"], ["nb"])] + _affine("nb")
    inits = dict(VIEWS, two=np.float32(2), eps=np.float32(1e-5), s2=np.array([N, C, hw, hw], np.int64))
    return _model(nodes, inits, dtype=dtype, hw=hw)


def instance_norm(scale=1.0):
    """Form (b): torch's F.group_norm below opset 18."""
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["r"]),
        helper.make_node("InstanceNormalization", ["r", "scale", "bias"], ["n"], epsilon=1e-5),
        helper.make_node("Reshape", ["n", "s2"], ["nb"]),
    ] + _affine("nb")
    inits = dict(VIEWS, scale=np.full(G, scale, np.float32), bias=np.zeros(G, np.float32))
    return _model(nodes, inits)


def group_normalization(dtype=np.float32):
    """Form (c): GroupNormalization-21, per-channel scale and bias."""
    node = helper.make_node("GroupNormalization", ["x", "gamma", "beta"], ["y"], num_groups=G, epsilon=1e-5)
    return _model([node], {"gamma": GAMMA.reshape(C), "beta": BETA.reshape(C)}, opset=21, dtype=dtype)


def _check(model, tol, dtype=np.float32, report=None):
    """tvm_npu.build of `model` against onnxruntime on the same file, within tol * max(1, max|ref|)."""
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_vm(ex, x)
    assert np.abs(got.astype(np.float32) - ref).max() <= tol * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize(
    "model",
    [written_out(), written_out(square="mul"), written_out(axis=2), instance_norm(), group_normalization()],
    ids=["written_out_pow", "written_out_mul", "written_out_axis2", "instance_norm", "group_normalization"],
)
def test_each_form_becomes_one_layer_norm_of_grouped_rows(model):
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.layer_norm") == 1, mod
    for op in DECOMPOSED:
        assert count_ops(mod, op) == 0, op
    norm = [b.value for b in mod["main"].body.blocks[0].bindings if "layer_norm" in str(getattr(b.value, "op", ""))]
    assert [int(d) for d in norm[0].ty.shape] == [N, G, C // G * H * W]
    assert abs(float(norm[0].attrs.epsilon) - 1e-5) < 1e-12
    # TVM's float32 CPU build of the rewritten module: the rewrite changes no value beyond float32 rounding.
    x = (RNG.standard_normal((N, C, H, W)) * 3 + 1).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    _check(model, 1e-2)  # on the NPU (GN_STATS / GN_APPLY, fp16)


@pytest.mark.parametrize(
    "model",
    [
        written_out(eps_under_root=False),  # eps added after the root: another function
        written_out(axis=1),  # the means over the groups, not over each group's elements
        written_out(extra_use=True),  # an intermediate read elsewhere
        instance_norm(scale=2.0),  # a real per-group scale inside the instance norm
    ],
    ids=["eps_after_sqrt", "other_axis", "extra_use", "instance_scale"],
)
def test_a_near_miss_is_left_alone_and_still_matches(model):
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.layer_norm") == 0 and count_ops(mod, "relax.sqrt") == 1, mod
    _check(model, 1e-4)


def test_float16_is_left_alone_and_still_matches():
    """The NPU takes float32 tensors only: a float16 GroupNorm keeps its CPU chain as it was."""
    model = written_out(dtype=np.float16)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.layer_norm") == 0 and count_ops(mod, "relax.mean") == 2
    _check(model, 1e-2, dtype=np.float16)


def test_float16_group_normalization_is_rewritten_between_its_casts():
    """TVM imports a float16 GroupNormalization-21 as a float32 group_norm between two casts (stash_type
    1): that float32 norm is rewritten like any other, within fp16's 1e-2 of onnxruntime."""
    model = group_normalization(dtype=np.float16)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.layer_norm") == 1 and count_ops(mod, "relax.nn.group_norm") == 0, mod
    _check(model, 1e-2, dtype=np.float16)


def _block(with_group_norm_nodes, inits, opset=17):
    """Conv -> GroupNorm -> SiLU (Sigmoid, Mul) -> Conv, a diffusers resnet block's order."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["x0"], pads=[1, 1, 1, 1])]
    for node in with_group_norm_nodes:
        node.input[:] = ["x0" if i == "x" else i for i in node.input]
        node.output[:] = ["gn" if o == "y" else o for o in node.output]
        nodes.append(node)
    nodes += [helper.make_node("Sigmoid", ["gn"], ["s"]), helper.make_node("Mul", ["gn", "s"], ["act"])]
    nodes += [helper.make_node("Conv", ["act", "w1"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, dict(inits, w0=CONV_W, w1=CONV_W), opset=opset)


def test_group_norm_silu_conv_block_placement(monkeypatch):
    """The block's GroupNorm: 9 CPU ops between the two NPU regions before the rewrite; after it the whole
    block is one NPU region (the GroupNorm and its SiLU one npu.group_norm_silu layer, GN_STATS / GN_APPLY,
    format 1.7), within 1e-2 of onnxruntime."""
    nodes = list(written_out().graph.node)
    inits = {i.name: numpy_helper.to_array(i) for i in written_out().graph.initializer}
    model = _block(nodes, inits)
    after = tvm_npu.BuildReport()
    _check(model, 1e-2, report=after)
    monkeypatch.setattr(rewrite, "PASSES", tuple(p for p in rewrite.PASSES if p is not fuse_group_norm))
    before = tvm_npu.BuildReport()
    _check(model, 1e-2, report=before)
    cpu = lambda r: [(p.op, p.code) for p in r.placements if p.device == "cpu"]  # noqa: E731
    assert len(cpu(before)) == 9
    assert cpu(after) == [] and len(after.regions) == 1, after.table()
    on_npu = list(dict.fromkeys(p.composite for p in after.placements if p.device == "npu"))
    assert on_npu == ["npu.conv2d", "npu.group_norm_silu"]


@pytest.mark.parametrize("form", ["instance_norm", "group_normalization"])
def test_other_forms_in_the_block_run_on_the_npu_too(form):
    """Forms (b) and (c) in the block: on the NPU as (a); for (c) the per-channel Mul / Add after the
    import's group_norm(ones, zeros) are the layer's [C, 1, 1] gamma and beta."""
    source = instance_norm() if form == "instance_norm" else group_normalization()
    inits = {i.name: numpy_helper.to_array(i) for i in source.graph.initializer}
    model = _block(list(source.graph.node), inits, opset=source.opset_import[0].version)
    report = tvm_npu.BuildReport()
    _check(model, 1e-2, report=report)
    cpu = [p.op for p in report.placements if p.device == "cpu"]
    assert cpu == [] and len(report.regions) == 1, report.table()


def test_a_row_longer_than_max_width_is_rewritten_and_runs_as_group_norm():
    """32 x 32 pixels of 4 channels a group: rows of 4096 > max_width (2048) elements, which NORM does
    not take (it keeps one row's statistics); GN_STATS merges the statistics over row tiles, so the
    rewritten chain runs on the NPU as one npu.group_norm layer."""
    model = written_out(hw=32)
    assert count_ops(rewrite.run(tvm_npu.from_onnx(model)), "relax.nn.layer_norm") == 1
    report = tvm_npu.BuildReport()
    _check(model, 1e-2, report=report)
    norm = [p for p in report.placements if p.op == "relax.nn.layer_norm"]
    assert [(p.device, p.composite) for p in norm] == [("npu", "npu.group_norm")], report.table()
