"""Every form of ONNX's LSTM op, through tvm_npu.build, against onnxruntime: weights as initializers or
graph inputs, peepholes, the three directions, layout 1, clip, input_forget, activations with alpha and
beta, sequence_lens (constant full, constant shorter, a graph input), initial states present or absent,
and outputs used or not. Each form runs (its NPU share asserted from the build report, so a regression
that silently moves it to the CPU fails) and matches onnxruntime within the fp16 tolerance
rel err <= 1e-2 * max(1, max|ref|); TVM's llvm build of the same import matches it within 1e-5."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper, numpy_helper

import tvm_npu
from conftest import run_vm
from lstm_models import lstm_model, ort_run

H = 12  # hidden size: P [D, 3H], B [D, 8H]


def _peep(d: int) -> np.ndarray:
    return (np.random.default_rng(7).standard_normal((d, 3 * H)) * 0.5).astype(np.float32)


def as_inputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """The model with the initializers `names` moved to graph inputs (their values then fed at run time)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    keep = [t for t in model.graph.initializer if t.name not in names]
    moved = [t for t in model.graph.initializer if t.name in names]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    for t in moved:
        model.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return model


def without(model: onnx.ModelProto, inputs=(), outputs=()) -> onnx.ModelProto:
    """The model with the LSTM's graph inputs `inputs` left out (ONNX's default for them) and its outputs
    `outputs` unused (an empty name on the node, not a graph output)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    node = model.graph.node[0]
    for k, name in enumerate(node.input):
        if name in inputs:
            node.input[k] = ""
    for k, name in enumerate(node.output):
        if name in outputs:
            node.output[k] = ""
    kept_in = [i for i in model.graph.input if i.name not in inputs]
    kept_out = [o for o in model.graph.output if o.name not in outputs]
    del model.graph.input[:], model.graph.output[:]
    model.graph.input.extend(kept_in)
    model.graph.output.extend(kept_out)
    return model


def feeds_of(model: onnx.ModelProto, values: dict, seed=1) -> dict:
    """Seeded inputs; a moved initializer gets its own value (sequence_lens its int32 lengths)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = values[i.name] if i.name in values else rng.standard_normal(shape).astype(np.float32)
    return feeds


# id: (lstm_model kwargs, initializers moved to graph inputs, graph inputs left out, outputs unused,
#      ops every one of which the build must place on the NPU, ops every one of which stays on the CPU)
T, B = 5, 2
GATES = ("relax.matmul", "relax.sigmoid", "relax.tanh")  # the dense layers and the default activations
FORMS = {
    "initializers": (dict(), (), (), (), GATES, ()),
    "reverse": (dict(direction="reverse"), (), (), (), GATES, ()),
    "bidirectional": (dict(direction="bidirectional"), (), (), (), GATES, ()),
    "layout_1": (dict(layout=1, direction="bidirectional"), (), (), (), GATES, ()),
    "no_bias_no_state": (dict(bias=False, init=False), (), (), (), GATES, ()),
    "initial_h_only": (dict(), (), ("c0",), (), GATES, ()),
    "initial_c_only": (dict(), (), ("h0",), (), GATES, ()),
    # run-time weights: the NPU's dense layer takes a constant weight, so the matmuls run on the CPU
    "W_R_B_inputs": (dict(), ("W", "R", "B"), (), (), (), ("relax.matmul",)),
    "W_R_B_inputs_bidirectional": (dict(direction="bidirectional"), ("W", "R", "B"), (), (), (), ("relax.matmul",)),
    "R_input": (dict(), ("R",), (), (), (), ()),  # x W on the NPU, h R on the CPU
    "B_input": (dict(), ("B",), (), (), GATES, ()),
    "peepholes": (dict(extra_inputs=[(7, _peep(1))]), (), (), (), GATES + ("relax.multiply",), ()),
    "peepholes_bidirectional_zero_state": (
        dict(direction="bidirectional", init=False, extra_inputs=[(7, _peep(2))]),
        (),
        (),
        (),
        GATES + ("relax.multiply",),
        (),
    ),
    "peepholes_input": (dict(extra_inputs=[(7, _peep(1))]), ("in7",), (), (), GATES + ("relax.multiply",), ()),
    "clip": (dict(clip=0.5), (), (), (), GATES + ("relax.clip",), ()),
    "input_forget": (dict(input_forget=1), (), (), (), GATES + ("relax.multiply",), ()),
    "clip_input_forget_peepholes_reverse": (
        dict(direction="reverse", clip=0.7, input_forget=1, extra_inputs=[(7, _peep(1))]),
        (),
        (),
        (),
        GATES + ("relax.clip", "relax.multiply"),
        (),
    ),
    "activations_npu": (
        dict(activations=["Sigmoid", "LeakyRelu", "Tanh"], activation_alpha=[0.2]),
        (),
        (),
        (),
        GATES + ("relax.nn.leakyrelu",),
        (),
    ),
    "activations_cpu": (
        dict(activations=["Relu", "Elu", "Softsign"]),
        (),
        (),
        (),
        ("relax.matmul",),
        ("relax.exp", "relax.where", "relax.divide"),
    ),
    "activations_alpha_beta_bidirectional": (
        dict(
            direction="bidirectional",
            activations=["HardSigmoid", "Softplus", "Affine", "ThresholdedRelu", "ScaledTanh", "LeakyRelu"],
            activation_alpha=[0.3, 0.7, 0.1, 1.1],
            activation_beta=[0.4, 0.1, 0.9],
        ),
        (),
        (),
        (),
        ("relax.matmul", "relax.clip"),
        ("relax.log", "relax.where"),
    ),
    "sequence_lens_full": (dict(extra_inputs=[(4, np.array([T, T], np.int32))]), (), (), (), GATES, ()),
    "sequence_lens_shorter": (
        dict(extra_inputs=[(4, np.array([3, T], np.int32))]),
        (),
        (),
        (),
        GATES,
        ("relax.where",),
    ),
    "sequence_lens_zero_reverse": (
        dict(direction="reverse", extra_inputs=[(4, np.array([0, 2], np.int32))]),
        (),
        (),
        (),
        GATES,
        ("relax.where",),
    ),
    "sequence_lens_input_bidirectional": (
        dict(direction="bidirectional", init=False, extra_inputs=[(4, np.array([4, 1], np.int32))]),
        ("in4",),
        (),
        (),
        GATES,
        ("relax.where",),
    ),
    "Y_only": (dict(), (), (), ("Y_h", "Y_c"), GATES, ()),
    "Y_h_only": (dict(direction="bidirectional"), (), (), ("Y", "Y_c"), GATES, ()),
    "Y_c_only": (dict(), (), (), ("Y", "Y_h"), GATES, ()),
}


