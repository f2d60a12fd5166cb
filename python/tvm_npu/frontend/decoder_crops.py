"""Sliding-window crops around the cache appends (decoder_forms/sliding_crop.py), removed before folding.

transformers' DynamicCache(config=...) on a config with `sliding_window` W crops the past to its last
W - 1 rows before the append and the result after it. Folded with the past fixed at T - S rows, every
shape after a crop that drops rows (W < T: the keys' repeat for grouped-query attention, the scores)
would be one of the W - 1 + S cropped rows, not of the cache's T. So the crops are found on a folded
copy (their bounds are constants there) and removed from the model before it is folded: the append
reads the past itself and returns its result as the present, and every shape after it is one of T rows.
The windows of the layers where W < T go to decoder_mask.py, whose band must hide every row the crops
dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from . import decoder_fold
from .decoder_forms import sliding_crop
from .decoder_forms.common import Context


def _copies(graph: onnx.GraphProto, pasts: list[str]) -> set[str]:
    """The pasts and the copies folding bypasses (Identity, a one-input Concat: TorchScript writes one)."""
    names = set(pasts)
    for node in graph.node:
        if node.op_type in ("Identity", "Concat") and len(node.input) == 1 and node.input[0] in names:
            names.update(node.output)
    return names


def remove(model: onnx.ModelProto, seq: int, total: int, specialize: Callable) -> dict[int, int]:
    """Remove each past's crops (model not yet specialized: `specialize(model, S, T)` does that, on a
    copy); returns {layer: W} for the layers whose window W < total (the smaller of key and value)."""
    graph = model.graph
    pasts = [i.name for i in graph.input if i.name.startswith("past_key_values.")]
    if not any(n.op_type == "Slice" and n.input and n.input[0] in _copies(graph, pasts) for n in graph.node):
        return {}  # no crop: no folded copy to make
    light = decoder_fold.light_copy(model)
    specialize(light, seq, total)
    decoder_fold.fold(light)
    ctx = Context.of(light.graph, decoder_fold.constants(light.graph), decoder_fold.static_shapes(light), total)
    rename, gone, windows = {}, set(), {}
    for past in pasts:
        found = sliding_crop.find(light.graph, past, ctx)
        if found is None:
            continue
        crop, tail = found.dropped
        rename[crop.output[0]] = past  # the append reads the whole past
        rename[found.node.output[0]] = tail.output[0]  # and returns its result as the present
        gone |= {crop.output[0], tail.output[0]}
        if found.window is not None:
            layer = int(past.split(".")[1])
            windows[layer] = min(found.window, windows.get(layer, found.window))
    kept = [n for n in graph.node if not any(o in gone for o in n.output)]
    for node in kept:
        node.input[:] = [rename.get(i, i) for i in node.input]
        node.output[:] = [rename.get(o, o) for o in node.output]
    del graph.node[:]
    graph.node.extend(kept)
    return windows
