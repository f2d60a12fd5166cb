"""What the contrib converters share: the node's name for errors, static shapes, the float32 check; and
what the expansions of ONNX's own ops share (tensor types from shape inference, a node writer)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from ...contract.errors import NPUError
from ...ir.values import static_shape


def where(op: str, attr: dict) -> str:
    """ "SkipLayerNormalization node 'name'" for error messages (registry.routed names every node)."""
    return f"{op} node {attr.get('tvm_custom', {}).get('name', '?')!r}"


def shape_of(expr, what: str, place: str) -> list[int]:
    """The static shape of `expr`; ERR_OP_NOT_SUPPORTED naming `what` when a dimension is symbolic."""
    shape = static_shape(expr)
    if shape is None:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{place}: the {what} has no static shape; give the model's inputs fixed shapes (shape_dict)",
        )
    return [int(d) for d in shape]


def require_float32(expr, what: str, place: str) -> None:
    dtype = str(expr.ty.dtype)
    if dtype != "float32":
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{place}: the {what} is {dtype}; tvm_npu imports this op in float32 (export the model in fp32)",
        )


def tensor_types(model: onnx.ModelProto) -> dict[str, tuple[int, list]]:
    """(elem type, dims with None for a symbolic one) of every tensor shape inference types."""
    from ..decoder_fold import light_copy  # decoder_fold imports the frontend's blockwise, as contrib does

    try:
        inferred = shape_inference.infer_shapes(light_copy(model), data_prop=True)
    except Exception as err:  # noqa: BLE001 - an inconsistent graph is the user's model
        raise NPUError("ERR_INVALID_MODEL", f"shape inference fails on the model: {err}") from None
    out = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type
        dims = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        out[vi.name] = (tt.elem_type, dims)
    for t in model.graph.initializer:
        out[t.name] = (t.data_type, list(t.dims))
    return out


class Writer:
    """The nodes and constants replacing one node (an ONNX op expanded into standard ones), named after it."""

    def __init__(self, node: onnx.NodeProto):
        self.prefix, self.nodes, self.inits, self.k = node.name or node.output[0], [], [], 0

    def const(self, value, dtype) -> str:
        self.k += 1
        name = f"{self.prefix}/c{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        self.k += 1
        out = out or f"{self.prefix}/t{self.k}"
        name = f"{self.prefix}/{op_type}_{self.k}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def heads(self, x: str, n: int) -> str:
        """[B, S, n * d] -> [B, n, S, d]."""
        return self.op("Transpose", self.op("Reshape", x, self.const([0, 0, n, -1], np.int64)), perm=[0, 2, 1, 3])

    def merge(self, x: str, out: str | None = None) -> str:
        """[B, n, S, d] -> [B, S, n * d]."""
        y = self.op("Transpose", x, perm=[0, 2, 1, 3])
        return self.op("Reshape", y, self.const([0, 0, -1], np.int64), out=out)

    def repeat(self, x: str, g: int, heads: int, dim: int) -> str:
        """[B, H_kv, T, d] -> [B, H_kv * g, T, d], each head g times (repeat_kv's form)."""
        one = self.op("Unsqueeze", x, self.const([2], np.int64))
        wide = self.op("Expand", one, self.const([1, 1, g, 1, 1], np.int64))
        return self.op("Reshape", wide, self.const([0, heads, -1, dim], np.int64))


def expand_nodes(model: onnx.ModelProto, op_type: str, spec, expand_node) -> onnx.ModelProto:
    """`model` with every ai.onnx `op_type` node replaced by the nodes of expand_node(node, types) (a
    Writer; `types` from tensor_types), after the refusals of its OnnxOp `spec` (check_model, also where
    from_onnx has not run them); a copy, or `model` itself when it has no such node."""
    from ..onnx_attributes import check_model

    def mine(node: onnx.NodeProto) -> bool:
        return node.op_type == op_type and node.domain in ("", "ai.onnx")

    if not any(mine(n) for n in model.graph.node):
        return model
    check_model(model, {("", op_type): spec})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = tensor_types(out)
    nodes = []
    for node in out.graph.node:
        if not mine(node):
            nodes.append(node)
            continue
        w = expand_node(node, types)
        nodes += w.nodes
        out.graph.initializer.extend(w.inits)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
