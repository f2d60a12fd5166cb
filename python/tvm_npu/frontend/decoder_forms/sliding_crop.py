"""The append of transformers' DynamicCache(config=...) on a config with `sliding_window` W (Mistral,
Gemma2): past -> Slice (its last W - 1 rows) -> Concat(., new, axis=2) -> Slice (the last rows, W - 1 in
transformers) -> present. The attention reads the Concat. With max_context T <= W the first crop keeps
every row of the past (T - S <= W - 1) and every query q < T sees all rows <= q (the window's mask is
causal there); the second crop only drops rows a later step would read at positions >= T, which the
step model never reaches. Both crops are dropped and the cache keeps all T rows. A window < T would drop
rows a query reads (banded attention): refused, naming the window and max_context."""

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


def _kept_last(ctx: Context, node: onnx.NodeProto) -> int | None:
    """N when the crop keeps the last N rows (start -N, end past the last row), else None."""
    start, end = const_ints(ctx, node.input[1]), const_ints(ctx, node.input[2])
    if start is None or end is None or start[0] >= 0 or end[0] < 2**31:
        return None
    return -start[0]


def find(graph: onnx.GraphProto, past: str, ctx: Context) -> Append | None:
    head = [n for n in ctx.readers.get(past, []) if _crop(ctx, n, past)]
    if len(head) != 1 or _kept_last(ctx, head[0]) is None:
        return None
    crop = head[0]
    found = appends_of(ctx, crop.output[0])
    if len(found) != 1 or len(ctx.readers.get(crop.output[0], [])) != 1:
        return None
    node = found[0]
    tails = [n for n in ctx.readers.get(node.output[0], []) if _crop(ctx, n, node.output[0])]
    tails = [n for n in tails if n.output[0] in ctx.outputs and _kept_last(ctx, n) is not None]
    if len(tails) != 1:
        return None
    window = _kept_last(ctx, crop) + 1  # the past keeps window - 1 rows: a query sees the last `window`
    if window < ctx.T:
        raise not_mapped(
            f"a sliding-window cache: {past} is cropped to its last {window - 1} rows (a sliding window of "
            f"{window} < max_context {ctx.T}); a window smaller than max_context is banded attention, which "
            "the importer does not build: compile with max_context <= the window",
            crop,
        )
    node.input[0] = past
    return Append(node, node.input[1], tails[0].output[0], dropped=[crop, tails[0]])
