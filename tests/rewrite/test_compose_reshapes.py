"""rewrite/compose_reshapes.py: diffusers' ResNet block adds its time embedding to the map as
`temb[:, :, None, None]`, two Unsqueezes that import as [N, C] -> [N, C, 1] -> [N, C, 1, 1]; the middle
shape moved data, so the first reshape ran on the CPU inside every ResNet block. Composed, the chain is
one free view and the block one NPU region, within 1e-2 of onnxruntime; the composition is bit-identical
on TVM's CPU build."""

import numpy as np
import onnxruntime as ort
import tvm
from onnx import TensorProto, helper, numpy_helper
from test_rewrite import count_ops

import tvm_npu
from tvm_npu import rewrite
from tvm_npu.ir import graph as relax_graph
from tvm_npu.ir.values import static_shape

C, T = 16, 32


def resnet_temb_model(extra_reader: bool = False):
    """conv(x) + Unsqueeze(Unsqueeze(Gemm(t))), the time embedding added per channel; `extra_reader`: the
    middle [1, C, 1] tensor is an output too (it must stay)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.1, "w")
    wt = numpy_helper.from_array(rng.standard_normal((T, C)).astype(np.float32) * 0.2, "wt")
    bt = numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "bt")
    axes = [numpy_helper.from_array(np.array(a, np.int64), n) for n, a in (("a2", [2]), ("a3", [3]))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("MatMul", ["t", "wt"], ["m"]),
        helper.make_node("Add", ["bt", "m"], ["e"]),
    ]
    nodes += [helper.make_node("Unsqueeze", ["e", "a2"], ["u1"]), helper.make_node("Unsqueeze", ["u1", "a3"], ["u2"])]
    nodes.append(helper.make_node("Add", ["c", "u2"], ["y"]))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 8, 8])]
    if extra_reader:
        outs.append(helper.make_tensor_value_info("u1", TensorProto.FLOAT, [1, C, 1]))
    graph = helper.make_graph(
        nodes,
        "temb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 8, 8]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, T])],
        outs,
        [w, wt, bt, *axes],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _inputs():
    rng = np.random.default_rng(1)
    return {
        "x": rng.standard_normal((1, C, 8, 8)).astype(np.float32),
        "t": rng.standard_normal((1, T)).astype(np.float32),
    }


def _run(ex, inputs):
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(inputs[k]) for k in ("x", "t")])
    return [o.numpy() for o in out] if not hasattr(out, "numpy") else [out.numpy()]


def test_two_unsqueezes_become_one_view_and_one_npu_region():
    model = resnet_temb_model()
    mod = tvm_npu.from_onnx(model)
    assert count_ops(mod, "relax.expand_dims") + count_ops(mod, "relax.reshape") == 2
    out = rewrite.run(mod)
    assert count_ops(out, "relax.reshape") == 1 and count_ops(out, "relax.expand_dims") == 0
    report = tvm_npu.BuildReport()
    got = _run(tvm_npu.build(mod, target="npu", report=report), _inputs())[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, _inputs())[0]
    assert np.abs(got - want).max() <= 1e-2 * max(1.0, np.abs(want).max())
    assert all(p.device == "npu" for p in report.placements), report.table()
    assert report.fallback_cost()["regions"] == 1


def test_the_composition_is_bit_identical_on_the_cpu():
    mod = tvm_npu.from_onnx(resnet_temb_model())
    before = _run(tvm.compile(mod, target="llvm"), _inputs())[0]
    after = _run(tvm.compile(rewrite.compose_reshapes(rewrite.views_as_reshape(mod)), target="llvm"), _inputs())[0]
    assert np.array_equal(before, after)


def test_a_middle_shape_another_op_reads_stays_for_it():
    mod = rewrite.views_as_reshape(tvm_npu.from_onnx(resnet_temb_model(extra_reader=True)))
    out = rewrite.compose_reshapes(mod)
    assert count_ops(out, "relax.reshape") == 2  # [1, C] -> [1, C, 1] kept for the output, plus the composed one
    g = relax_graph.Graph(out["main"])
    (four_d,) = [e for _, e in g.bindings if relax_graph.op_name(e) == "relax.reshape" and len(static_shape(e)) == 4]
    assert relax_graph.op_name(g.value.get(four_d.args[0])) == "relax.add"  # read from the embedding itself
    before, after = (_run(tvm.compile(m, target="llvm"), _inputs()) for m in (mod, out))
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