def _form(name):
    kw, moved, dropped, unused = FORMS[name][:4]
    kw = dict(dict(T=T, B=B, I=6, H=H, seed=3), **kw)
    model = without(as_inputs(lstm_model(**kw), moved), dropped, unused)
    values = {t.name: numpy_helper.to_array(t) for t in lstm_model(**kw).graph.initializer}
    feeds = feeds_of(model, values)
    if kw.get("layout", 0):
        # onnxruntime refuses layout 1: its layout-0 twin, with the inputs and outputs transposed
        twin = without(as_inputs(lstm_model(**dict(kw, layout=0)), moved), dropped, unused)
        tf = {k: (v.transpose(1, 0, 2) if k in ("X", "h0", "c0") else v) for k, v in feeds.items()}
        y, y_h, y_c = ort_run(twin, tf)
        want = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)]
    else:
        want = ort_run(model, feeds)
    return model, feeds, want


@pytest.mark.parametrize("name", list(FORMS))
def test_lstm_form_matches_onnxruntime(name):
    model, feeds, want = _form(name)
    assert max(float(np.abs(w).max()) for w in want) > 0.05  # a form whose outputs are all ~0 tests nothing
    args = [feeds[i.name] for i in model.graph.input]
    got = run_vm(tvm.compile(tvm_npu.from_onnx(model), target="llvm"), *args)
    got = got if isinstance(got, list) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    got = run_vm(ex, *args)
    got = got if isinstance(got, list) else [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-2 * max(1.0, float(np.abs(w).max())))
    # Where it ran: every op of `on_npu` on the NPU (and at least one of each), every op of `on_cpu` on
    # the CPU with a reason code, so a change that silently moves a form off the NPU fails here.
    on_npu, on_cpu = FORMS[name][4:]
    npu = Counter(p.op for p in report.placements if p.device == "npu")
    cpu = [p for p in report.placements if p.device == "cpu"]
    for op in on_npu:
        assert npu[op] > 0 and not [p for p in cpu if p.op == op], (op, [(p.var, p.code) for p in cpu if p.op == op])
    for op in on_cpu:
        assert not npu[op] and all(p.code.startswith("NPU_E_") for p in cpu if p.op == op), op
        assert any(p.op == op for p in cpu), op


def test_sequence_lens_input_out_of_range_is_a_coded_error_at_run_time():
    # onnxruntime refuses lengths outside [0, seq_length]; the unrolled recurrence would clamp them
    model, feeds, _ = _form("sequence_lens_input_bidirectional")
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    for lens in ([T + 1, 2], [3, -1]):
        args = [np.array(lens, np.int32) if i.name == "in4" else feeds[i.name] for i in model.graph.input]
        with pytest.raises(tvm_npu.NPUError, match=r"ERR_SHAPE_MISMATCH.*sequence_lens") as err:
            run_vm(ex, *args)
        assert err.value.code == "ERR_SHAPE_MISMATCH"


@pytest.mark.parametrize("lens", [[T + 1, 2], [-1, 2], [2]])
def test_constant_sequence_lens_out_of_range_is_refused(lens):
    with pytest.raises(tvm_npu.NPUError, match=r"ERR_INVALID_MODEL.*sequence_lens"):
        tvm_npu.from_onnx(lstm_model(T=T, B=B, extra_inputs=[(4, np.array(lens, np.int32))]))


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(activations=["Sigmoid", "Swish", "Tanh"]), "ERR_OP_NOT_SUPPORTED.*Swish"),
        (dict(activations=["Sigmoid", "Tanh"]), "ERR_INVALID_MODEL.*3 functions per direction"),
    ],
)
def test_bad_activations_are_refused_with_a_reason(kw, match):
    with pytest.raises(tvm_npu.NPUError, match=match):
        tvm_npu.from_onnx(lstm_model(**kw))
