"""Stage 4c' — held inputs: a region input loaded into SRAM once, by one DMA, and kept there for the
layers that read it.

Without this, every tile of every layer that reads a region input loads its rows from DDR: a MATMUL's B
operand one batch at a time (an attention's K or V, one head of one image per DMA), each load paying
the DMA latency right before the compute that waits for it. A region input is whole in DDR before the
region starts, so its one load can instead go out while earlier layers compute: the weight streamer
queues it like a constant block (weights.py), paced by the compute it hides behind, and the layers
read it where it stays, as they read a resident intermediate. (A diffusion UNet's cross-attention K / V,
computed once per image by the pipeline's "prompt" entry, are such inputs of every denoising step.)

A held input is a resident (sram.place_residents) from `lead` layers before its first reader to its
last: the same budget, the same first fit as the intermediates. The planner plans with and without
held inputs and keeps the faster plan (planner.plan), so holding never costs cycles the cost model
sees; it moves no more bytes (a row tile's halo rows are not loaded twice).
"""

from __future__ import annotations

#: Layers before its first reader from which a held input's load may go out (its SRAM reserved there).
#: The tiny UNet's denoising step (tests/diffusion/test_prompt_hoist.py): 0 or 4 layers left the K / V
#: loads exposed or in front of other transfers (293.5 k, 292.6 k cycles), 12 to 24 gave 290.5-290.7 k.
LEAD_LAYERS = 16


def input_ranges(layers: list, inputs: list, excluded: set, lead: int = LEAD_LAYERS) -> dict:
    """{input: (first layer its SRAM is reserved, last layer reading it)} of the region `inputs` that a
    compute layer reads, except `excluded` (views and slices, which alias other bytes; outputs)."""
    first, last = {}, {}
    for i, layer in enumerate(layers):
        for name in layer.inputs:
            if name in inputs and name not in excluded:
                first.setdefault(name, i)
                last[name] = i
    return {name: (max(0, first[name] - lead), last[name]) for name in first}


def worth_trying(layers: list, inputs: list) -> bool:
    """Whether some region input is loaded in several DMAs without holding it: read by two layers or
    more, or as a MATMUL's B (one load per batch, matmul_plan.py). The planner then also plans with
    held inputs (one more plan of the region: not for every region)."""
    readers: dict = {}
    for layer in layers:
        for k, name in enumerate(layer.inputs):
            if name in inputs:
                readers[name] = readers.get(name, 0) + (2 if layer.kind == "matmul" and k == 1 else 1)
    return any(n > 1 for n in readers.values())


def first_readers(layers: list, held: dict) -> dict:
    """{input: index of the first layer reading it}: its load must be out before that layer's commands."""
    out = {}
    for i, layer in enumerate(layers):
        for name in layer.inputs:
            if name in held:
                out.setdefault(name, i)
    return out


def loads(held: dict, homes: dict, readers: dict, starts: dict) -> list:
    """Weight-streamer queue items (weights.WeightStreamer.queue) of the held inputs: (first reader, layer
    the load may start in, bytes, DMA operands) with one DMA of all rows, DDR home -> SRAM."""
    items = []
    for name, sram in held.items():
        home = homes[name]
        rows = sram.view[0] * sram.view[1]
        dma = (home.addr, sram.addr, rows, sram.row_bytes, home.row_stride, sram.row_stride)
        items.append((readers[name], starts[name], rows * sram.row_bytes, dma))
    return items
