"""The partition report: where every binding ran and why, MACs on each side, and the cost of the fallback
(NPU regions, bytes across the NPU/CPU boundaries, layout transposes); dynamic shapes; ONNX import
robustness. Expected numbers are computed here from the shapes, independently of report.py."""

import json

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper
from tvm import relax

import tvm_npu
from builders import chain, conv_layer, dense_layer
from conftest import npu_modules, run_cpu, run_vm
from tvm_npu.models import small_cnn

F32 = 4  # bytes of a float32 host tensor


def conv_macs(out_shape, w_shape, groups=1):
    n, oc, oh, ow = out_shape
    _, icg, kh, kw = w_shape
    return n * oc * oh * ow * icg * kh * kw


def conv_out(hw, k, stride, pad):
    return (hw + 2 * pad - k) // stride + 1


def summary_line(npu_ops, ops, npu_macs, total_macs):
    return f"{npu_ops} of {ops} ops, {100.0 * npu_macs / total_macs:.1f}% of MACs on the NPU"


def test_cpu_islands_cost_regions_boundary_bytes_and_transposes(rng):
    # conv (NPU) -> sin (CPU) -> conv (NPU) -> reshape across NCHW (CPU) -> dense (NPU)
    layers = [
        conv_layer(rng, 3, 8, 3),
        {"op": "cpu", "fn": "sin"},
        conv_layer(rng, 8, 8, 3),
        {"op": "cpu", "fn": "reshape", "shape": (1, 8 * 12 * 12)},
        dense_layer(rng, 8 * 12 * 12, 10),
    ]
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    mod = chain(x.shape, layers)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=3e-2, atol=3e-2)
    assert len(npu_modules(ex)) == 3
    cpu_rows = [p for p in report.placements if p.device == "cpu"]
    assert [(p.op, p.code) for p in cpu_rows] == [
        ("relax.sin", "NPU_E_UNSUPPORTED_OP"),
        # NCHW -> flat crosses the stored rows: data moves
        ("relax.reshape", "NPU_E_LAYOUT"),
    ]

    cost = report.fallback_cost()
    # One region would do if sin and the reshape ran on the NPU: both are islands, two regions extra.
    assert cost["regions"] == 3 and cost["extra_regions"] == 2
    islands = [p for p in report.placements if p.island]
    assert [(p.op, p.code) for p in islands] == [
        ("relax.sin", "NPU_E_UNSUPPORTED_OP"),
        ("relax.reshape", "NPU_E_LAYOUT"),
    ]
    fmap = 1 * 8 * 12 * 12 * F32  # every feature map between the regions
    # Host-form bytes in and out of each region: x in, fmap out | fmap in, fmap out | fmap in, logits out.
    expected = [(1 * 3 * 12 * 12 * F32, fmap), (fmap, fmap), (fmap, 1 * 10 * F32)]
    alias = report.aliases()
    by_alias = {alias[s]: b for s, b in report.boundaries.items()}
    assert [(by_alias[f"npu{i}"]["input_bytes"], by_alias[f"npu{i}"]["output_bytes"]) for i in range(3)] == expected
    assert cost["boundary_bytes"] == sum(a + b for a, b in expected)
    # Each island reads one feature map from a region and writes one to the next.
    assert [p.boundary_bytes for p in islands] == [2 * fmap, 2 * fmap]
    # NCHW tensors with C > 1 and H*W > 1 are transposed at the boundary: the two conv regions' input
    # and output (4); the dense region's [1, 1152] input and [1, 10] output need none.
    assert cost["boundary_transposes"] == 4
    by_region = {alias[s]: r["boundary_transposes"] for s, r in report.regions.items()}
    assert by_region == {"npu0": 2, "npu1": 2, "npu2": 0}

    macs = [conv_macs((1, 8, 12, 12), (8, 3, 3, 3)), conv_macs((1, 8, 12, 12), (8, 8, 3, 3)), 1 * 10 * 1152]
    assert [p.macs for p in report.placements if p.macs] == macs
    assert report.summary() == summary_line(8, 10, sum(macs), sum(macs))
    table = report.table()
    assert report.summary() in table and "NPU regions: 3 (2 extra" in table
    assert f"boundary bytes (host form): {cost['boundary_bytes']}" in table
    # The NPU's own MAC count (cost model of the compiled regions) agrees with the Relax shapes.
    assert sum(r["macs"] for r in report.regions.values()) == sum(macs)


