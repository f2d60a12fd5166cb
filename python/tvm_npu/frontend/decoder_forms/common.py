"""What the recognizers of decoder_forms share: the match of a cache append and graph look-ups."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from ...contract.errors import NPUError


@dataclass
class Append:
    """One cache append: `node` (a Concat) appends `new` [1, H_kv, S, D] to the past along the sequence
    axis; `present` is the graph output returning the result; the nodes in `dropped` (identity crops
    between them) go, their outputs read as the append's.

    A form whose append is inside another op (onnxruntime's GroupQueryAttention) sets `write`: called as
    write(node, cache, indices) with the static cache's input name and the ScatterND indices [1, H_kv, S, 3]
    (rows (0, h, position + s)), it rewrites `node` itself and returns the nodes to put at the graph's
    start (reading only graph inputs, the indices and initializers); the output `present` is then renamed
    cache_out.{i}.{kv}, as for a Concat.

    `window` W: the export keeps only the last W - 1 past rows (a sliding window smaller than the cache);
    the step model reads every row, so the layer's mask must hide the others (checked in decoder_mask.py)."""

    node: onnx.NodeProto
    new: str
    present: str
    dropped: list = field(default_factory=list)
    write: Callable[[onnx.NodeProto, str, str], list] | None = None
    window: int | None = None


@dataclass
class Context:
    """The graph's look-ups: readers and producer of each tensor, constant values, static shapes, graph
    outputs; `T` the cache rows."""

    readers: dict
    producer: dict
    values: dict
    shapes: dict
    outputs: set
    T: int

    @classmethod
    def of(cls, graph: onnx.GraphProto, values: dict, shapes: dict, T: int) -> Context:
        readers, producer = {}, {}
        for node in graph.node:
            for name in node.input:
                readers.setdefault(name, []).append(node)
            for name in node.output:
                producer[name] = node
        return cls(readers, producer, values, shapes, {o.name for o in graph.output}, T)


def axis_of(node: onnx.NodeProto, rank: int = 4) -> int | None:
    axis = next((a.i for a in node.attribute if a.name == "axis"), None)
    return None if axis is None else axis % rank


def not_mapped(what: str, node: onnx.NodeProto | None = None) -> NPUError:
    where = f" (node {node.name or node.op_type!r})" if node is not None else ""
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"{what}{where}; the importer maps a decoder-with-past export whose layers append each past key/value "
        "and the new one along the sequence axis (Concat, optionally inside the crop Slices of a sliding "
        "window) and return the result as a graph output",
    )


def const_ints(ctx: Context, name: str) -> list[int] | None:
    value = ctx.values.get(name) if name else None
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
