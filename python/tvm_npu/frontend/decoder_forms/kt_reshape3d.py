"""K^T as onnxscript writes it (torch.onnx.export(dynamo=True) of torch's scaled_dot_product_attention):
Reshape [1, H, T, D] -> [H, T, D], Transpose(0, 2, 1), Reshape -> [1, H, D, T]. Batch 1 (the step model's)
makes the first Reshape and the last only a merge and a split of a unit dim, so the three are exactly
Transpose(0, 1, 3, 2) of the 4-D tensor: rewritten so."""

from __future__ import annotations

import onnx
from onnx import helper

from .common import Context, const_ints


def _sole_reader(ctx: Context, name: str, op_type: str) -> onnx.NodeProto | None:
    readers = ctx.readers.get(name, [])
    ok = len(readers) == 1 and readers[0].op_type == op_type and name not in ctx.outputs
    return readers[0] if ok else None


def _perm(node: onnx.NodeProto) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


def rewrite(model: onnx.ModelProto, ctx: Context) -> int:
    graph, done = model.graph, 0
    for first in list(graph.node):
        src = first.input[0] if first.op_type == "Reshape" else None
        shape = ctx.shapes.get(src) if src else None
        if shape is None or len(shape) != 4 or shape[0] != 1:
            continue
        _, H, T, D = shape
        if const_ints(ctx, first.input[1]) not in ([H, T, D], [-1, T, D]):
            continue
        t = _sole_reader(ctx, first.output[0], "Transpose")
        if t is None or _perm(t) != [0, 2, 1]:
            continue
        last = _sole_reader(ctx, t.output[0], "Reshape")
        if last is None or const_ints(ctx, last.input[1]) not in ([1, H, D, T], [1, H, D, -1], [1, -1, D, T]):
            continue
        new = helper.make_node("Transpose", [src], [last.output[0]], name=f"{t.name}/4d", perm=[0, 1, 3, 2])
        at = list(graph.node).index(last)
        graph.node.insert(at, new)
        for gone in (first, t, last):
            graph.node.remove(gone)
        done += 1
    return done
