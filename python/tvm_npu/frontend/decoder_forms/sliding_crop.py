"""The append of transformers' DynamicCache(config=...) on a config with `sliding_window` W (Mistral,
Qwen2, Gemma2's local layers): past -> Slice (its last W - 1 rows) -> Concat(., new, axis=2) -> Slice
(the last rows, W - 1 in transformers) -> present. The attention reads the Concat. decoder_crops.py
finds this form on a folded copy and removes both crops before folding, so the cache keeps all T rows:
the first crop only drops past rows that the window's mask hides from every query of the call (query s
at p + s sees rows p + s - W < t <= p + s, so at most the last W - 1 past rows), the second only rows a
later call's window no longer reaches. With max_context T <= W nothing is hidden (the mask is causal);
with W < T the Append carries the window and the mask rebuilt from `position` is the band
(decoder_mask.py), which must then hide every row the crop drops."""

from __future__ import annotations

import onnx

from .common import Append, Context, const_ints
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
    node.input[0] = past
    band = window if window < ctx.T else None  # T <= W: every query sees every row it can, plain causal
    return Append(node, node.input[1], tails[0].output[0], dropped=[crop, tails[0]], window=band)
