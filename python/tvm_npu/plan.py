"""Stage 4b — plan: place tensors in DDR and SRAM, tile each layer, schedule its DMA, emit commands.

Per layer: the weights and bias are loaded once (DMA channel 1); the output is split into row tiles
whose input slice, output slice and weights fit SRAM with double buffering; input tiles stream in on
channel 0 and results stream out on channel 1 while the MAC array computes the next tile. The tile
height is chosen with the cost model (cost_model.py), the same one the reports use.

Intermediates between layers go through DDR in this version; keeping chains in SRAM (cascading),
liveness-based reuse and weight streaming are the compiler-core work of issue 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import cost_model
from .config import NPUConfig
from .errors import NPUError
from .lower import Graph, Layer
from .stream import ACTIVATIONS, DTYPE_BYTES, DTYPES, NO_BIAS, Command, Stream, TensorDesc, f32_bits

ELEM = DTYPE_BYTES["float16"]


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class Placed:
    """A DDR-resident activation: address and row stride of its [N, H, W, C] view."""

    addr: int
    view: tuple
    row_stride: int


@dataclass
class Tile:
    n: int
    out_r0: int
    out_r1: int
    in_r0: int
    in_r1: int
    pad_top: int


def _tiles(layer: Layer, in_view, out_view, tile_oh: int) -> list[Tile]:
    kh = layer.weight.shape[1]
    sh, dh, pad_top = layer.stride[0], layer.dilation[0], layer.padding[0]
    tiles = []
    for n in range(out_view[0]):
        for r0 in range(0, out_view[1], tile_oh):
            r1 = min(out_view[1], r0 + tile_oh)
            first = r0 * sh - pad_top
            last = (r1 - 1) * sh - pad_top + (kh - 1) * dh  # inclusive
            in_r0, in_r1 = max(0, first), min(in_view[1], last + 1)
            tiles.append(Tile(n, r0, r1, in_r0, max(in_r0, in_r1), in_r0 - first))
    return tiles


def _layer_commands(cfg: NPUConfig, layer: Layer, src: Placed, dst: Placed, w_addr: int,
                    b_addr: int | None, tile_oh: int) -> tuple[list[Command], int]:
    """Commands of one layer for a given tile height, and the SRAM bytes they use."""
    a = cfg.alignment
    oc, kh, kw, ic = layer.weight.shape
    w_stride = align(kh * kw * ic * ELEM, a)
    w_bytes = oc * w_stride
    b_bytes = align(oc * 4, a) if b_addr is not None else 0
    tiles = _tiles(layer, src.view, dst.view, tile_oh)
    in_rows = max(t.in_r1 - t.in_r0 for t in tiles)
    in_buf, out_buf = in_rows * src.row_stride, tile_oh * dst.row_stride
    sram_w, sram_b = 0, w_bytes
    sram_in = [sram_b + b_bytes, sram_b + b_bytes + in_buf]
    sram_out = [sram_in[1] + in_buf + i * out_buf for i in (0, 1)]
    used = sram_out[1] + out_buf
    note = layer.name
    # Weights and bias reuse SRAM that earlier layers used: wait until all their work is done.
    cmds = [Command("DMA_LOAD", dict(channel=1, ddr_addr=w_addr, sram_addr=sram_w, rows=oc,
                                     row_bytes=kh * kw * ic * ELEM, ddr_stride=w_stride,
                                     sram_stride=w_stride), {"mac": 0, "dma0": 0, "dma1": 0}, note)]
    if b_addr is not None:
        cmds.append(Command("DMA_LOAD", dict(channel=1, ddr_addr=b_addr, sram_addr=sram_b, rows=1,
                                             row_bytes=oc * 4, ddr_stride=b_bytes, sram_stride=b_bytes),
                            {}, note))

    def load(i, t):
        rows = t.in_r1 - t.in_r0
        return Command("DMA_LOAD", dict(channel=0, ddr_addr=src.addr + (t.n * src.view[1] + t.in_r0)
                                        * src.row_stride, sram_addr=sram_in[i % 2], rows=max(rows, 1),
                                        row_bytes=src.view[2] * src.view[3] * ELEM,
                                        ddr_stride=src.row_stride, sram_stride=src.row_stride),
                       {"mac": 1}, note)

    lo, hi = layer.clip
    cmds.append(load(0, tiles[0]))
    for i, t in enumerate(tiles):
        cmds.append(Command("CONV2D", dict(
            dtype=DTYPES["float16"], in_addr=sram_in[i % 2], in_h=t.in_r1 - t.in_r0, in_w=src.view[2],
            in_c=src.view[3], in_stride=src.row_stride, w_addr=sram_w, w_stride=w_stride, kh=kh, kw=kw,
            oc=oc, bias_addr=sram_b if b_addr is not None else NO_BIAS, out_addr=sram_out[i % 2],
            out_h=t.out_r1 - t.out_r0, out_w=dst.view[2], out_stride=dst.row_stride,
            stride_h=layer.stride[0], stride_w=layer.stride[1], dil_h=layer.dilation[0],
            dil_w=layer.dilation[1], pad_top=t.pad_top, pad_left=layer.padding[1],
            act=ACTIVATIONS[layer.act], clip_lo=f32_bits(lo), clip_hi=f32_bits(hi), groups=1),
            # Own input tile loaded; the store that last used this output buffer finished.
            {"dma0": 0, "dma1": 0 if i == 0 else 1}, note))
        if i + 1 < len(tiles):
            # Refill the other input buffer once the compute that read it (tile i-1) is done.
            cmds.append(load(i + 1, tiles[i + 1]))
        rows = t.out_r1 - t.out_r0
        cmds.append(Command("DMA_STORE", dict(
            channel=1, sram_addr=sram_out[i % 2],
            ddr_addr=dst.addr + (t.n * dst.view[1] + t.out_r0) * dst.row_stride, rows=rows,
            row_bytes=dst.view[2] * dst.view[3] * ELEM, sram_stride=dst.row_stride,
            ddr_stride=dst.row_stride), {"mac": 0}, note))
    return cmds, used


def plan_layer(cfg: NPUConfig, layer: Layer, src: Placed, dst: Placed, w_addr: int,
               b_addr: int | None) -> tuple[list[Command], int]:
    """Pick the tile height with the lowest estimated cycles among those that fit SRAM."""
    out_h = dst.view[1]
    candidates = sorted({math.ceil(out_h / k) for k in range(1, min(out_h, 64) + 1)}, reverse=True)
    best = None
    smallest = None
    for tile_oh in candidates:
        cmds, used = _layer_commands(cfg, layer, src, dst, w_addr, b_addr, tile_oh)
        smallest = used
        if used > cfg.sram_bytes:
            continue
        cycles = cost_model.estimate(cfg, cmds).total_cycles
        if best is None or cycles < best[0]:
            best = (cycles, cmds, used)
    if best is None:
        raise NPUError("ERR_SRAM_OVERFLOW",
                       f"layer {layer.name} ({layer.composite}) needs {smallest} bytes of SRAM even with "
                       f"one output row per tile (weights {layer.weight.nbytes} bytes); the NPU has "
                       f"{cfg.sram_bytes}. Use a configuration with more SRAM, or fewer channels per layer")
    return best[1], best[2]


def plan(cfg: NPUConfig, graph: Graph) -> Stream:
    """Place every tensor, plan every layer, and return the stream (weights included)."""
    a = cfg.alignment
    weights = bytearray()
    w_addrs = {}
    for layer in graph.layers:
        oc, kh, kw, ic = layer.weight.shape
        stride = align(kh * kw * ic * ELEM, a)
        block = np.zeros((oc, stride), np.uint8)
        block[:, :kh * kw * ic * ELEM] = np.ascontiguousarray(layer.weight).reshape(oc, -1).view(np.uint8)
        w_addrs[layer.name] = [len(weights), None]
        weights += block.tobytes()
        if layer.bias is not None:
            w_addrs[layer.name][1] = len(weights)
            weights += layer.bias.astype("<f4").tobytes().ljust(align(oc * 4, a), b"\0")
    ddr_top = align(len(weights), a)
    placed = {}
    for name, info in graph.tensors.items():
        n, h, w, c = info.view
        row_stride = align(w * c * ELEM, a)
        placed[name] = Placed(ddr_top, info.view, row_stride)
        ddr_top += align(n * h * row_stride, a)
    commands, sram_used = [], 0
    for layer in graph.layers:
        cmds, used = plan_layer(cfg, layer, placed[layer.inp], placed[layer.out], *w_addrs[layer.name])
        commands += cmds
        sram_used = max(sram_used, used)
    # The call ends when the last results are in DDR.
    commands.append(Command("END", {}, {e: 0 for e in ("dma0", "dma1", "mac")}))
    tensors = []
    for role, names in (("input", graph.inputs), ("output", graph.outputs)):
        for i, name in enumerate(names):
            info, p = graph.tensors[name], placed[name]
            tensors.append(TensorDesc(role, i, "float16", "float32", info.host_layout, info.host_shape,
                                      info.view, p.addr, p.row_stride))
    if len(tensors) + 2 * len(graph.layers) > cfg.max_tensors:
        raise NPUError("ERR_TASK_TOO_COMPLEX",
                       f"{graph.symbol} references {len(tensors) + 2 * len(graph.layers)} tensors; the NPU "
                       f"takes {cfg.max_tensors} per task")
    return Stream(cfg, tensors, commands, bytes(weights), ddr_top, sram_used)
