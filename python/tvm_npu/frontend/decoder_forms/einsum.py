"""Attention's two products written as Einsum (hand-written and some research exporters):
Q x K^T as "bhqd,bhkd->bhqk" (a MatMul with a transposed second operand) and P x V as
"bhqk,bhkd->bhqd" (any letters, 4-D). Rewritten as Transpose(0, 1, 3, 2) + MatMul, resp. MatMul: the
same sums of products, the form the resident cache recognises."""

from __future__ import annotations

import onnx
from onnx import helper

from .common import Context


def _kind(equation: str) -> str | None:
    """ "bt" for a batched A x B^T, "b" for A x B, else None (4-D operands, two batch letters)."""
    try:
        lhs, out = equation.replace(" ", "").split("->")
        a, b = lhs.split(",")
    except ValueError:
        return None
    if not (len(a) == len(b) == len(out) == 4 and len(set(a)) == 4 and len(set(b)) == 4 and "." not in lhs):
        return None
    if a[:2] != b[:2] or out[:2] != a[:2]:
        return None
    i, j = a[2], a[3]
    if b[3] == j and b[2] not in a and out[2:] == i + b[2]:
        return "bt"
    if b[2] == j and b[3] not in a and out[2:] == i + b[3]:
        return "b"
    return None


def rewrite(model: onnx.ModelProto, ctx: Context) -> int:
    graph, done = model.graph, 0
    for node in list(graph.node):
        if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        kind = _kind(next((a.s.decode() for a in node.attribute if a.name == "equation"), ""))
        if kind is None:
            continue
        at = list(graph.node).index(node)
        a, b = node.input
        new = []
        if kind == "bt":
            new.append(helper.make_node("Transpose", [b], [f"{node.output[0]}/bT"], perm=[0, 1, 3, 2]))
            b = new[0].output[0]
        new.append(helper.make_node("MatMul", [a, b], [node.output[0]], name=f"{node.name}/matmul"))
        graph.node.remove(node)
        for k, n in enumerate(new):
            graph.node.insert(at + k, n)
        done += 1
    return done
