"""onnxruntime's contrib ops (frontend/contrib): single-op and small-chain models built with onnx.helper,
imported and run through TVM's llvm build, against onnxruntime 1.32 on the same model (1e-5 relative);
the norms also through the NPU build (fp16 tolerance, 1e-2 x max(1, max|ref|)), checking where they ran.
Bad attributes are coded errors naming the node and the attribute."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import run_cpu, run_vm

MS = "com.microsoft"
OPSETS = [("", 17), (MS, 1)]


def _model(nodes, feeds: dict, outputs: dict, inits=(), opsets=OPSETS):
    """A model of `nodes` reading `feeds` (name -> array) and giving `outputs` (name -> shape), float32."""
    dtype = lambda a: helper.np_dtype_to_tensor_dtype(a.dtype)  # noqa: E731
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info(n, dtype(a), a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)


def _as_list(out):
    return out if isinstance(out, list) else [out]


def _check_cpu(model, feeds, rtol=1e-5):
    """TVM's llvm build of the import against onnxruntime; returns onnxruntime's outputs."""
    want = _ort(model, feeds)
    got = _as_list(run_cpu(tvm_npu.from_onnx(model), *feeds.values()))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))
    return want


def _check_npu(model, feeds, on_npu: str):
    """The NPU build within fp16's tolerance, with every `on_npu` op placed on the NPU."""
    want = _ort(model, feeds)
    report = tvm_npu.BuildReport()
    got = _as_list(run_vm(tvm_npu.build(tvm_npu.from_onnx(model), report=report), *feeds.values()))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-2 * max(1.0, float(np.abs(w).max())))
    placed = [p for p in report.placements if p.op == on_npu]
    assert placed and all(p.device == "npu" for p in placed), report.table()


def _coded(model, code, *words):
    with pytest.raises(tvm_npu.NPUError) as err:
        tvm_npu.from_onnx(model)
    assert err.value.code == code, str(err.value)
    for w in words:
        assert w in str(err.value), str(err.value)


def _rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# -- SimplifiedLayerNormalization (RMSNorm, ONNX's domain as onnxruntime-genai writes it) ------------------


def simplified_ln(shape, axis=-1, epsilon=1e-6, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    x = _rand(rng, *shape, scale=3.0)
    scale = rng.uniform(0.5, 1.5, shape[axis:]).astype(np.float32)
    node = helper.make_node(
        "SimplifiedLayerNormalization", ["X", "scale"], ["Y"], name="norm0", axis=axis, epsilon=epsilon, **attrs
    )
    return _model([node], {"X": x}, {"Y": shape}, [numpy_helper.from_array(scale, "scale")]), {"X": x}


@pytest.mark.parametrize("shape,axis", [((3, 64), -1), ((2, 5, 64), -1), ((2, 5, 48), 2), ((2, 4, 8), 1)])
def test_simplified_layer_normalization_matches_onnxruntime(shape, axis):
    model, feeds = simplified_ln(shape, axis)
    with pytest.raises(onnx.checker.ValidationError):  # why from_onnx needs the contrib checker handling
        onnx.checker.check_model(model)
    _check_cpu(model, feeds)


@pytest.mark.parametrize("shape", [(3, 64), (2, 5, 64)])
def test_simplified_layer_normalization_runs_on_the_npu(shape):
    model, feeds = simplified_ln(shape)
    _check_npu(model, feeds, "relax.nn.rms_norm")


def test_other_checker_failures_stay_invalid_models():
    """Only the registered contrib ops of ONNX's domain pass the checker: an unknown op beside them does not."""
    model, _ = simplified_ln((3, 64))
    model.graph.node.append(helper.make_node("NoSuchOp", ["Y"], ["Z"]))
    model.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, [3, 64]))
    _coded(model, "ERR_INVALID_MODEL", "NoSuchOp")


