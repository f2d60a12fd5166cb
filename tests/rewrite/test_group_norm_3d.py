"""rewrite/group_norm_forms/channels_by_length.py: GroupNorm of a 3-D [N, C, L] tensor (diffusers'
attention: the map viewed as [N, C, H * W], then group_norm) becomes the map's GroupNorm, then the view;
every model matches onnxruntime on the same file, on TVM's llvm build and on the NPU (one region)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from conftest import run_cpu, run_vm
from tvm_npu import rewrite

N, C, H, W, G = 1, 64, 4, 8, 8
L = H * W
RNG = np.random.default_rng(3)
GAMMA = (1 + 0.2 * RNG.standard_normal((C, 1))).astype(np.float32)
BETA = (0.2 * RNG.standard_normal((C, 1))).astype(np.float32)
PROJ = (RNG.standard_normal((C, C)) / 8).astype(np.float32)
DECOMPOSED = ("relax.mean", "relax.variance", "relax.sqrt", "relax.divide", "relax.power")


def _norm(form: str) -> list:
    """The grouped rows r -> n, written out (form a) or as an InstanceNormalization (form b)."""
    if form == "instance_norm":
        return [helper.make_node("InstanceNormalization", ["r", "scale", "bias"], ["n"], epsilon=1e-6)]
    return [
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["r", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
    ]


def model(form="written_out", from_map=True, beta_shape=(C, 1)):
    """x (a map [N, C, H, W] viewed as [N, C, L], or a 3-D input) -> GroupNorm of the 3-D tensor ->
    transpose to tokens -> a dense layer (the attention's projection)."""
    head = [helper.make_node("Reshape", ["x", "s0"], ["x3"])] if from_map else []
    nodes = head + [helper.make_node("Reshape", ["x3" if from_map else "x", "s1"], ["r"])] + _norm(form)
    nodes += [
        helper.make_node("Reshape", ["n", "s2"], ["nb"]),
        helper.make_node("Mul", ["nb", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["b"]),
        helper.make_node("Transpose", ["b"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "proj"], ["y"]),
    ]
    inits = {
        "s0": np.array([N, C, L], np.int64),
        "s1": np.array([N, G, -1], np.int64),
        "s2": np.array([N, C, L], np.int64),
        "two": np.float32(2),
        "eps": np.float32(1e-6),
        "scale": np.ones(G, np.float32),
        "bias": np.zeros(G, np.float32),
        "gamma": GAMMA,
        "beta": BETA.reshape(beta_shape),
        "proj": PROJ,
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (N, C, H, W) if from_map else (N, C, L))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (N, L, C))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ref(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _grouped_norms(mod) -> list:
    return [b.value for b in mod["main"].body.blocks[0].bindings if "layer_norm" in str(getattr(b.value, "op", ""))]


@pytest.mark.parametrize("form", ["written_out", "instance_norm"])
def test_a_3d_group_norm_of_a_map_runs_as_the_maps_group_norm_on_the_npu(form):
    m = model(form)
    mod = rewrite.run(tvm_npu.from_onnx(m))
    for op in DECOMPOSED:
        assert count_ops(mod, op) == 0, op
    norm = _grouped_norms(mod)
    assert len(norm) == 1 and [int(d) for d in norm[0].ty.shape] == [N, G, C // G * L]
    # normalized over the map itself: its affine multiplies a [N, C, H, W] map by [C, 1, 1] values
    muls = [b.value for b in mod["main"].body.blocks[0].bindings if "multiply" in str(getattr(b.value, "op", ""))]
    assert [[int(d) for d in v.ty.shape] for v in muls] == [[N, C, H, W]]
    x = (RNG.standard_normal((N, C, H, W)) * 3 + 1).astype(np.float32)
    ref = _ref(m, x)
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(m), report=report), x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
    assert [p.op for p in report.placements if p.device != "npu"] == [], report.table()
    assert report.fallback_cost()["regions"] == 1


def test_a_3d_group_norm_of_a_3d_input_is_the_group_norm_of_its_n_c_l_1_map():
    m = model(from_map=False)
    mod = rewrite.run(tvm_npu.from_onnx(m))
    assert len(_grouped_norms(mod)) == 1 and count_ops(mod, "relax.sqrt") == 0
    x = (RNG.standard_normal((N, C, L)) * 3 + 1).astype(np.float32)
    ref = _ref(m, x)
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(m)), x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())


def test_a_beta_along_the_length_is_not_per_channel_and_stays_outside():
    """beta [L] broadcasts along the last axis, not per channel: form (d) must not take it (form (a)
    still rewrites the normalization alone), and the values stay onnxruntime's."""
    bad = _bad_beta_model()
    mod = rewrite.run(tvm_npu.from_onnx(bad))
    muls = [b.value for b in mod["main"].body.blocks[0].bindings if "multiply" in str(getattr(b.value, "op", ""))]
    assert [[int(d) for d in v.ty.shape] for v in muls] == [[N, C, L]]  # the 3-D affine is left as it was
    x = (RNG.standard_normal((N, C, H, W)) * 3 + 1).astype(np.float32)
    ref = _ref(bad, x)
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def _bad_beta_model():
    m = model()
    for init in m.graph.initializer:
        if init.name == "beta":
            init.CopyFrom(numpy_helper.from_array((0.2 * RNG.standard_normal((L,))).astype(np.float32), "beta"))
    return m


def test_torch_group_norm_of_a_3d_view_matches_onnxruntime(tmp_path):
    """torch.nn.GroupNorm on x.view(N, C, H * W), exported by TorchScript (dynamo=False, opset 17)."""
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(G, C, eps=1e-6)
            with torch.no_grad():
                self.norm.weight.copy_(torch.from_numpy(GAMMA.reshape(C)))
                self.norm.bias.copy_(torch.from_numpy(BETA.reshape(C)))

        def forward(self, x):
            return self.norm(x.view(N, C, L)).transpose(1, 2)

    path = str(tmp_path / "gn3d.onnx")
    torch.onnx.export(Block(), (torch.zeros(N, C, H, W),), path, opset_version=17, dynamo=False)
    mod = rewrite.run(tvm_npu.from_onnx(path))
    assert len(_grouped_norms(mod)) == 1
    x = (RNG.standard_normal((N, C, H, W)) * 3 + 1).astype(np.float32)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert np.abs(run_cpu(mod, x) - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(tvm_npu.from_onnx(path), report=report), x)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
    assert report.fallback_cost()["regions"] == 1 and report.npu_ops == len(report.placements), report.table()
