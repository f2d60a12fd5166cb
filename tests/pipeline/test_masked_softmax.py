"""Attention's masked softmax on the NPU (SOFTMAX format 1.4: softmax(scores * scale + mask), docs/npu.md
section 2): Relax and ONNX models against TVM's llvm build, with the placements asserted, and the masks
the NPU cannot reproduce exactly staying on the CPU with NPU_E_MASK."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from builders import module_of as module
from conftest import npu_modules, run_cpu, run_vm
from tvm_npu.contract import stream
from tvm_npu.partition import transformer_constraints as C

H, T, D = 4, 8, 16


def causal(t, value=-np.inf):
    return np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], 0.0, value).astype(np.float32)


def attention(w, mask, scale=0.25, op=relax.op.multiply):
    """softmax(op(x @ w, scale) + mask): the scores come from a dense on the NPU (a softmax of a model
    input stays on the CPU, NPU_E_RANGE)."""

    def fn(x):
        s = relax.op.matmul(x, relax.const(w))
        if scale is not None:
            s = op(s, relax.const(np.float32(scale)))
        return relax.op.nn.softmax(relax.op.add(s, relax.const(mask)) if mask is not None else s, axis=-1)

    return fn


def build(mod):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, report=report), report


def softmax_commands(ex):
    (m,) = npu_modules(ex)
    s = stream.decode(bytes(m["get_stream"]()))
    return s, [c for c in s.commands if c.op == "SOFTMAX"]


def close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-2 * max(1.0, float(np.nanmax(np.abs(ref)))))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))


@pytest.mark.parametrize(
    "mask, scale, op",
    [
        (causal(T), 0.25, relax.op.multiply),  # prefill: [T, T] causal
        (causal(T)[None], 4.0, relax.op.divide),  # [1, T, T]; / sqrt(d) as TVM imports it
        (causal(T, -1e9), 0.25, relax.op.multiply),  # a large finite negative, read as -inf
        (causal(T, np.finfo(np.float32).min), None, None),  # mask alone, float32's lowest
        (np.where(np.arange(T) < 5, 0, -np.inf).astype(np.float32)[None], 0.125, relax.op.multiply),  # [1, T]
    ],
)
def test_causal_attention_probabilities_on_the_npu(rng, mask, scale, op):
    w = rng.standard_normal((D, T)).astype(np.float32)
    mod = module(attention(w, mask, scale, op), [(H, T, D)])
    ex, report = build(mod)
    placed = [p.composite for p in report.placements]
    assert placed == ["npu.dense"] + ["npu.softmax_masked"] * (2 if scale is None else 3), report.table()
    assert all(p.device == "npu" for p in report.placements), report.table()
    s, (cmd, *_) = softmax_commands(ex)
    assert s.version == (1, 4) and cmd.args["mask_rows"] == mask.shape[-2]
    x = rng.standard_normal((H, T, D)).astype(np.float32)
    out, ref = run_vm(ex, x), run_cpu(mod, x)
    close(out, ref)
    hidden = np.broadcast_to(mask < -65504, out.shape)
    assert (out[hidden] == 0).all()  # exp(-inf) = 0 exactly, as exp(-1e9) is in float32


def test_decode_row_mask_and_tiles_that_start_mid_period(rng):
    """A [1, T] decode mask (positions past p hidden) over 48 heads: the planner tiles the rows and each
    tile's mask_row0 picks its first mask row."""
    t = 96
    mask = np.where(np.arange(t) <= 40, 0.0, -np.inf).astype(np.float32)[None]
    w = rng.standard_normal((D, t)).astype(np.float32)
    mod = module(attention(w, mask, 0.25), [(48, 1, D)])
    ex, report = build(mod)
    assert report.placements[-1].composite == "npu.softmax_masked", report.table()
    x = rng.standard_normal((48, 1, D)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))


def test_query_rows_tiled_mid_mask(rng):
    """[12, 40, 40] causal scores: tiles of rows that start inside the 40-row period of the mask."""
    t = 40
    w = rng.standard_normal((D, t)).astype(np.float32)
    mod = module(attention(w, causal(t), 0.25), [(12, t, D)])
    ex, report = build(mod)
    assert report.placements[-1].composite == "npu.softmax_masked", report.table()
    x = rng.standard_normal((12, t, D)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))
    _, cmds = softmax_commands(ex)
    assert all(c.args["mask_row0"] == 0 for c in cmds) or len({c.args["mask_row0"] for c in cmds}) > 1