@pytest.mark.parametrize(
    "change,code,words",
    [
        (dict(stash_type=0), "ERR_OP_NOT_SUPPORTED", "stash_type=0"),
        (dict(unknown_attr=1), "ERR_OP_NOT_SUPPORTED", "'unknown_attr'"),
    ],
)
def test_simplified_layer_normalization_bad_attributes(change, code, words):
    model, _ = simplified_ln((3, 64), **change)
    _coded(model, code, words, "SimplifiedLayerNormalization node 'norm0'")


def test_inv_std_var_is_refused_when_read_and_dropped_when_not():
    model, feeds = simplified_ln((3, 64))
    model.graph.node[0].output.append("inv")
    _check_cpu(model, feeds)  # named, read by nothing
    model.graph.output.append(helper.make_tensor_value_info("inv", TensorProto.FLOAT, [3, 1]))
    _coded(model, "ERR_OP_NOT_SUPPORTED", "output 1 (inv_std_var 'inv')", "norm0")


# -- SkipLayerNormalization / SkipSimplifiedLayerNormalization ---------------------------------------------


def skip_norm(op, shape, skip_shape=None, beta=True, bias=True, outputs=("out", "", "", "sum"), seed=0):
    rng = np.random.default_rng(seed)
    hidden = shape[-1]
    feeds = {"x": _rand(rng, *shape, scale=2.0), "skip": _rand(rng, *(skip_shape or shape))}
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, hidden).astype(np.float32), "gamma")]
    names = ["x", "skip", "gamma"]
    if op == "SkipLayerNormalization":
        names.append("beta" if beta else "")
        if beta:
            inits.append(numpy_helper.from_array(_rand(rng, hidden), "beta"))
    if bias:
        names.append("bias")
        inits.append(numpy_helper.from_array(_rand(rng, hidden), "bias"))
    node = helper.make_node(op, names, list(outputs), name="skipnorm", domain=MS, epsilon=1e-5)
    return _model([node], feeds, {o: shape for o in outputs if o}, inits), feeds


SKIP_OPS = ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"]


@pytest.mark.parametrize("op", SKIP_OPS)
@pytest.mark.parametrize(
    "shape,skip_shape,beta,bias",
    [
        ((2, 5, 64), None, True, True),
        ((2, 5, 64), (5, 64), False, True),
        ((1, 7, 32), (1, 7, 32), True, False),
        ((2, 3, 48), (1, 3, 48), False, False),
    ],
)
def test_skip_norms_match_onnxruntime_with_the_residual(op, shape, skip_shape, beta, bias):
    model, feeds = skip_norm(op, shape, skip_shape, beta, bias)
    _check_cpu(model, feeds)


@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_norms_output_alone(op):
    model, feeds = skip_norm(op, (2, 5, 64), outputs=("out",))
    _check_cpu(model, feeds)


def test_skip_simplified_2d_tokens():
    model, feeds = skip_norm("SkipSimplifiedLayerNormalization", (7, 64))
    _check_cpu(model, feeds)


@pytest.mark.parametrize("op,norm", [(SKIP_OPS[0], "relax.nn.layer_norm"), (SKIP_OPS[1], "relax.nn.rms_norm")])
def test_skip_norms_run_on_the_npu(op, norm):
    model, feeds = skip_norm(op, (1, 6, 64))
    _check_npu(model, feeds, norm)


@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_norm_statistics_are_refused_when_read(op):
    model, feeds = skip_norm(op, (2, 5, 64), outputs=("out", "mean", "", "sum"))
    mean = model.graph.output[1]
    model.graph.output.remove(mean)
    _check_cpu(model, feeds)  # `mean` named, read by nothing: dropped
    model.graph.output.append(mean)
    _coded(model, "ERR_OP_NOT_SUPPORTED", "output 1 (mean 'mean')", "skipnorm")


def test_skip_norm_unknown_attribute_is_refused():
    model, _ = skip_norm(SKIP_OPS[1], (2, 5, 64))
    model.graph.node[0].attribute.append(helper.make_attribute("simplified", 1))
    _coded(model, "ERR_OP_NOT_SUPPORTED", "'simplified'", "SkipSimplifiedLayerNormalization node 'skipnorm'")
