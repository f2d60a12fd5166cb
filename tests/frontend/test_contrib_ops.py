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


def _model(nodes, feeds: dict, outputs: dict, inits=(), opsets=OPSETS, out_type=TensorProto.FLOAT):
    """A model of `nodes` reading `feeds` (name -> array) and giving `outputs` (name -> shape)."""
    dtype = lambda a: helper.np_dtype_to_tensor_dtype(a.dtype)  # noqa: E731
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info(n, dtype(a), a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, out_type, s) for n, s in outputs.items()],
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


def test_float16_norm_is_refused():
    model, _ = simplified_ln((3, 64))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(64, np.float16), "scale"))
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    _coded(model, "ERR_OP_NOT_SUPPORTED", "float16", "in float32", "norm0")


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


# -- RotaryEmbedding (com.microsoft) -------------------------------------------------------------------------


def rope(shape, interleaved=0, dim=0, heads=0, pos="ids", tables="const", max_pos=16, head=16, seed=0, **attrs):
    """A RotaryEmbedding model of input `shape` (3-D [B, S, N * H] or 4-D [B, N, S, H]) and its feeds."""
    rng = np.random.default_rng(seed)
    batch, seq = shape[0], shape[1] if len(shape) == 3 else shape[2]
    head = shape[-1] if len(shape) == 4 else shape[-1] // heads if heads else head
    half = (dim or head) // 2
    angles = np.arange(max_pos)[:, None] * rng.uniform(0.01, 1.0, half)[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    feeds = {"x": _rand(rng, *shape)}
    if pos == "ids":
        feeds["pos"] = rng.integers(0, max_pos, (batch, seq)).astype(np.int64)
    else:
        feeds["pos"] = np.array([pos], np.int64)  # the first position; then one per token
    inits = []
    if tables == "const":
        inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    else:
        feeds.update(cos=cos, sin=sin)
    attrs = dict(attrs, interleaved=interleaved)
    if dim:
        attrs["rotary_embedding_dim"] = dim
    if heads:
        attrs["num_heads"] = heads
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope0", domain=MS, **attrs)
    return _model([node], feeds, {"y": shape}, inits), feeds


@pytest.mark.parametrize(
    "shape,interleaved,dim,heads,pos,tables",
    [
        ((2, 5, 64), 0, 0, 4, "ids", "const"),  # 3-D, heads of 16, whole head
        ((2, 5, 64), 1, 0, 0, 3, "const"),  # interleaved, num_heads from the tables, positions 3..7
        ((1, 6, 96), 0, 8, 4, "ids", "const"),  # partial: 8 of each head's 24 features rotate
        ((2, 3, 64), 1, 12, 2, 0, "input"),  # partial, interleaved, tables computed at run time
        ((1, 3, 4, 32), 0, 0, 0, "ids", "const"),  # 4-D [B, N, S, H]
        ((2, 2, 5, 16), 1, 0, 2, 7, "const"),
        ((1, 3, 4, 32), 1, 16, 3, "ids", "input"),
        ((1, 2, 1, 64), 0, 32, 2, 11, "const"),  # one token (decode), half the head
    ],
)
def test_rotary_embedding_matches_onnxruntime(shape, interleaved, dim, heads, pos, tables):
    model, feeds = rope(shape, interleaved, dim, heads, pos, tables)
    want = _check_cpu(model, feeds)
    assert not np.allclose(want[0], feeds["x"], atol=1e-3)  # the rotation is not the identity here


@pytest.mark.parametrize(
    "change,code,words",
    [
        (dict(is_packed_batching=1), "ERR_OP_NOT_SUPPORTED", "is_packed_batching=1"),
        (dict(interleaved=2), "ERR_INVALID_MODEL", "interleaved=2"),
        (dict(heads=0, dim=8), "ERR_INVALID_MODEL", "needs num_heads"),
        (dict(dim=7), "ERR_OP_NOT_SUPPORTED", "rotary_embedding_dim 7"),  # odd
        (dict(max_pos=4), "ERR_OP_NOT_SUPPORTED", "tables of 4 positions"),
    ],
)
def test_rotary_embedding_bad_attributes(change, code, words):
    args = dict(shape=(2, 5, 64), heads=4)
    args.update(change)
    model, _ = rope(**args)
    _coded(model, code, words, "RotaryEmbedding node 'rope0'")


def test_onnx_domain_rotary_embedding_is_not_the_contrib_op():
    """ONNX's RotaryEmbedding (opset 23) reads (X, cos_cache, sin_cache, position_ids): never routed to
    com.microsoft's converter, whose inputs come in another order, but imported as ONNX's own
    (contrib/onnx_rotary_embedding.py), as onnxruntime computes it."""
    model, feeds = rope((2, 5, 64), heads=4)
    node = model.graph.node[0]
    node.domain = ""
    node.input[:] = ["x", "cos", "sin", "pos"]
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 23))
    _check_cpu(model, feeds)


