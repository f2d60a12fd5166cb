"""Stage 4b — plan: place tensors in DDR and SRAM, tile each layer, schedule its DMA, emit commands.

Per layer: the constants (weights, bias or requantization block) are loaded once on DMA channel 1; the
output is split into row tiles whose input slices, output slice and constants fit SRAM with double
buffering; input tiles stream in on channel 0 and results stream out on channel 1 while the compute
engine (MAC array or vector unit) works on the next tile. The tile height is chosen with the cost model
(cost_model.py), the same one the reports use.

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
from .stream import (ACTIVATIONS, DTYPE_BYTES, DTYPES, NO_BIAS, POOL_KINDS, Command, Stream, TensorDesc,
                     f32_bits)

ALL_ENGINES = ("dma0", "dma1", "mac", "vector")


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class Placed:
    """A DDR-resident activation: address and row stride of its [N, H, W, C] view."""

    addr: int
    view: tuple
    row_stride: int
    elem: int

    @property
    def row_bytes(self) -> int:
        return self.view[2] * self.view[3] * self.elem


@dataclass
class Tile:
    n: int
    out_r0: int
    out_r1: int
    in_r0: int
    in_r1: int
    pad_top: int


def _tiles(layer: Layer, in_view, out_view, tile_oh: int) -> list[Tile]:
    kh, sh, dh, pad_top = layer.taps
    tiles = []
    for n in range(out_view[0]):
        for r0 in range(0, out_view[1], tile_oh):
            r1 = min(out_view[1], r0 + tile_oh)
            first = r0 * sh - pad_top
            last = (r1 - 1) * sh - pad_top + (kh - 1) * dh  # inclusive
            in_r0 = min(max(0, first), in_view[1] - 1)
            in_r1 = max(in_r0 + 1, min(in_view[1], last + 1))
            tiles.append(Tile(n, r0, r1, in_r0, in_r1, in_r0 - first))
    return tiles


def constant_block(cfg: NPUConfig, layer: Layer) -> tuple[bytes, int, int]:
    """(bytes, weight row stride, weight block size) of a conv layer's constants, as stored in DDR:
    the weight rows, then the fp32 bias or the int8 requantization block (bias, M, n rows)."""
    a = cfg.alignment
    oc = layer.weight.shape[0]
    row = int(np.prod(layer.weight.shape[1:])) * layer.weight.itemsize
    w_stride = align(row, a)
    block = np.zeros((oc, w_stride), np.uint8)
    block[:, :row] = layer.weight.reshape(oc, -1).view(np.uint8)
    data = block.tobytes()
    vec = align(oc * 4, a)
    if layer.dtype == "int8":  # the requantization block: bias (int32) and scale (fp32) rows
        data += np.asarray(layer.bias, "<i4").tobytes().ljust(vec, b"\0")
        data += np.asarray(layer.scale, "<f4").tobytes().ljust(vec, b"\0")
    elif layer.bias is not None:
        data += layer.bias.astype("<f4").tobytes().ljust(vec, b"\0")
    return data, w_stride, oc * w_stride


def _compute(cfg: NPUConfig, layer: Layer, t: Tile, ins: list, src: list, dst: Placed, out_addr: int,
             w_addr: int, w_stride: int, b_addr: int | None) -> Command:
    """The CONV2D / ADD / POOL command of one tile."""
    dtype = DTYPES[layer.dtype]
    int8 = layer.dtype == "int8"
    lo, hi = layer.clamp if int8 else (f32_bits(layer.clip[0]), f32_bits(layer.clip[1]))
    act = 0 if int8 else ACTIVATIONS[layer.act]
    rows = t.out_r1 - t.out_r0
    if layer.kind == "add":
        a = dict(dtype=dtype, a_addr=ins[0], a_stride=src[0].row_stride, b_addr=ins[1],
                 b_stride=src[1].row_stride, out_addr=out_addr, out_stride=dst.row_stride, rows=rows,
                 row_elems=dst.view[2] * dst.view[3], act=act, clip_lo=lo, clip_hi=hi)
        if int8:
            a.update(a_zp=layer.in_zps[0], b_zp=layer.in_zps[1], out_zp=layer.out_zp,
                     a_mult=int(layer.mult[0]), b_mult=int(layer.mult[1]), shift=layer.shift)
        return Command("ADD", a, {"dma0": 0, "dma1": 1}, layer.name)
    s = src[0]
    common = dict(dtype=dtype, in_addr=ins[0], in_h=t.in_r1 - t.in_r0, in_w=s.view[2], in_stride=s.row_stride,
                  out_addr=out_addr, out_h=rows, out_w=dst.view[2], out_stride=dst.row_stride,
                  stride_h=layer.stride[0], stride_w=layer.stride[1], pad_top=t.pad_top,
                  pad_left=layer.padding[1], act=act, clip_lo=lo, clip_hi=hi)
    if layer.kind == "pool":
        a = dict(common, kind=POOL_KINDS[layer.pool_kind], c=s.view[3], kh=layer.window[0],
                 kw=layer.window[1])
        if int8:
            a.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp, scale=f32_bits(float(layer.scale[0])))
        return Command("POOL", a, {"dma0": 0, "dma1": 1}, layer.name)
    oc, kh, kw, _ = layer.weight.shape
    a = dict(common, in_c=s.view[3], w_addr=w_addr, w_stride=w_stride, kh=kh, kw=kw, oc=oc,
             bias_addr=NO_BIAS if b_addr is None else b_addr, dil_h=layer.dilation[0],
             dil_w=layer.dilation[1], groups=layer.groups)
    if int8:
        a.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp)
    return Command("CONV2D", a, {"dma0": 0, "dma1": 1}, layer.name)


def _layer_commands(cfg: NPUConfig, layer: Layer, src: list, dst: Placed, consts: tuple | None,
                    tile_oh: int) -> tuple[list[Command], int]:
    """Commands of one layer for a given tile height, and the SRAM bytes they use."""
    a = cfg.alignment
    engine = "mac" if layer.kind == "conv" else "vector"
    tiles = _tiles(layer, src[0].view, dst.view, tile_oh)
    in_rows = max(t.in_r1 - t.in_r0 for t in tiles)
    top = 0
    cmds = []
    w_addr = w_stride = 0
    b_addr = None
    barrier = {e: 0 for e in ALL_ENGINES}  # SRAM and DDR are reused across layers: start clean
    if consts is not None:
        ddr_addr, nbytes, w_stride, w_bytes = consts
        w_addr = 0
        if nbytes > w_bytes:
            b_addr = w_bytes
        top = align(nbytes, a)
        cmds.append(Command("DMA_LOAD", dict(channel=1, ddr_addr=ddr_addr, sram_addr=0, rows=1,
                                             row_bytes=nbytes, ddr_stride=align(nbytes, a),
                                             sram_stride=align(nbytes, a)), barrier, layer.name))
        barrier = {}
    in_bufs = []
    for s in src:
        size = in_rows * s.row_stride
        in_bufs.append([top, top + size])
        top += 2 * size
    out_size = tile_oh * dst.row_stride
    out_bufs = [top, top + out_size]
    used = top + 2 * out_size

    def loads(i, t, waits):
        out = []
        for k, s in enumerate(src):
            out.append(Command("DMA_LOAD", dict(
                channel=0, ddr_addr=s.addr + (t.n * s.view[1] + t.in_r0) * s.row_stride,
                sram_addr=in_bufs[k][i % 2], rows=t.in_r1 - t.in_r0, row_bytes=s.row_bytes,
                ddr_stride=s.row_stride, sram_stride=s.row_stride), waits if k == 0 else {}, layer.name))
        return out

    cmds += loads(0, tiles[0], barrier)
    for i, t in enumerate(tiles):
        cmd = _compute(cfg, layer, t, [b[i % 2] for b in in_bufs], src, dst, out_bufs[i % 2], w_addr,
                       w_stride, b_addr)
        if i == 0:
            cmd.waits["dma1"] = 0  # the constants are in
        cmds.append(cmd)
        if i + 1 < len(tiles):
            # Refill the other input buffers once the compute that read them (tile i-1) is done.
            cmds += loads(i + 1, tiles[i + 1], {engine: 1})
        cmds.append(Command("DMA_STORE", dict(
            channel=1, sram_addr=out_bufs[i % 2],
            ddr_addr=dst.addr + (t.n * dst.view[1] + t.out_r0) * dst.row_stride, rows=t.out_r1 - t.out_r0,
            row_bytes=dst.row_bytes, sram_stride=dst.row_stride, ddr_stride=dst.row_stride),
            {engine: 0}, layer.name))
    return cmds, used


def plan_layer(cfg: NPUConfig, layer: Layer, src: list, dst: Placed, consts: tuple | None):
    """Pick the tile height with the lowest estimated cycles among those that fit SRAM."""
    out_h = dst.view[1]
    candidates = sorted({math.ceil(out_h / k) for k in range(1, min(out_h, 64) + 1)}, reverse=True)
    best, smallest = None, None
    for tile_oh in candidates:
        cmds, used = _layer_commands(cfg, layer, src, dst, consts, tile_oh)
        smallest = used
        if used > cfg.sram_bytes:
            continue
        cycles = cost_model.estimate(cfg, cmds).total_cycles
        if best is None or cycles < best[0]:
            best = (cycles, cmds, used)
    if best is None:
        const_bytes = consts[1] if consts else 0
        raise NPUError("ERR_SRAM_OVERFLOW",
                       f"layer {layer.name} ({layer.composite}) needs {smallest} bytes of SRAM even with "
                       f"one output row per tile ({const_bytes} bytes of weights); the NPU has "
                       f"{cfg.sram_bytes}. Use a configuration with more SRAM, or fewer channels per layer")
    return best[1], best[2]


def plan(cfg: NPUConfig, graph: Graph) -> Stream:
    """Place every tensor, plan every layer, and return the stream (weights included)."""
    a = cfg.alignment
    weights = bytearray()
    consts = {}
    for layer in graph.layers:
        if layer.kind == "conv":
            data, w_stride, w_bytes = constant_block(cfg, layer)
            consts[layer.name] = (len(weights), len(data), w_stride, w_bytes)
            weights += data.ljust(align(len(data), a), b"\0")
    ddr_top = align(len(weights), a)
    placed = {}
    for name, info in graph.tensors.items():
        n, h, w, c = info.view
        elem = DTYPE_BYTES[info.dtype]
        row_stride = align(w * c * elem, a)
        placed[name] = Placed(ddr_top, info.view, row_stride, elem)
        ddr_top += align(n * h * row_stride, a)
    commands, sram_used = [], 0
    for layer in graph.layers:
        cmds, used = plan_layer(cfg, layer, [placed[t] for t in layer.inputs], placed[layer.out],
                                consts.get(layer.name))
        commands += cmds
        sram_used = max(sram_used, used)
    # The call ends when the last results are in DDR.
    commands.append(Command("END", {}, {e: 0 for e in ALL_ENGINES}))
    tensors = []
    for role, names in (("input", graph.inputs), ("output", graph.outputs)):
        for i, name in enumerate(names):
            info, p = graph.tensors[name], placed[name]
            tensors.append(TensorDesc(role, i, info.dtype, info.host_dtype, info.host_layout,
                                      info.host_shape, info.view, p.addr, p.row_stride))
    n_tensors = len(tensors) + len(consts)
    if n_tensors > cfg.max_tensors:
        raise NPUError("ERR_TASK_TOO_COMPLEX",
                       f"{graph.symbol} references {n_tensors} tensors; the NPU takes {cfg.max_tensors} "
                       "per task")
    return Stream(cfg, tensors, commands, bytes(weights), ddr_top, sram_used)