def test_macs_of_cpu_convolutions_and_matmuls_count_in_the_summary(rng):
    """A stride-3 conv and a matmul of two run-time tensors stay on the CPU; their MACs count."""
    w1 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 20, 20), "float32"))
    m = relax.Var("m", relax.TensorType((16, 6), "float32"))
    with bb.function("main", [x, m]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, relax.const(w1), strides=3, padding=1))  # CPU: stride
            b = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(a, relax.const(w2), padding=1)))  # NPU
            c = bb.emit(relax.op.reshape(b, (16, 49)))  # CPU: crosses NCHW
            d = bb.emit(relax.op.matmul(relax.op.permute_dims(m), c))  # CPU: no constant weight
            out = bb.emit_output(d)
        bb.emit_func_output(out)
    mod = bb.get()
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    xs = rng.standard_normal((1, 4, 20, 20)).astype(np.float32)
    ms = rng.standard_normal((16, 6)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, xs, ms), run_cpu(mod, xs, ms), rtol=3e-2, atol=3e-1)

    hw = conv_out(20, 3, 3, 1)  # 7
    cpu_conv = conv_macs((1, 8, hw, hw), w1.shape)
    npu_conv = conv_macs((1, 16, hw, hw), w2.shape)
    cpu_matmul = 6 * 49 * 16
    rows = {p.op: p for p in report.placements if p.op in ("relax.nn.conv2d", "relax.matmul") and p.device == "cpu"}
    assert rows["relax.nn.conv2d"].code == "NPU_E_STRIDE" and rows["relax.nn.conv2d"].macs == cpu_conv
    assert rows["relax.matmul"].macs == cpu_matmul
    assert report.macs() == {"npu": npu_conv, "cpu": cpu_conv + cpu_matmul, "unknown_ops": 0}
    npu_ops = sum(p.device == "npu" for p in report.placements)
    assert npu_ops == 2  # the conv and its relu
    assert report.summary() == summary_line(2, len(report.placements), npu_conv, npu_conv + cpu_conv + cpu_matmul)
    # The conv region sits between CPU ops but not between two regions: no island, no extra region.
    assert report.fallback_cost()["extra_regions"] == 0 and not any(p.island for p in report.placements)
    (b,) = report.boundaries.values()
    assert b["input_bytes"] == 1 * 8 * hw * hw * F32 and b["output_bytes"] == 1 * 16 * hw * hw * F32


def test_write_json_and_table(rng, tmp_path):
    mod = chain((1, 3, 8, 8), [conv_layer(rng, 3, 4, 3), {"op": "cpu", "fn": "sin"}])
    report = tvm_npu.BuildReport()
    tvm_npu.build(mod, report=report)
    js, txt = report.write(tmp_path / "out" / "model.report")
    assert js == tmp_path / "out" / "model.report.json" and txt.name == "model.report.txt"
    data = json.loads(js.read_text())
    assert data == json.loads(json.dumps(report.to_dict()))
    assert data["summary"] == report.summary() == "3 of 4 ops, 100.0% of MACs on the NPU"
    rows = data["placements"]
    assert [(r["op"], r["device"], r["code"]) for r in rows][-1] == ("relax.sin", "cpu", "NPU_E_UNSUPPORTED_OP")
    assert rows[0]["composite"] == "npu.conv2d_bias_relu" and rows[0]["macs"] == 1 * 4 * 8 * 8 * 27
    assert data["fallback"]["boundary_bytes"] == (1 * 3 * 8 * 8 + 1 * 4 * 8 * 8) * F32
    assert txt.read_text() == report.table() + "\n"


def test_symbolic_batch_stays_on_the_cpu_and_runs(rng):
    n = tvm.ir.Var("n", "int64")  # a symbolic dimension
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([n, 3, 16, 16], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w), padding=1)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)  # never fails because of the symbolic batch
    assert npu_modules(ex) == []
    conv = [p for p in report.placements if p.op == "relax.nn.conv2d"][0]
    assert conv.device == "cpu" and conv.code == "NPU_E_DYNAMIC_SHAPE", report.table()
    assert conv.macs is None and report.macs()["unknown_ops"] == 1
    assert "NPU_E_DYNAMIC_SHAPE" in report.table() and "symbolic shapes" in report.table()
    cpu_ex = tvm.compile(mod, target="llvm")
    for batch in (1, 3):
        xs = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        out = run_vm(ex, xs)
        assert out.shape == (batch, 8, 16, 16)
        np.testing.assert_allclose(out, run_vm(cpu_ex, xs), rtol=1e-5, atol=1e-5)


def _with_initializers_as_inputs(model):
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for init in model.graph.initializer:
        model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return model


def test_initializers_listed_as_inputs_are_constants_on_the_npu():
    import onnxruntime as ort

    model = _with_initializers_as_inputs(small_cnn(3))
    assert len(model.graph.input) == 1 + len(model.graph.initializer)
    assert [i.name for i in tvm_npu.frontend.onnx.initializers_as_constants(model).graph.input] == ["input"]
    mod = tvm_npu.from_onnx(model)
    assert [p.name for p in mod["main"].params] == ["input"]  # no weight became a run-time input
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    convs = [p for p in report.placements if p.op in ("relax.nn.conv2d", "relax.matmul")]
    assert len(convs) == 5 and all(p.device == "npu" for p in convs), report.table()
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )[0]
    out = run_vm(ex, x)
    np.testing.assert_allclose(out, expected, rtol=1e-2, atol=1e-3)
    assert out.argmax() == expected.argmax()


@pytest.mark.parametrize("cut", ["garbage", "half", "header"])
def test_malformed_onnx_bytes_are_an_invalid_model(cut):
    data = small_cnn(0).SerializeToString()
    data = {"garbage": b"\xff\x00not an onnx model", "half": data[: len(data) // 2], "header": data[:40]}[cut]
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.from_onnx(data)
    assert info.value.code == "ERR_INVALID_MODEL"


def test_truncated_onnx_file_is_an_invalid_model(tmp_path):
    data = small_cnn(0).SerializeToString()
    path = tmp_path / "model.onnx"
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.from_onnx(str(path))
    assert info.value.code == "ERR_INVALID_MODEL"