def test_fully_masked_row_is_nan_on_both_sides(rng):
    mask = causal(T)
    mask[3] = -np.inf  # query 3 sees nothing: NaN in TVM, NaN on the NPU
    w = rng.standard_normal((D, T)).astype(np.float32)
    mod = module(attention(w, mask), [(H, T, D)])
    ex, report = build(mod)
    assert report.placements[-1].composite == "npu.softmax_masked", report.table()
    x = rng.standard_normal((H, T, D)).astype(np.float32)
    out = run_vm(ex, x)
    close(out, run_cpu(mod, x))
    assert np.isnan(out[:, 3]).all() and not np.isnan(np.delete(out, 3, axis=1)).any()


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda m: m.__setitem__(3, -1e9), "row 3 hides every element"),  # TVM: uniform, NPU would be NaN
        (lambda m: m.__setitem__((2, 0), 100.1), "100.1"),  # not exact in fp16, too large to round
        (lambda m: m.__setitem__((2, 0), -70000.0), "-70000"),  # neither hidden nor in fp16 range
        (lambda m: m.__setitem__((2, 0), np.nan), "NaN"),
        (lambda m: m.__setitem__(m < 0, 0.5), "hides no element"),  # a bias: the dense before keeps it
    ],
)
def test_masks_the_npu_cannot_reproduce_stay_on_cpu(rng, edit, why):
    mask = causal(T, -1e9)
    edit(mask)
    w = rng.standard_normal((D, T)).astype(np.float32)
    mod = module(attention(w, mask), [(H, T, D)])
    assert why in C.constraint_softmax_mask(relax.const(mask), (H, T, T), 0.25, (H, T, T))
    ex, report = build(mod)
    assert "npu.softmax_masked" not in [p.composite for p in report.placements], report.table()
    x = rng.standard_normal((H, T, D)).astype(np.float32)
    out, ref = run_vm(ex, x), run_cpu(mod, x)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-2)


def test_masked_softmax_of_a_model_input_stays_on_cpu(rng):
    mod = module(lambda x: relax.op.nn.softmax(relax.op.add(x, relax.const(causal(T))), axis=-1), [(H, T, T)])
    ex, report = build(mod)
    # The masked form refuses it (NPU_E_RANGE); the add alone cannot broadcast the mask, and the softmax
    # alone then is too small a region (the reasons the table shows).
    assert [p.device for p in report.placements] == ["cpu", "cpu"] and not npu_modules(ex), report.table()
    x = rng.standard_normal((H, T, T)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-6)


def test_onnx_scaled_dot_product_attention_probabilities(rng):
    """Q @ K^T / sqrt(d) + causal mask -> Softmax, as an ONNX exporter writes it (3-D: heads first)."""
    k = rng.standard_normal((D, T)).astype(np.float32)
    inits = [
        numpy_helper.from_array(k, "kt"),
        numpy_helper.from_array(np.array(np.sqrt(D), np.float32), "sqrt_d"),
        numpy_helper.from_array(causal(T, np.finfo(np.float32).min), "mask"),
    ]
    nodes = [
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Div", ["s", "sqrt_d"], ["sd"]),
        helper.make_node("Add", ["sd", "mask"], ["z"]),
        helper.make_node("Softmax", ["z"], ["p"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "sdpa",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [H, T, D])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [H, T, T])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    mod = tvm_npu.from_onnx(model)
    ex, report = build(mod)
    assert [p.composite for p in report.placements] == ["npu.dense"] + ["npu.softmax_masked"] * 3, report.table()
    import onnxruntime as ort

    q = rng.standard_normal((H, T, D)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"q": q})[0]
    close(run_vm(ex, q), ref)


def test_a_dense_bias_before_a_softmax_stays_the_dense_bias(rng):
    """softmax(x @ w + b): b hides nothing, so it is the dense's bias, not a mask; the stream stays the
    1.3 one it was (a masked SOFTMAX took the bias before NPU_E_MASK asked for a hidden element)."""
    w = rng.standard_normal((D, T)).astype(np.float32)
    b = rng.standard_normal(T).astype(np.float32)
    mod = module(
        lambda x: relax.op.nn.softmax(relax.op.add(relax.op.matmul(x, relax.const(w)), relax.const(b))), [(6, D)]
    )
    ex, report = build(mod)
    placed = [p.composite for p in report.placements]
    assert placed == ["npu.dense_bias"] * 2 + ["npu.softmax"], report.table()
    s, (cmd,) = softmax_commands(ex)
    assert s.version == (1, 3) and cmd.args.get("mask_rows", 0) == 0
    x = rng.standard_normal((6, D)).astype(np.float32)
    close(run_vm(ex, x), run_cpu(mod, x))
