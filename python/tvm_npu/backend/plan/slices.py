"""Stage 4a' — channel slices: a concatenation becomes an SRAM tensor its inputs are written into.

On the NPU a channel concatenation moves no data: the joined tensor is kept resident in SRAM, and the
convolution or pooling that produces each input writes its result straight into that input's channels
(a channel slice: its pixels are the joined tensor's pixel stride apart, docs/npu.md section 3). When an
input cannot be written in place — it comes from outside the region, from an op without a pixel-strided
output, it is also used elsewhere, or (int8) its scale or zero point differs from the result's — one
copy pass (a 1x1 max pooling: exact in fp16, and in int8 the requantization y = z_y + RNE((x - z_x) * S)
with S = s_x / s_y, the identity when they agree) writes it into its slice. A joined tensor that must also
live in DDR (a region output, or the input of a view) is built in SRAM and copied out once.

Stacking matrices along their rows (a concat on axis 0, e.g. an LSTM's outputs over time) needs no pixel
stride: each input is the rows at its offset, in SRAM or in DDR alike, and whatever else reads it reads
it there.

`resolve(graph)` rewrites the layer list accordingly and returns the aliases for the planner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..lower.graph import Graph, Layer, TensorInfo

# Producers that take an output pixel stride (CONV2D, POOL).
WRITES_SLICES = ("conv", "pool")


@dataclass
class Slice:
    """A tensor stored as channels [offset, offset + C) of `root`, or (rows) as its rows from `offset`."""

    root: str
    offset: int
    rows: bool = False


def _copy(graph: Graph, concat: Layer, src: str, tag: str, k: int | None = None) -> tuple[Layer, str]:
    """A layer that copies `src` into a new tensor of the same shape: a 1x1 max pooling; int8: with
    the requantization of concat input `k` (None: the output's own, the identity)."""
    info = graph.tensors[src]
    dst = f"{src}>{concat.name}.{tag}"  # one tensor may be copied into several concatenations
    graph.tensors[dst] = TensorInfo(dst, info.host_shape, info.host_layout, info.view, info.dtype, info.host_dtype)
    layer = Layer(
        f"{concat.name}.{tag}",
        concat.composite,
        "pool",
        concat.dtype,
        inputs=[src],
        out=dst,
        window=(1, 1),
        pool_kind="max",
        out_elems=int(np.prod(info.view)),
    )
    if concat.dtype == "int8":
        layer.in_zps = (concat.in_zps[k] if k is not None else concat.out_zp,)
        layer.out_zp = concat.out_zp
        layer.scale = np.array([concat.scale[k] if k is not None else 1.0], np.float32)
    return layer, dst


def _same_quantization(concat: Layer, k: int) -> bool:
    """Whether concat input `k` has the output's codes as they are (fp16, or int8 at the output's scale
    and zero point); otherwise a copy requantizes it into its place."""
    return concat.dtype != "int8" or (concat.in_zps[k] == concat.out_zp and concat.scale[k] == 1.0)


def _stack_rows(graph: Graph, layer: Layer, producer: dict, external: set, slices: dict, out: list, pinned: set):
    """A concat along rows: each input produced in the region is written at its row offset — except
    recurrent state (`pinned`), which stays in SRAM and is copied into the stack, and (int8) an input
    whose scale or zero point is not the output's, which the copy requantizes."""
    inputs = []
    for k, src in enumerate(layer.inputs):
        p = producer.get(src)
        moved = p is None or p.kind in ("view", "concat") or src in external or src in slices or src in pinned
        if moved or not _same_quantization(layer, k):  # int8: the copy requantizes it into the output's
            copy, src = _copy(graph, layer, src, f"copy{k}", k)
            out.append(copy)
        slices[src] = Slice(layer.out, layer.offsets[k], rows=True)
        inputs.append(src)
    layer.inputs = inputs
    out.append(layer)


def resolve(graph: Graph, pinned: set = frozenset()) -> tuple[dict, set]:
    """Rewrite `graph.layers` so every concat input is produced in place; return ({tensor: Slice},
    {joined tensors, which must be SRAM-resident})."""
    consumers: dict = {}
    for layer in graph.layers:
        for name in layer.inputs:
            consumers[name] = consumers.get(name, 0) + 1
    producer = {layer.out: layer for layer in graph.layers}
    views = {layer.inputs[0] for layer in graph.layers if layer.kind == "view"}
    external = set(graph.inputs) | set(graph.outputs) | views
    slices, joined, out = {}, set(), []
    for layer in graph.layers:
        if layer.kind != "concat":
            out.append(layer)
            continue
        if layer.rows:
            _stack_rows(graph, layer, producer, external, slices, out, pinned)
            continue
        if layer.out in external:  # build it in SRAM, then copy it out once
            inner = f"{layer.out}<sram"
            graph.tensors[inner] = graph.tensors[layer.out]
            final = layer.out
            layer.out = inner
        else:
            final = None
        inputs = []
        for k, src in enumerate(layer.inputs):
            p = producer.get(src)
            same_q = _same_quantization(layer, k)
            in_place = (
                p is not None
                and p.kind in WRITES_SLICES
                and consumers[src] == 1
                and same_q
                and src not in external
                and src not in slices
                and graph.tensors[src].view[2] > 1
            )
            if not in_place:
                copy, src = _copy(graph, layer, src, f"copy{k}", k)
                out.append(copy)
            slices[src] = Slice(layer.out, layer.offsets[k])
            inputs.append(src)
        layer.inputs = inputs
        joined.add(layer.out)
        out.append(layer)
        if final is not None:
            copy, tmp = _copy(graph, layer, layer.out, "out")
            del graph.tensors[tmp]
            copy.out = final
            out.append(copy)
    graph.layers = out
    return slices, joined
