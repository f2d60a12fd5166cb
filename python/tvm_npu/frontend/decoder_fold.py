"""Shape folding for decoder exports: with every input shape fixed, the shape arithmetic of a
decoder-with-past export (Shape -> Gather -> Concat -> Reshape, Range -> LessOrEqual mask building,
Reshape with -1) becomes constants, which TVM's ONNX importer needs (it cannot import Reshape of a
computed shape).

onnx's own tools only (onnxruntime is a test dependency, not a runtime one): onnx.shape_inference
gives the static shapes, a Shape / Size of a static tensor becomes a constant, and a node whose inputs
are all constants is evaluated by onnx.reference.ReferenceEvaluator; repeated until nothing changes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from .blockwise import inferable

# Ops never evaluated at import time: random or with subgraphs (their meaning needs more than inputs).
_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "If", "Loop"}
_NOT_FOLDED |= {"Scan", "SequenceConstruct", "SequenceAt", "SplitToSequence", "ConcatFromSequence"}
# A quantized weight keeps its codes: folded, its DequantizeLinear would leave a float weight that
# llm.compile(weights=...) quantizes again with other codes (issue 31).
_NOT_FOLDED |= {"DequantizeLinear"}
# Small constants are given to shape inference with their values (data propagation of shape tensors);
# weights only with their shapes, so inference does not copy them.
_SMALL = 4096


def constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The graph's initializers and Constant-node outputs, by name."""
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            out[node.output[0]] = _evaluate(node, {}, 17)[0]
    return out


def opset_of(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)


def _evaluate(node: onnx.NodeProto, inputs: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """One node, run by onnx's reference evaluator at the model's opset."""
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(inputs[name].dtype), inputs[name].shape)
        for name in dict.fromkeys(i for i in node.input if i)
    ]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "fold", graph_inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])  # the newest IR: any opset
    return list(ReferenceEvaluator(model).run(None, {k: inputs[k] for k in (g.name for g in graph_inputs)}))


def light_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its weights as typed graph inputs instead of data: what the checker and shape
    inference need, without copying the weights (nor meeting protobuf's 2 GB limit on a real LLM)."""
    graph = onnx.GraphProto(name=model.graph.name)
    nodes, stubs = inferable(model.graph)  # contrib ops as standard ones of the same output type and shape
    graph.node.extend(nodes)
    graph.input.extend([*model.graph.input, *stubs])
    graph.output.extend(model.graph.output)
    graph.value_info.extend(model.graph.value_info)
    light = helper.make_model(graph, opset_imports=list(model.opset_import))
    light.ir_version = model.ir_version
    for t in model.graph.initializer:
        if np.prod(t.dims, dtype=np.int64) <= _SMALL:
            light.graph.initializer.append(t)
        else:  # a weight: its shape is all inference needs
            light.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def _inferred(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inferred = shape_inference.infer_shapes(light_copy(model), data_prop=True)
    return [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor whose shape shape inference proves static, by name (graph inputs included)."""
    shapes = {}
    for vi in _inferred(model):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _same_type_casts(model: onnx.ModelProto) -> set[str]:
    """Outputs of the Casts to the element type their input already has (the tracer's `.to(dtype)`
    of a tensor of that dtype, e.g. after every attention softmax): identities."""
    types = {vi.name: vi.type.tensor_type.elem_type for vi in _inferred(model)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    to = {n.output[0]: next((a.i for a in n.attribute if a.name == "to"), -1) for n in casts}
    return {n.output[0] for n in casts if types.get(n.input[0], 0) == to[n.output[0]]}


def _shape_of(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """Shape (with its start / end, opset 15) or Size of a tensor of static `shape`."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    return np.array(shape[slice(attrs.get("start", 0), attrs.get("end"))], np.int64)


def _folded_value(
    node: onnx.NodeProto,
    values: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    opset: int,
    kept: frozenset[str] | set[str],
    max_elements: int | None,
) -> list[np.ndarray] | None:
    """The outputs of `node` when they follow from constants alone, else None: a Shape / Size of a
    static tensor, or a node of constant inputs (a Constant node is one) not in `kept`, whose results
    have at most `max_elements` elements each."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED or node.op_type in kept:
        return None
    if node.op_type in ("Shape", "Size"):
        return [_shape_of(node, shapes[node.input[0]])] if node.input[0] in shapes else None
    if not all(not i or i in values for i in node.input):
        return None
    result = _evaluate(node, {i: values[i] for i in node.input if i}, opset)
    if max_elements is not None and any(np.asarray(r).size > max_elements for r in result):
        return None
    return result


def fold_pass(
    model: onnx.ModelProto,
    values: dict[str, np.ndarray],
    kept: frozenset[str] | set[str] = frozenset(),
    max_elements: int | None = None,
) -> bool:
    """One topological pass: the nodes _folded_value can evaluate become constants (recorded in
    `values`, the node dropped, read ones written as initializers). Returns whether anything was
    folded."""
    shapes = static_shapes(model)
    opset = opset_of(model)
    remaining, changed = [], False
    for node in model.graph.node:
        result = _folded_value(node, values, shapes, opset, kept, max_elements)
        if result is None:
            remaining.append(node)
            continue
        changed = True
        for name, value in zip((o for o in node.output if o), result):
            values[name] = np.asarray(value)
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(remaining)
        _write_constants(model, values)
    return changed


def _write_constants(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> None:
    """Constants read by a node or an output that are not initializers yet become initializers (the
    weights already are: they are not converted again)."""
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    have = {t.name for t in model.graph.initializer}
    model.graph.initializer.extend(
        numpy_helper.from_array(v, k) for k, v in values.items() if k in used and k not in have
    )


def bypass_identities(model: onnx.ModelProto, casts: frozenset[str] | set[str] = frozenset()) -> None:
    """Identity and single-input Concat nodes, and the Casts whose outputs are in `casts`, removed, their
    readers reading the input (the tracer leaves them around the cache and the attention); an identity
    that produces a graph output stays."""
    outputs = {o.name for o in model.graph.output}
    alias: dict[str, str] = {}
    kept = []
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            node.input[k] = alias.get(name, name)
        single = node.op_type == "Identity" or (node.op_type == "Concat" and len(node.input) == 1)
        single = single or (node.op_type == "Cast" and node.output[0] in casts)
        if single and node.output[0] not in outputs:
            alias[node.output[0]] = node.input[0]
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)


def remove_dead(model: onnx.ModelProto) -> None:
    """Nodes whose outputs nothing reads, and initializers no node reads, removed."""
    live = {o.name for o in model.graph.output}
    kept = []
    for node in reversed(model.graph.node):
        if any(o in live for o in node.output):
            kept.append(node)
            live.update(i for i in node.input if i)
    del model.graph.node[:]
    model.graph.node.extend(reversed(kept))
    inits = [t for t in model.graph.initializer if t.name in live]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    del model.graph.value_info[:]


def fold(model: onnx.ModelProto) -> onnx.ModelProto:
    """Fold `model` (its graph inputs already of static shape) in place until nothing changes."""
    values = constants(model.graph)
    bypass_identities(model)
    remove_dead(model)
    while fold_pass(model, values):
        bypass_identities(model)
        remove_dead(model)
    bypass_identities(model, _same_type_casts(model))
    return model