# -- GatherBlockQuantized (com.microsoft) -------------------------------------------------------------------


def _pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes [..., n] -> bytes [..., ceil(n * bits / 8)], low bits first (numpy, not the importer's)."""
    per = 8 // bits
    pad = (-codes.shape[-1]) % per
    codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], pad), codes.dtype)], -1).astype(np.uint8)
    groups = codes.reshape(*codes.shape[:-1], -1, per)
    return sum(groups[..., i] << (i * bits) for i in range(per)).astype(np.uint8)


def gbq(shape, kind, block, bits=4, gather=0, quant=1, zp=True, index=((1, -2, 5), (40, 0, -100)), fp16=False, seed=0):
    """A GatherBlockQuantized model of a table of logical `shape` and its feeds (the index, at run time)."""
    rng = np.random.default_rng(seed)
    lo, hi = {"int4": (-8, 8), "uint4": (0, 16), "uint8": (0, 1 << bits)}[kind]
    codes = rng.integers(lo, hi, shape)
    blocks = list(shape)
    blocks[quant] = -(-shape[quant] // block)
    scale_type = np.float16 if fp16 else np.float32
    inits = [numpy_helper.from_array(rng.uniform(0.01, 0.1, blocks).astype(scale_type), "scales")]
    zeros = rng.integers(lo, hi, blocks)
    if kind == "uint8":
        inits.append(numpy_helper.from_array(_pack_bits(codes, bits), "data"))
        if zp:
            inits.append(numpy_helper.from_array(_pack_bits(zeros, bits), "zp"))
    else:
        onnx_type = TensorProto.INT4 if kind == "int4" else TensorProto.UINT4
        inits.append(helper.make_tensor("data", onnx_type, shape, codes.flatten().tolist()))
        if zp:
            inits.append(helper.make_tensor("zp", onnx_type, blocks, zeros.flatten().tolist()))
    index = np.array(index, np.int64)
    out_shape = list(shape[:gather]) + list(index.shape) + list(shape[gather + 1 :])
    node = helper.make_node(
        "GatherBlockQuantized",
        ["data", "idx", "scales"] + (["zp"] if zp else []),
        ["y"],
        name="embed0",
        domain=MS,
        bits=bits,
        block_size=block,
        gather_axis=gather,
        quantize_axis=quant,
    )
    out_type = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    return _model([node], {"idx": index}, {"y": out_shape}, inits, out_type=out_type), {"idx": index}


@pytest.mark.parametrize(
    "shape,kind,block,bits,gather,quant,zp,fp16",
    [
        ((48, 64), "int4", 16, 4, 0, 1, True, False),
        ((48, 64), "int4", 32, 4, 0, 1, False, False),  # default zero point 0
        ((48, 40), "uint4", 16, 4, 0, 1, True, False),  # a partial last block
        ((64, 48), "int4", 16, 4, 1, 0, True, False),  # gather columns, blocks down the rows
        ((3, 48, 32), "uint4", 16, 4, 1, 2, True, False),
        ((48, 64), "uint8", 32, 4, 0, 1, True, False),  # packed nibbles, packed zero points
        ((48, 96), "uint8", 64, 4, 0, 1, True, False),  # 2 blocks, the last partial; odd zero point bytes
        ((48, 64), "uint8", 16, 8, 0, 1, False, False),  # 8 bits, default zero point 128
        ((48, 64), "uint8", 16, 2, 0, 1, True, False),
        ((48, 64), "uint8", 32, 4, 0, 1, False, True),  # float16 scales and output, zero point 8
    ],
)
def test_gather_block_quantized_matches_onnxruntime(shape, kind, block, bits, gather, quant, zp, fp16):
    model, feeds = gbq(shape, kind, block, bits, gather, quant, zp, fp16=fp16)
    got = np.moveaxis(_check_cpu(model, feeds)[0], (gather, gather + 1), (0, 1))
    assert (got[1, 2] == 0).all() and got[0, 1].any()  # index -100 is out of range: zeros; -2 counts back


def test_gather_block_quantized_constant_indices():
    model, _ = gbq((48, 64), "int4", 32)
    idx = model.graph.input[0]
    model.graph.input.remove(idx)
    model.graph.initializer.append(numpy_helper.from_array(np.array([[3, -1], [0, 47]], np.int32), "idx"))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 64]))
    want = _ort(model, {})
    got = run_cpu(tvm_npu.from_onnx(model))
    np.testing.assert_allclose(got, want[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "change,code,words",
    [
        (dict(block=24), "ERR_INVALID_MODEL", "block_size 24"),
        (dict(kind="uint8", bits=3), "ERR_INVALID_MODEL", "bits 2, 4 or 8 (got 3)"),
        (dict(kind="int4", bits=8), "ERR_INVALID_MODEL", "bits 8"),
        (dict(kind="uint8", gather=1, quant=0), "ERR_INVALID_MODEL", "gather_axis 0"),
    ],
)
def test_gather_block_quantized_bad_attributes(change, code, words):
    args = dict(shape=(48, 64), kind="int4", block=16)
    args.update(change)
    if args["kind"] == "uint8" and args.get("bits", 4) == 3:
        args["bits"] = 4
        model, _ = gbq(**args)
        model.graph.node[0].attribute[0].i = 3
    else:
        model, _ = gbq(**args)
    _coded(model, code, words, "GatherBlockQuantized node 'embed0'")


def test_gather_block_quantized_float8_table_is_refused():
    model, _ = gbq((48, 64), "int4", 16, zp=False)
    data = model.graph.initializer[1]
    data.CopyFrom(helper.make_tensor("data", TensorProto.FLOAT8E4M3FN, [48, 64], np.zeros(48 * 64).tolist()))
    _coded(model, "ERR_OP_NOT_SUPPORTED", "FLOAT8E4M3FN", "embed0")


# -- MatMulNBits (com.microsoft; the converter is frontend/blockwise.py's) ---------------------------------


@pytest.mark.parametrize(
    "K,N,block,bits,zp,bias",
    [
        (32, 8, 16, 4, "packed", False),
        (48, 8, 16, 4, None, True),  # symmetric (zero point 8), K a multiple of 16, 3 blocks (odd zp bytes)
        (72, 8, 32, 4, "packed", True),  # K not a multiple of the block
        (128, 16, 64, 4, None, False),
        (200, 8, 128, 4, "packed", True),  # 2 blocks, the last 72 of 128
        (256, 8, 256, 4, "packed", False),
        (300, 8, 256, 4, None, True),
        (64, 8, 32, 4, "float", True),  # zero points of A's type
        (40, 8, 16, 8, "packed", False),  # 8 bits
        (96, 8, 64, 8, None, True),  # 8 bits symmetric (zero point 128), partial block
        (512, 8, 256, 8, "packed", True),
    ],
)
def test_matmul_nbits_block_sizes_bits_and_zero_points(K, N, block, bits, zp, bias):
    from test_blockwise import matmul_nbits  # the numpy packing of the format, independent of the importer

    model, weight = matmul_nbits(K, N, block, bits, zp, bias)
    x = np.random.default_rng(K).standard_normal((3, K)).astype(np.float32)
    want = _check_cpu(model, {"A": x}, rtol=2e-5)
    bias_value = numpy_helper.to_array(model.graph.initializer[-1]) if bias else 0
    scale = max(1.0, float(np.abs(want[0]).max()))
    np.testing.assert_allclose(x @ weight + bias_value, want[0], rtol=1e-5, atol=1e-5 * scale)  # the packing


def test_matmul_nbits_g_idx_and_prepacked_weights_are_refused():
    from test_blockwise import matmul_nbits

    model, _ = matmul_nbits(64, 8, 32)
    node = model.graph.node[0]
    node.input.append("g_idx")
    model.graph.initializer.append(numpy_helper.from_array(np.arange(64, dtype=np.int32) // 32, "g_idx"))
    _coded(model, "ERR_OP_NOT_SUPPORTED", "g_idx", "act order", "MatMulNBits node")
    model, _ = matmul_nbits(64, 8, 32)
    model.graph.node[0].attribute.append(helper.make_attribute("weight_prepacked", 1))
    _coded(model, "ERR_OP_NOT_SUPPORTED", "weight_prepacked=1", "MatMulNBits node")


# -- the table against onnxruntime's schemas; a genai-shaped chain -------------------------------------------


def test_every_entry_names_onnxruntime_s_schema_in_order():
    """Each contrib entry lists the attributes, inputs and outputs of onnxruntime's own schema (inputs and
    outputs in its order: check_model reads them by position), so a new onnxruntime attribute fails here."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    from tvm_npu.frontend.contrib import CONTRIB_OPS

    schemas = {(s.domain, s.name): s for s in C.get_all_operator_schema()}
    assert len(CONTRIB_OPS) >= 6
    for key, op in CONTRIB_OPS.items():
        schema = schemas[key]
        assert set(op.spec.attrs) == set(schema.attributes), key
        assert list(op.spec.inputs) == [i.name for i in schema.inputs], key
        assert list(op.spec.outputs) == [o.name for o in schema.outputs], key


def genai_block(seq=4, hidden=64, seed=0):
    """onnxruntime-genai's layer boundary in small: SimplifiedLayerNormalization (ONNX's domain) -> MatMul
    -> SkipSimplifiedLayerNormalization (the residual) -> MatMul -> a second one reading the first's sum."""
    rng = np.random.default_rng(seed)
    shapes = [(hidden,), (hidden, hidden), (hidden,), (hidden, hidden), (hidden,)]
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.2 + (len(s) == 1)).astype(np.float32), f"w{i}")
        for i, s in enumerate(shapes)
    ]
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "w0"], ["n0"], epsilon=1e-6),
        helper.make_node("MatMul", ["n0", "w1"], ["h1"]),
        helper.make_node("SkipSimplifiedLayerNormalization", ["h1", "x", "w2"], ["n1", "", "", "r1"], domain=MS),
        helper.make_node("MatMul", ["n1", "w3"], ["h2"]),
        helper.make_node("SkipSimplifiedLayerNormalization", ["h2", "r1", "w4"], ["y", "", "", "r2"], domain=MS),
    ]
    feeds = {"x": _rand(rng, 1, seq, hidden)}
    return _model(nodes, feeds, {"y": [1, seq, hidden], "r2": [1, seq, hidden]}, inits), feeds


def test_genai_shaped_chain_matches_onnxruntime_and_runs_its_norms_on_the_npu():
    model, feeds = genai_block()
    _check_cpu(model, feeds)
    _check_npu(model, feeds, "relax.nn.rms_norm")


def test_the_import_leaves_the_model_as_it_was():
    """The routing renames contrib nodes in place for TVM's importer and restores them."""
    model, _ = skip_norm(SKIP_OPS[1], (2, 5, 64), outputs=("out", "mean", "", "sum"))
    model.graph.output.remove(model.graph.output[1])  # `mean` named, read by nothing: dropped for TVM
    model.graph.node[0].name = ""
    before = model.SerializeToString()
    tvm_npu.from_onnx(model)
    assert model.SerializeToString() == before
    gbq_model, _ = gbq((48, 64), "int4", 16)
    gbq_model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((48, 3), np.float32), "scales"))
    before = gbq_model.SerializeToString()
    with pytest.raises(tvm_npu.NPUError, match="needs"):  # a failing import restores it too
        tvm_npu.from_onnx(gbq_model)
    assert gbq_model.SerializeToString() == before
