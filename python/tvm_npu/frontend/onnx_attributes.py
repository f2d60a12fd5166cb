"""The ONNX side of the attribute table: for every ONNX op whose import the NPU's pattern table claims,
what happens to each attribute, optional input and optional output of every version of its schema.

Each entry is one of three kinds:
- becomes: it is carried into the Relax op (attribute or argument) named, whose entry in
  partition/attributes.py says which values run on the NPU and which constraint refuses the others;
- import: the importer consumes it, exactly (auto_pad becomes explicit padding, epsilon is folded),
  and `how` says how;
- refused: the importer (TVM's, or tvm_npu's own) cannot give its meaning for some values; a node with
  such a value stops the import with ERR_OP_NOT_SUPPORTED (`refuse(value)` says which values).

`check_model` applies the refusals before TVM's importer runs; tests/partition/test_attribute_completeness.py
fails when a schema has an attribute or optional input that no entry names. onnxruntime's contrib ops
keep their entries beside their converters (frontend/contrib), checked against onnxruntime's schemas by
tests/frontend/test_contrib_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx
from onnx import helper

from ..contract.errors import NPUError


@dataclass(frozen=True)
class Handling:
    how: str
    becomes: tuple = ()  # (relax op, attribute or argument name) it is carried into
    refuse: Callable | None = None  # value -> True when the import refuses it
    code: str = "ERR_OP_NOT_SUPPORTED"  # the error a refused value raises (ERR_INVALID_MODEL: no meaning)


def becomes(op: str, name: str, how: str = "") -> Handling:
    return Handling(how, becomes=(op, name))


def imported(how: str) -> Handling:
    return Handling(how)


def refused(how: str, when: Callable = lambda value: True, code: str = "ERR_OP_NOT_SUPPORTED") -> Handling:
    return Handling(how, refuse=when, code=code)


@dataclass(frozen=True)
class OnnxOp:
    relax: tuple  # the claimed Relax ops it imports to
    attrs: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)  # optional inputs
    outputs: dict = field(default_factory=dict)  # optional outputs


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# Attributes of opsets before 7 (ONNX Runtime's oldest): no effect on the values, or a broadcast
# convention TVM's converters do not implement.
LEGACY_HINT = imported("ignored: a memory-reuse hint of opset 1 with no effect on the values")
_ELEMENTWISE = {
    "consumed_inputs": LEGACY_HINT,
    "axis": imported("opset < 7: meaningful only with broadcast=1, which is refused"),
    "broadcast": refused("opset < 7 broadcast=1: refused (TVM broadcasts the numpy way)", lambda v: v != 0),
}
_HINT = {"consumed_inputs": LEGACY_HINT}

_SAME_PADS = (
    "NOTSET and VALID as given; SAME_UPPER / SAME_LOWER become explicit padding computed as ONNX "
    "defines it (output = ceil(input / stride); the odd pixel after, resp. before)"
)
_CONV = "relax.nn.conv2d"
_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
_RESIZE = "relax.image.resize2d"


def _pool(op: str, avg: bool) -> OnnxOp:
    attrs = {
        "auto_pad": imported(_SAME_PADS),
        "ceil_mode": becomes(op, "ceil_mode"),
        "dilations": becomes(op, "dilation"),
        "kernel_shape": becomes(op, "pool_size"),
        "pads": becomes(op, "padding"),
        "strides": becomes(op, "strides"),
    }
    outputs = {}
    if avg:
        attrs["count_include_pad"] = becomes(op, "count_include_pad")
    else:
        attrs["storage_order"] = imported("no effect on Y: it orders only the Indices output, which is refused")
        outputs["Indices"] = refused("refused: TVM's importer gives MaxPool one output")
    return OnnxOp((op,), attrs, outputs=outputs)


_QUANT_DTYPE = "the zero point's dtype; int8 (or uint8) runs on the NPU, other dtypes on the CPU"

ONNX_OPS: dict[str, OnnxOp] = {
    "Conv": OnnxOp(
        (_CONV,),
        {
            "auto_pad": imported(_SAME_PADS + " (a SAME pad runs before the convolution, on the CPU)"),
            "dilations": becomes(_CONV, "dilation"),
            "group": becomes(_CONV, "groups"),
            "kernel_shape": imported("must equal W's spatial shape (else ERR_INVALID_MODEL); the kernel is W's"),
            "pads": becomes(_CONV, "padding"),
            "strides": becomes(_CONV, "strides"),
        },
        {"B": becomes("relax.add", "bias", "a fused per-channel bias (NPU_E_BIAS)")},
    ),
    "Gemm": OnnxOp(
        ("relax.matmul",),
        {
            "alpha": imported("alpha != 1 multiplies A first (an elementwise multiply by a scalar)"),
            "beta": imported("beta != 1 multiplies C first (folded: C is constant)"),
            "transA": imported("a transpose of A before the matmul (on the CPU)"),
            "transB": becomes("relax.permute_dims", "axes", "a transpose of the weight, applied at compile time"),
            "broadcast": imported("opset < 7: no effect on a valid model (C broadcasts the numpy way)"),
        },
        {"C": becomes("relax.add", "bias", "a fused bias when per-output-column, else an elementwise add")},
    ),
    "MatMul": OnnxOp(("relax.matmul",)),
    "Add": OnnxOp(("relax.add",), _ELEMENTWISE),
    "Sub": OnnxOp(("relax.subtract",), _ELEMENTWISE),
    "Mul": OnnxOp(("relax.multiply",), _ELEMENTWISE),
    "Max": OnnxOp(("relax.maximum",), _HINT),
    "Min": OnnxOp(("relax.minimum",), _HINT),
    "Relu": OnnxOp(("relax.nn.relu",), _HINT),
    "Neg": OnnxOp(("relax.negative",), _HINT),
    "Clip": OnnxOp(
        ("relax.clip",),
        {
            "consumed_inputs": LEGACY_HINT,
            "min": imported("opset < 11: a maximum on the CPU (not fused)"),
            "max": imported("opset < 11: a minimum on the CPU (not fused)"),
        },
        {
            "min": becomes("relax.clip", "min", "`relax.clip` min; absent: the float32 minimum"),
            "max": becomes("relax.clip", "max", "`relax.clip` max; absent: the float32 maximum"),
        },
    ),
    # x * Sigmoid(x), torch's SiLU export, becomes relax.nn.silu (rewrite/fuse_silu.py).
    "Sigmoid": OnnxOp(("relax.sigmoid", "relax.nn.silu"), _HINT),
    "Tanh": OnnxOp(("relax.tanh",), _HINT),
    "Gelu": OnnxOp(
        ("relax.nn.gelu", "relax.nn.gelu_tanh"),
        {"approximate": imported("none: `relax.nn.gelu`; tanh: `relax.nn.gelu_tanh` (both NPU)")},
    ),
    "LeakyRelu": OnnxOp(("relax.nn.leakyrelu",), {"alpha": becomes("relax.nn.leakyrelu", "alpha"), **_HINT}),
    "HardSwish": OnnxOp(("relax.multiply", "relax.divide", "relax.clip")),
    "HardSigmoid": OnnxOp(
        ("relax.multiply", "relax.add", "relax.clip"),
        {
            "alpha": imported("clip(alpha * x + beta, 0, 1): a scalar multiply"),
            "beta": imported("clip(alpha * x + beta, 0, 1): a scalar add"),
            **_HINT,
        },
    ),
    "Softmax": OnnxOp(
        ("relax.nn.softmax",),
        {"axis": becomes("relax.nn.softmax", "axis", "opset < 13: a softmax over the last axis of the 2-D view")},
    ),
    "LayerNormalization": OnnxOp(
        ("relax.nn.layer_norm",),
        {
            "axis": becomes("relax.nn.layer_norm", "axes", "from axis to the last dimension"),
            "epsilon": becomes("relax.nn.layer_norm", "epsilon"),
            "stash_type": imported(
                "ignored: TVM computes in the input's dtype; for float32 models that is the default 1 (float32)"
            ),
        },
        {"B": becomes("relax.nn.layer_norm", "beta", "absent: zeros")},
        {
            "Mean": refused("refused: TVM's importer gives it as a constant 0, not the mean"),
            "InvStdDev": refused("refused: TVM's importer gives it as a constant 0, not 1 / std"),
        },
    ),
    "RMSNormalization": OnnxOp(
        ("relax.nn.rms_norm",),
        {
            "axis": becomes("relax.nn.rms_norm", "axes", "from axis to the last dimension"),
            "epsilon": becomes("relax.nn.rms_norm", "epsilon"),
            "stash_type": imported(
                "1 (float32): a non-float32 input is cast to float32 around the norm; another value computes "
                "in the input's dtype"
            ),
        },
    ),
    "MaxPool": _pool("relax.nn.max_pool2d", avg=False),
    "AveragePool": _pool("relax.nn.avg_pool2d", avg=True),
    "GlobalAveragePool": OnnxOp(("relax.mean",)),
    "ReduceMean": OnnxOp(
        ("relax.mean",),
        {
            "axes": becomes("relax.mean", "axis", "opset < 18: `relax.mean` axis"),
            "keepdims": becomes("relax.mean", "keepdims"),
            "noop_with_empty_axes": imported("1 with no axes: no op (the input itself)"),
        },
        {"axes": becomes("relax.mean", "axis", "`relax.mean` axis; absent: every axis")},
    ),
    "Reshape": OnnxOp(
        ("relax.reshape",),
        {
            "allowzero": imported("0: a 0 copies the input's dimension; 1: a 0 is an empty dimension"),
            "shape": refused("opset 1's shape attribute: refused (TVM reads the shape input)"),
            **_HINT,
        },
    ),
    "Flatten": OnnxOp(("relax.reshape",), {"axis": becomes("relax.reshape", "shape", "the 2-D shape it gives")}),
    "Squeeze": OnnxOp(
        ("relax.reshape",),
        {"axes": becomes("relax.reshape", "shape", "opset < 13: the shape it gives")},
        {"axes": becomes("relax.reshape", "shape", "the shape it gives")},
    ),
    "Unsqueeze": OnnxOp(
        ("relax.reshape",), {"axes": becomes("relax.reshape", "shape", "opset < 13: the shape it gives")}
    ),
    "Concat": OnnxOp(("relax.concat",), {"axis": becomes("relax.concat", "axis")}),
    "Resize": OnnxOp(
        ("relax.image.resize2d",),
        {
            "mode": becomes(_RESIZE, "method", "nearest becomes nearest_neighbor"),
            "coordinate_transformation_mode": becomes(_RESIZE, "coordinate_transformation_mode"),
            "nearest_mode": becomes(_RESIZE, "rounding_method"),
            "cubic_coeff_a": becomes(_RESIZE, "cubic_alpha"),
            "exclude_outside": becomes(_RESIZE, "cubic_exclude"),
            "extrapolation_value": becomes(_RESIZE, "extrapolation_value"),
            "antialias": refused(
                "refused: TVM's importer ignores it (1 would filter when downscaling)", lambda v: v != 0
            ),
            "axes": refused("refused: TVM's importer ignores it; give scales or sizes for every axis"),
            "keep_aspect_ratio_policy": refused(
                "refused unless stretch: TVM's importer ignores it", lambda v: _text(v) != "stretch"
            ),
        },
        {
            "roi": becomes(_RESIZE, "roi", "a constant roi; read only by tf_crop_and_resize"),
            "scales": becomes(_RESIZE, "size", "a constant: the output size floor(scale * input size)"),
            "sizes": becomes(_RESIZE, "size", "a constant: the output size"),
        },
    ),
    "Slice": OnnxOp(
        ("relax.strided_slice",),
        {
            "starts": refused("opset < 10 attributes: refused (TVM reads inputs)"),
            "ends": refused("opset < 10 attributes: refused (TVM reads inputs)"),
            "axes": refused("opset < 10 attributes: refused (TVM reads inputs)"),
        },
        {"axes": becomes("relax.strided_slice", "axes"), "steps": becomes("relax.strided_slice", "strides")},
    ),
    "Transpose": OnnxOp(("relax.permute_dims",), {"perm": becomes("relax.permute_dims", "axes")}),
    # A key / value repeated for grouped-query attention (repeat_kv: Unsqueeze -> Expand -> Reshape).
    "Expand": OnnxOp(("relax.broadcast_to",)),
    "QuantizeLinear": OnnxOp(
        ("relax.quantize",),
        {
            "axis": becomes("relax.quantize", "axis"),
            "block_size": refused("blocked quantization: refused", lambda v: v != 0),
            "output_dtype": becomes("relax.quantize", "out_dtype", _QUANT_DTYPE),
            "precision": refused("a non-default precision: refused", lambda v: v != 0),
            "saturate": imported("float8 outputs only (which run on the CPU); saturate=0 is refused by TVM"),
        },
        {"y_zero_point": becomes("relax.quantize", "zero_point", "`relax.quantize` zero_point; absent: 0, uint8")},
    ),
    "DequantizeLinear": OnnxOp(
        # blocked (block_size, opset 21): the group-wise form of ir/group_quant.py
        ("relax.dequantize", "relax.astype", "relax.take", "relax.subtract", "relax.multiply"),
        {
            "axis": becomes("relax.dequantize", "axis"),
            "block_size": imported(
                "blocked quantization (opset 21): group-wise scales and zero points along `axis`, "
                "`(float(q) - float(z)) * s` per element (frontend/blockwise.py)"
            ),
            "output_dtype": becomes(
                "relax.dequantize", "out_dtype", "`relax.dequantize` out_dtype (float32 on the NPU)"
            ),
        },
        {"x_zero_point": becomes("relax.dequantize", "zero_point", "`relax.dequantize` zero_point; absent: 0")},
    ),
}


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def consumed(model: onnx.ModelProto) -> set[str]:
    """The names some node (a subgraph's too) reads, and the graph outputs."""
    names = {o.name for o in model.graph.output}

    def walk(graph):
        for node in graph.node:
            names.update(node.input)
            for attr in node.attribute:
                for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    walk(g)

    walk(model.graph)
    return names


def _check_contrib(node: onnx.NodeProto, op: OnnxOp, used: set, where: str) -> None:
    """A contrib op's entry names every input and output in its schema's order; onnx.checker does not
    check other domains' nodes, so an attribute the entry does not name is refused here too."""
    for attr in node.attribute:
        entry = op.attrs.get(attr.name)
        if entry is None:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{where}: attribute {attr.name!r} is not one of onnxruntime's {node.op_type} attributes the "
                f"import knows ({', '.join(op.attrs)}); remove it",
            )
        value = helper.get_attribute_value(attr)
        if entry.refuse is not None and entry.refuse(value):
            raise NPUError(entry.code, f"{where}: {attr.name}={_text(value)}: {entry.how}")
    for kind, names, given in (("input", op.inputs, node.input), ("output", op.outputs, node.output)):
        if len(given) > len(names):
            raise NPUError("ERR_INVALID_MODEL", f"{where}: {len(given)} {kind}s; onnxruntime's schema has {len(names)}")
        for i, (name, tensor) in enumerate(zip(names, given)):
            handling = names[name]
            if tensor and handling.refuse is not None and (kind == "input" or tensor in used):
                raise NPUError(handling.code, f"{where}: {kind} {i} ({name} {tensor!r}): {handling.how}")


