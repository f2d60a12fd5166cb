"""The plain append: Concat(past, new, axis=2) whose output is the present (TorchScript and dynamo
exports of transformers' DynamicCache(), optimum, onnx.helper decoders)."""

from __future__ import annotations

import onnx

from .common import Append, Context, axis_of, not_mapped


def appends_of(ctx: Context, past: str) -> list[onnx.NodeProto]:
    """The Concats reading `past` first, of two inputs, along the sequence axis."""
    return [
        n
        for n in ctx.readers.get(past, [])
        if n.op_type == "Concat" and len(n.input) == 2 and n.input[0] == past and axis_of(n) == 2
    ]


def find(graph: onnx.GraphProto, past: str, ctx: Context) -> Append | None:
    found = appends_of(ctx, past)
    if not found:
        return None
    if len(found) > 1:
        raise not_mapped(f"two candidate cache appends of {past}: {found[0].name!r} and {found[1].name!r}", found[1])
    node = found[0]
    presents = [o for o in node.output if o in ctx.outputs]
    if not presents:
        return None
    return Append(node, node.input[1], presents[0])
