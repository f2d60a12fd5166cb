"""The append of transformers' DynamicCache(config=...) on a config with `sliding_window` (Mistral,
Gemma2): past -> Slice (keep the last window - 1 rows) -> Concat(., new, axis=2) -> Slice (the last
window rows) -> present. The attention reads the Concat. With the past fixed at T - S rows, a crop of
a window >= T keeps every row: an identity, dropped. A smaller window would drop cache rows (and its
mask is banded, not causal): refused, naming the window and max_context."""

from __future__ import annotations

import onnx

from .common import Append, Context, const_ints, not_mapped
from .concat import appends_of


def _crop(ctx: Context, node: onnx.NodeProto, source: str) -> bool:
    """`node` is a Slice of `source` on axis 2 only, step 1, with constant bounds."""
    if node.op_type != "Slice" or node.input[0] != source or len(node.input) < 4:
        return False
    axes = const_ints(ctx, node.input[3])
    steps = const_ints(ctx, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
    rank = len(ctx.shapes.get(source, (0,) * 4))
    return axes is not None and [a % rank for a in axes] == [2] and steps == [1]


def _check_identity(ctx: Context, node: onnx.NodeProto, source: str) -> None:
    """Refuse a crop that drops a row of `source` (static length L on axis 2)."""
    length = ctx.shapes.get(source, (0, 0, 0))[2]
    start, end = const_ints(ctx, node.input[1]), const_ints(ctx, node.input[2])
    if start is None or end is None or not length:
        raise not_mapped(f"a crop Slice of {source} with bounds that are not constants", node)
    kept = range(length)[slice(start[0], end[0])]
    if len(kept) != length:
        window = -start[0] if start[0] < 0 else end[0] - start[0]
        raise not_mapped(
            f"a sliding-window cache: the Slice keeps {len(kept)} of {length} rows of {source} (a window of "
            f"about {window} rows < max_context {ctx.T}); a sliding window smaller than max_context is banded "
            "attention, which the importer does not build: compile with max_context <= the window",
            node,
        )


def find(graph: onnx.GraphProto, past: str, ctx: Context) -> Append | None:
    head = [n for n in ctx.readers.get(past, []) if _crop(ctx, n, past)]
    if len(head) != 1:
        return None
    crop = head[0]
    found = appends_of(ctx, crop.output[0])
    if len(found) != 1:
        return None
    node = found[0]
    tails = [n for n in ctx.readers.get(node.output[0], []) if _crop(ctx, n, node.output[0])]
    tails = [n for n in tails if n.output[0] in ctx.outputs]
    if len(tails) != 1:
        return None
    _check_identity(ctx, crop, past)
    _check_identity(ctx, tails[0], node.output[0])
    node.input[0] = past
    return Append(node, node.input[1], tails[0].output[0], dropped=[crop, tails[0]])