def check_model(model: onnx.ModelProto, contrib: dict | None = None) -> None:
    """Refuse, before TVM's importer runs, a node of a claimed op with an attribute value or optional
    output the table refuses, and a Conv whose kernel_shape is not its weight's: an NPUError naming the
    node, the attribute and what to change, where TVM would compute something else or fail uncoded.
    `contrib` maps (domain, op_type) to the OnnxOp entries of onnxruntime's contrib ops
    (frontend/contrib): there every input and output is listed in order, an output refused only when
    something reads it, and an attribute the entry does not name is refused."""
    weights = {init.name: list(init.dims) for init in model.graph.initializer}
    used = None
    for node in model.graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if contrib and (domain, node.op_type) in contrib:
            if used is None:
                used = consumed(model)
            where = f"{node.op_type} node {node.name or node.output[0]!r} ({domain or 'ai.onnx'} domain)"
            _check_contrib(node, contrib[(domain, node.op_type)], used, where)
            continue
        op = ONNX_OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if op is None:
            continue
        where = f"{node.op_type} node {node.name or node.output[0]!r} (opset {_opset(model)})"
        for attr in node.attribute:
            entry = op.attrs.get(attr.name)
            if entry is not None and entry.refuse is not None and entry.refuse(helper.get_attribute_value(attr)):
                value = _text(helper.get_attribute_value(attr))
                raise NPUError("ERR_OP_NOT_SUPPORTED", f"{where}: {attr.name}={value}: {entry.how}")
        for i, name in enumerate(node.output[1:], 1):
            entry = op.outputs.get(list(op.outputs)[i - 1]) if len(op.outputs) >= i else None
            if name and entry is not None and entry.refuse is not None:
                raise NPUError("ERR_OP_NOT_SUPPORTED", f"{where}: output {i} ({name}): {entry.how}")
        if node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in weights:
            kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), None)
            if kernel is not None and kernel != weights[node.input[1]][2:]:
                raise NPUError(
                    "ERR_INVALID_MODEL",
                    f"{where}: kernel_shape {kernel} differs from the weight's {weights[node.input[1]][2:]}; "
                    "drop kernel_shape or make it the weight's spatial shape",
                )
