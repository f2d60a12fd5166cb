"""Stage 4 — plan: turn a lowered region into a command stream, in order:

    constants   weights / biases / requantization blocks laid out in DDR (per output-channel block)
    DDR         every region tensor that is not SRAM-resident gets a DDR home
    state       an unrolled recurrence's state pinned in SRAM for its whole life (recurrence.py)
    slices      concatenations resident in SRAM, their inputs written into their channels (slices.py)
    SRAM        intermediates kept resident by live range (sram.py); per-layer working buffers
    tiling      row tiles (and output-channel blocks for dense weights larger than SRAM), the tile
                height chosen with the cost model among those that fit (tiling.py, cost_model.py)
    weights     each layer's weight slot placed in SRAM over the longest run of earlier layers it can
                share SRAM with (weights.py), so its load overlaps their compute
    DMA         inputs stream in on channel 0, results out on channel 1; weights on channel 1 in chunks
                paced by the compute they hide behind; waits derived from data dependencies (schedule.py)

If residency leaves a layer too little working SRAM, the region is planned again without residents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...contract.config import NPUConfig
from ...contract.errors import NPUError
from ...contract.stream import (
    ACTIVATIONS,
    DTYPE_BYTES,
    DTYPES,
    NO_BIAS,
    POOL_KINDS,
    SLICE_ALIGNMENT,
    Command,
    Stream,
    TensorDesc,
    f32_bits,
)
from ..lower.graph import Graph, Layer
from . import cost_model, recurrence, slices
from .schedule import Scoreboard, emit_constant_load, emit_dma
from .sram import Arena, align, live_ranges, place_residents, resident_top
from .tiling import oc_blocks, row_tiles, tile_heights
from .vector_commands import VECTOR_OPS, binary_requant, vector_command, vector_footprint
from .weights import WeightStreamer, place_weight_slots

# Fractions of SRAM offered to resident intermediates (0: everything streams through DDR).
RESIDENT_SHARES = (0.0, 0.5, 0.7, 0.85)


@dataclass
class Placed:
    """Where a region tensor lives: in DDR, or resident in SRAM; its [N, H, W, C] view and row stride."""

    space: str  # "ddr" or "sram"
    addr: int
    view: tuple
    row_stride: int
    elem: int
    pstride: int = 0  # bytes between pixels when the tensor is a channel slice (slices.py); 0: packed

    @property
    def row_bytes(self) -> int:
        px = self.view[3] * self.elem
        return (self.view[2] - 1) * self.pstride + px if self.pstride else self.view[2] * px

    def row_addr(self, n: int, r: int) -> int:
        return self.addr + (n * self.view[1] + r) * self.row_stride

    @property
    def nbytes(self) -> int:
        return self.view[0] * self.view[1] * self.row_stride


@dataclass
class Block:
    """The constants of one output-channel block of a conv layer, as stored in DDR."""

    oc0: int
    oc1: int
    ddr_addr: int
    nbytes: int
    w_stride: int
    w_bytes: int


@dataclass
class LayerPlan:
    tile_oh: int
    blocks: list
    w_slot: int | None
    in_bufs: list  # per input: [ping, pong] SRAM addresses, or None when the input is resident
    out_bufs: list | None  # [ping, pong], or None when the output is resident
    base: int  # first SRAM byte of the layer's activation buffers
    top: int  # first SRAM byte above them (the weight slot is placed separately, weights.py)
    cycles: int = 0
    # Per constant block: its SRAM slot, and the index of the layer during which the weight streamer
    # may start loading it (None: loaded by the layer itself, after the previous block's computes,
    # into the slot the previous block used). Set by weights.place_weight_slots.
    w_slots: list | None = None
    load_after: list | None = None

    def __post_init__(self):
        self.w_slots = self.w_slots or [self.w_slot] * len(self.blocks)
        self.load_after = self.load_after or [None] * len(self.blocks)


def constant_bytes(cfg: NPUConfig, layer: Layer, oc0: int, oc1: int) -> tuple[bytes, int, int]:
    """Weights rows [oc0, oc1) then the fp32 bias or the int8 requantization block (bias, scale); for a
    vector layer its one constant row (ELTWISE's b, or UNARY's int8 table)."""
    if layer.const is not None:
        raw = np.ascontiguousarray(layer.const).tobytes()
        return raw, 0, 0
    w = layer.weight[oc0:oc1]
    oc = oc1 - oc0
    # Rows packed (docs/npu.md section 3); the bias / requantization rows start aligned after them.
    w_stride = int(np.prod(w.shape[1:])) * w.itemsize
    data = np.ascontiguousarray(w).tobytes()
    data = data.ljust(align(len(data), cfg.alignment), b"\0")
    vec = align(oc * 4, cfg.alignment)
    if layer.dtype == "int8":
        data += np.asarray(layer.bias[oc0:oc1], "<i4").tobytes().ljust(vec, b"\0")
        data += np.asarray(layer.scale[oc0:oc1], "<f4").tobytes().ljust(vec, b"\0")
    elif layer.bias is not None:
        data += layer.bias[oc0:oc1].astype("<f4").tobytes().ljust(vec, b"\0")
    return data, w_stride, align(oc * w_stride, cfg.alignment)


def _block_size(cfg: NPUConfig, layer: Layer, dst: Placed, in_bytes: int, small_first: bool = True) -> list[int]:
    """Output-channel block sizes to try, best first. Every block re-reads the layer's input, so blocks
    are as large as fit — except for a weight-heavy layer on a small input (a classifier): its weights
    come in blocks of at most an eighth of SRAM, so the weight streamer (weights.py) can load each
    block into whatever SRAM frees up earliest instead of waiting for room for the whole matrix.

    A convolution's output pixel interleaves all its channels: a block writes its channels of each
    pixel through the output pixel stride (docs/npu.md section 3), into the resident tensor or a packed
    tile that DMA scatters to DDR pixel by pixel — which needs the DDR pixel stride aligned."""
    oc = layer.weight.shape[0]
    sizes = [oc]
    scatter_ok = dst.space == "sram" or dst.view[3] * dst.elem % cfg.alignment == 0
    if layer.kind == "conv" and layer.groups == 1 and (dst.view[2] == 1 or scatter_ok):
        # Block starts: aligned for a DMA scatter or a dense row, one 16-byte beat inside SRAM.
        beat = SLICE_ALIGNMENT if dst.space == "sram" and dst.view[2] > 1 else cfg.alignment
        step = math.lcm(cfg.mac_cols, max(1, beat // dst.elem))
        b = (oc // 2) // step * step
        while b >= step:
            sizes.append(b)
            b = (b // 2) // step * step
        row = layer.weight[0].nbytes
        small = (
            [n for n in sizes if n * row <= cfg.sram_bytes // 8]
            if small_first and _weight_heavy(layer, in_bytes)
            else []
        )
        sizes = small + [n for n in sizes if n not in small]
    return sizes


def _weight_heavy(layer: Layer, in_bytes: int) -> bool:
    """A classifier-like layer: weights far larger than its input (see _block_size)."""
    return in_bytes * 64 <= layer.weight.nbytes


def _broadcast(layer: Layer, k: int) -> bool:
    """Input `k` is a per-channel ELTWISE b: the one row (0, 0) of its tensor serves every tile."""
    return layer.kind == "eltwise" and k == 1 and layer.b_mode != "same"


def _src_rows(layer: Layer, k: int, rows: int) -> int:
    return 1 if _broadcast(layer, k) else rows


def _layout(cfg, layer, srcs, dst, blocks, base, tile_oh) -> LayerPlan | None:
    arena = Arena(cfg, base)
    tiles = row_tiles(layer, srcs[0].view, dst.view, tile_oh)
    in_rows = max(t.in_rows for t in tiles)
    in_bufs = [
        None if s.space == "sram" else [arena.take(_src_rows(layer, k, in_rows) * s.row_stride) for _ in (0, 1)]
        for k, s in enumerate(srcs)
    ]
    out_rows = max(t.out_rows for t in tiles)  # the last tile may have grown (tiling.row_tiles)
    out_bytes = (
        out_rows * align(dst.view[2] * max(b.oc1 - b.oc0 for b in blocks) * dst.elem, cfg.alignment)
        if blocks and len(blocks) > 1
        else out_rows * dst.row_stride
    )
    out_bufs = None if dst.space == "sram" else [arena.take(out_bytes) for _ in (0, 1)]
    top = arena.top
    # Until weights.place_weight_slots finds it an earlier home, the weight slot sits right above.
    w_slot = arena.take(max(b.nbytes for b in blocks)) if blocks else None
    if arena.top > cfg.sram_bytes:
        return None
    return LayerPlan(tile_oh, blocks, w_slot, in_bufs, out_bufs, base, top)


def _compute(
    cfg, layer: Layer, t, ins: list, srcs: list, dst: Placed, out_addr: int, out_stride: int, blk: Block | None, w_slot
) -> Command:
    """The CONV2D / ADD / POOL command of one tile (and one output-channel block)."""
    int8 = layer.dtype == "int8"
    lo, hi = layer.clamp if int8 else (f32_bits(layer.clip[0]), f32_bits(layer.clip[1]))
    common = dict(dtype=DTYPES[layer.dtype], act=0 if int8 else ACTIVATIONS[layer.act], clip_lo=lo, clip_hi=hi)
    if layer.kind in ("eltwise", "unary", "softmax"):
        return vector_command(cfg, layer, t, ins, srcs, dst, out_addr, out_stride, w_slot, common)
    if layer.kind == "add":
        a = dict(
            common,
            a_addr=ins[0],
            a_stride=srcs[0].row_stride,
            b_addr=ins[1],
            b_stride=srcs[1].row_stride,
            out_addr=out_addr,
            out_stride=out_stride,
            rows=t.out_rows,
            row_elems=dst.view[2] * dst.view[3],
        )
        if int8:
            a.update(binary_requant(layer))
        return Command("ADD", a, {}, layer.name)
    s = srcs[0]
    # A slice keeps its pixel stride in SRAM: resident, or loaded row by row into a tile buffer. An
    # output tile bound for DDR is packed (slices are resident, so that never meets a pstride).
    a = dict(
        common,
        in_addr=ins[0],
        in_h=t.in_rows,
        in_w=s.view[2],
        in_stride=s.row_stride,
        out_addr=out_addr,
        out_h=t.out_rows,
        out_w=dst.view[2],
        out_stride=out_stride,
        stride_h=layer.stride[0],
        stride_w=layer.stride[1],
        pad_top=t.pad_top,
        pad_left=layer.padding[1],
        in_pstride=s.pstride,
        out_pstride=0,
    )
    if dst.space == "sram":  # a slice, or one channel block of the resident tensor: its pixel stride
        partial = blk is not None and blk.oc1 - blk.oc0 != dst.view[3]
        a["out_pstride"] = dst.pstride or (dst.view[3] * dst.elem if partial and dst.view[2] > 1 else 0)
    if layer.kind == "pool":
        a.update(kind=POOL_KINDS[layer.pool_kind], c=s.view[3], kh=layer.window[0], kw=layer.window[1])
        if int8:
            a.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp, scale=f32_bits(float(layer.scale[0])))
        return Command("POOL", a, {}, layer.name)
    _, kh, kw, _ = layer.weight.shape
    has_bias = int8 or layer.bias is not None
    a.update(
        in_c=s.view[3],
        w_addr=w_slot,
        w_stride=blk.w_stride,
        kh=kh,
        kw=kw,
        oc=blk.oc1 - blk.oc0,
        bias_addr=w_slot + blk.w_bytes if has_bias else NO_BIAS,
        dil_h=layer.dilation[0],
        dil_w=layer.dilation[1],
        groups=layer.groups,
    )
    if int8:
        a.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp)
    return Command("CONV2D", a, {}, layer.name)


def _footprint(cfg: NPUConfig, cmd: Command) -> tuple[list, list]:
    """(reads, writes) of a compute command in SRAM, as (space, lo, hi) ranges."""
    a = cmd.args
    if cmd.op in VECTOR_OPS:
        return vector_footprint(cfg, cmd)
    if cmd.op == "ADD":
        return (
            [
                ("sram", a["a_addr"], a["a_addr"] + a["rows"] * a["a_stride"]),
                ("sram", a["b_addr"], a["b_addr"] + a["rows"] * a["b_stride"]),
            ],
            [("sram", a["out_addr"], a["out_addr"] + a["rows"] * a["out_stride"])],
        )
    reads = [("sram", a["in_addr"], a["in_addr"] + a["in_h"] * a["in_stride"])]
    if cmd.op == "CONV2D":
        reads.append(("sram", a["w_addr"], a["w_addr"] + a["oc"] * a["w_stride"]))
        if a["bias_addr"] != NO_BIAS:
            rows = 2 if a["dtype"] == DTYPES["int8"] else 1
            reads.append(("sram", a["bias_addr"], a["bias_addr"] + rows * align(a["oc"] * 4, cfg.alignment)))
    return reads, [("sram", a["out_addr"], a["out_addr"] + a["out_h"] * a["out_stride"])]


def emit_layer(sb: Scoreboard, cfg, layer: Layer, srcs: list, dst: Placed, lp: LayerPlan, after_compute=None):
    """Commands of one layer into `sb`: per output-channel block, per row tile: load, compute, store.
    `after_compute(cmd)` runs after each tile's commands (the weight streamer paces itself on it)."""
    tiles = row_tiles(layer, srcs[0].view, dst.view, lp.tile_oh)
    blocks = lp.blocks or [None]
    for bi, blk in enumerate(blocks):
        if blk is not None and lp.load_after[bi] is None:  # not streamed in, nor resident (weights.py)
            emit_constant_load(sb, blk.ddr_addr, lp.w_slots[bi], blk.nbytes, cfg.alignment, layer.name)
        oc0 = blk.oc0 if blk is not None else 0
        ocb = (blk.oc1 - blk.oc0) if blk is not None else dst.view[3]

        def inputs_of(i, t):
            addrs = []
            for k, s in enumerate(srcs):
                # A broadcast b is the one row (0, 0) of its tensor for every tile.
                n, r0 = (0, 0) if _broadcast(layer, k) else (t.n, t.in_r0)
                if lp.in_bufs[k] is None:
                    addrs.append(s.row_addr(n, r0))
                    continue
                buf = lp.in_bufs[k][i % 2]
                emit_dma(
                    sb,
                    "DMA_LOAD",
                    0,
                    s.row_addr(n, r0),
                    buf,
                    _src_rows(layer, k, t.in_rows),
                    s.row_bytes,
                    s.row_stride,
                    s.row_stride,
                    layer.name,
                )
                addrs.append(buf)
            return addrs

        pending = inputs_of(0, tiles[0])
        for i, t in enumerate(tiles):
            if dst.space == "sram":
                out_addr, out_stride = dst.row_addr(t.n, t.out_r0) + oc0 * dst.elem, dst.row_stride
            else:
                out_addr = lp.out_bufs[i % 2]
                out_stride = dst.row_stride if len(blocks) == 1 else align(dst.view[2] * ocb * dst.elem, cfg.alignment)
            cmd = _compute(
                cfg,
                layer,
                t,
                pending,
                srcs,
                dst,
                out_addr,
                out_stride,
                blk,
                lp.w_slots[bi] if blk is not None else None,
            )
            reads, writes = _footprint(cfg, cmd)
            sb.emit(cmd, reads, writes)
            if i + 1 < len(tiles):
                pending = inputs_of(i + 1, tiles[i + 1])
            if dst.space != "sram" and (len(blocks) == 1 or dst.view[2] == 1):
                row_bytes = dst.row_bytes if len(blocks) == 1 else ocb * dst.elem
                emit_dma(
                    sb,
                    "DMA_STORE",
                    1,
                    dst.row_addr(t.n, t.out_r0) + oc0 * dst.elem,
                    out_addr,
                    t.out_rows,
                    row_bytes,
                    dst.row_stride,
                    out_stride,
                    layer.name,
                )
            elif dst.space != "sram":  # a channel block of a feature map: scatter each row's pixels
                px = dst.view[3] * dst.elem
                for r in range(t.out_rows):
                    emit_dma(
                        sb,
                        "DMA_STORE",
                        1,
                        dst.row_addr(t.n, t.out_r0 + r) + oc0 * dst.elem,
                        out_addr + r * out_stride,
                        dst.view[2],
                        ocb * dst.elem,
                        px,
                        ocb * dst.elem,
                        layer.name,
                    )
            if after_compute is not None:
                after_compute(cmd)


def _choose(cfg, layer, srcs, dst, blocks_options, base) -> LayerPlan | None:
    """The fastest (estimated) tile height and block size among those that fit above `base`."""
    best = None
    for blocks in blocks_options:
        for tile_oh in tile_heights(dst.view[1]):
            lp = _layout(cfg, layer, srcs, dst, blocks, base, tile_oh)
            if lp is None:
                continue
            sb = Scoreboard()
            emit_layer(sb, cfg, layer, srcs, dst, lp)
            lp.cycles = cost_model.estimate(cfg, sb.commands).total_cycles
            if best is None or lp.cycles < best.cycles:
                best = lp
        if best is not None:
            return best  # fewer, larger blocks first: smaller ones only when nothing fits
    return None


def _any_weight_heavy(cfg: NPUConfig, graph: Graph) -> bool:
    for layer in graph.layers:
        if layer.kind == "conv" and layer.groups == 1:
            n, h, w, c = graph.tensors[layer.inputs[0]].view
            if _weight_heavy(layer, n * h * align(w * c * DTYPE_BYTES[layer.dtype], cfg.alignment)):
                return True
    return False


def compute_layers(graph: Graph) -> list:
    """The layers that become commands (views are resolved by aliasing)."""
    return [layer for layer in graph.layers if layer.kind not in ("view", "concat")]


def _place(cfg: NPUConfig, graph: Graph, budget: int, slices: dict, joined: set, pinned: set, small_first: bool):
    """Residents, constant-block options and DDR homes for a residency `budget`. DDR addresses are
    relative to the end of the weight region, which is known only once every layer's blocks are
    chosen (`_finish_ddr`). Concatenations (`joined`) are always resident, their inputs (`slices`)
    channel slices of them; None when one does not fit."""
    sizes, elems = {}, {}
    for name, info in graph.tensors.items():
        elems[name] = DTYPE_BYTES[info.dtype]
        n, h, w, c = info.view
        sizes[name] = n * h * align(w * c * elems[name], cfg.alignment)
    # Views (reshapes that keep rows) alias their input's bytes: such tensors live in DDR, once.
    roots, view_rows = {}, {}  # view -> the tensor whose bytes it is, and its first row in it
    for layer in graph.layers:
        if layer.kind == "view":
            roots[layer.out] = roots.get(layer.inputs[0], layer.inputs[0])
            view_rows[layer.out] = view_rows.get(layer.inputs[0], 0) + (layer.offsets[0] if layer.rows else 0)
    # A dense layer, or a convolution with large weights, may write its output in channel blocks; a
    # block's footprint (rows x stride from the block's first byte, docs/npu.md section 6) reaches up
    # to one row past the tensor: reserve it. So does a channel slice's past its concatenation.
    blockable = {
        layer.out
        for layer in compute_layers(graph)
        if layer.kind == "conv"
        and layer.groups == 1
        and (graph.tensors[layer.out].view[2] == 1 or layer.weight.nbytes > cfg.sram_bytes // 8)
    }
    for name in blockable:
        info = graph.tensors[name]
        sizes[name] += align(info.view[2] * info.view[3] * elems[name], cfg.alignment)
    for name in joined:
        info = graph.tensors[name]
        sizes[name] += align(info.view[2] * info.view[3] * elems[name], cfg.alignment)
    boundary = set(graph.inputs) | set(graph.outputs) | set(roots) | set(roots.values())
    ranges = live_ranges(compute_layers(graph), boundary, {t: s.root for t, s in slices.items()})
    residents = place_residents(cfg, ranges, sizes, budget, joined | pinned) if budget or joined or pinned else {}
    lost = sorted((pinned & set(ranges)) - set(residents))
    if lost:  # the same for every budget: required residents are placed first, over all of SRAM
        alive = sum(sizes[n] for n in pinned & set(ranges))
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"{graph.label}: recurrent state {lost[0]} ({sizes[lost[0]]} bytes) must stay in SRAM "
            f"from the step that writes it to the step that reads it, and it does not fit the "
            f"{cfg.sram_bytes} bytes of SRAM of {cfg.name} beside the other state and "
            f"concatenations alive with it (all state: {alive} bytes); use a configuration with "
            f"more SRAM, or a smaller hidden size or batch",
        )
    if joined - set(residents):
        return None
    blocks, data = {}, {}
    for layer in compute_layers(graph):
        if layer.const is not None:  # one block: ELTWISE's b or UNARY's table
            raw, _, _ = constant_bytes(cfg, layer, 0, 1)
            blk = Block(0, 1, -1, len(raw), 0, 0)
            data[id(blk)] = raw
            blocks[layer.name] = [[blk]]
            continue
        if layer.kind != "conv":
            continue
        oc = layer.weight.shape[0]
        options = []
        dst = Placed(
            "sram" if layer.out in residents or layer.out in slices else "ddr",
            0,
            graph.tensors[layer.out].view,
            0,
            elems[layer.out],
        )
        for size in (
            _block_size(cfg, layer, dst, sizes[layer.inputs[0]], small_first)
            if layer.out in blockable or dst.space == "ddr"
            else [layer.weight.shape[0]]
        ):
            opt = []
            for oc0, oc1 in oc_blocks(oc, size):
                raw, w_stride, w_bytes = constant_bytes(cfg, layer, oc0, oc1)
                blk = Block(oc0, oc1, -1, len(raw), w_stride, w_bytes)
                data[id(blk)] = raw
                opt.append(blk)
            options.append(opt)
        blocks[layer.name] = options
    top = 0
    placed = {}
    for name, info in graph.tensors.items():
        stride = align(info.view[2] * info.view[3] * elems[name], cfg.alignment)
        if name in roots or name in slices:
            continue
        if name in residents:
            placed[name] = Placed("sram", residents[name].addr, info.view, stride, elems[name])
        else:
            placed[name] = Placed("ddr", top, info.view, stride, elems[name])
            top += align(sizes[name], cfg.alignment)
    for name, root in roots.items():  # same bytes and rows, the alias's own [N, H, W, C] view
        r = placed[root]
        placed[name] = Placed(
            r.space, r.addr + view_rows[name] * r.row_stride, graph.tensors[name].view, r.row_stride, r.elem
        )
    for name, s in slices.items():
        r = placed[s.root]
        if s.rows:  # rows [offset, offset + H) of the stacked tensor, wherever it lives
            placed[name] = Placed(
                r.space, r.addr + s.offset * r.row_stride, graph.tensors[name].view, r.row_stride, r.elem
            )
        else:  # channels [offset, offset + C) of the resident concatenation
            placed[name] = Placed(
                "sram",
                r.addr + s.offset * r.elem,
                graph.tensors[name].view,
                r.row_stride,
                r.elem,
                pstride=r.view[3] * r.elem,
            )
    # A DMA footprint is rows x stride from its first byte; a channel block's rows start mid-row, so
    # the last tensor's last block reaches up to one row past it.
    top += max((p.row_stride for p in placed.values()), default=0)
    return residents, data, blocks, placed, top, sizes


def _finish_ddr(cfg, graph, plans, data, placed, rel_top):
    """Lay out the chosen constant blocks from DDR address 0 and move the activations above them. Blocks
    with the same bytes (an unrolled recurrence's weights, one per time step) share one copy, which also
    lets weights.py keep one load of it in SRAM."""
    weights, per_layer, copies = bytearray(), {}, {}
    for layer, lp in zip(compute_layers(graph), plans):
        for blk in lp.blocks:
            raw = data[id(blk)]
            if raw not in copies:
                copies[raw] = len(weights)
                weights += raw.ljust(align(blk.nbytes, cfg.alignment), b"\0")
            blk.ddr_addr = copies[raw]
        per_layer[layer.name] = sum(align(b.nbytes, cfg.alignment) for b in lp.blocks)
    base = align(len(weights), cfg.alignment)
    for p in {id(p): p for p in placed.values()}.values():
        if p.space == "ddr":
            p.addr += base
    return bytes(weights), base + rel_top, per_layer


def _plan_region(
    cfg: NPUConfig, graph: Graph, budget: int, slices: dict, joined: set, pinned: set, small_first: bool = True
):
    placement = _place(cfg, graph, budget, slices, joined, pinned, small_first)
    if placement is None:
        layer = next(lay for lay in graph.layers if lay.kind == "concat" and lay.out in joined)
        n, h, w, c = graph.tensors[layer.out].view
        return None, layer, n * h * align(w * c * DTYPE_BYTES[layer.dtype], cfg.alignment)
    residents, data, blocks, placed, rel_top, sizes = placement
    sb = Scoreboard()
    plans = []
    layers = compute_layers(graph)
    for i, layer in enumerate(layers):
        srcs = [placed[t] for t in layer.inputs]
        dst = placed[layer.out]
        base = resident_top(residents, i)
        # Above the previous layer's buffers, this layer's first input tiles can load while it runs.
        lp = None
        if plans and any(t.space == "ddr" for t in srcs + [dst]):
            lp = _choose(cfg, layer, srcs, dst, blocks.get(layer.name, [[]]), max(base, plans[-1].top))
        if lp is None:
            lp = _choose(cfg, layer, srcs, dst, blocks.get(layer.name, [[]]), base)
        if lp is None:
            smallest = min((b.nbytes for opt in blocks.get(layer.name, []) for b in opt), default=0)
            return None, layer, max([sizes[t] for t in layer.inputs + [layer.out]] + [smallest])
        plans.append(lp)
    weights, ddr_top, layer_weight_bytes = _finish_ddr(cfg, graph, plans, data, placed, rel_top)
    sram_top = place_weight_slots(cfg, plans, residents)
    streamer = WeightStreamer(cfg, sb, plans, [layer.name for layer in layers])
    ideal = 0
    for i, (layer, lp) in enumerate(zip(layers, plans)):
        streamer.flush(i)  # whatever of this layer's first block has not streamed in yet
        emit_layer(
            sb,
            cfg,
            layer,
            [placed[t] for t in layer.inputs],
            placed[layer.out],
            lp,
            after_compute=lambda cmd, i=i: streamer.after_compute(i, cmd),
        )
        ideal += cost_model.ideal_cycles(cfg, layer)
    commands = sb.finish()
    # Without liveness reuse every resident, every layer's buffers and every weight slot would need
    # bytes of their own.
    info = {
        "residents": sorted(residents),
        "ideal_cycles": ideal,
        "layer_weight_bytes": layer_weight_bytes,
        # Recurrent state pinned in SRAM (recurrence.py): [address, bytes, first layer, last layer]
        # (the layer that writes it and the last that reads it); no DMA moves it in between.
        "pinned_state": {
            n: [r.addr, r.size, layers[r.first].name, layers[r.last].name]
            for n, r in sorted(residents.items())
            if n in pinned
        },
        "sram_bytes_no_reuse": sum(sizes[r] for r in residents)
        + sum(p.top - p.base + sum(align(b.nbytes, cfg.alignment) for b in p.blocks) for p in plans),
        "layer_sram": {layer.name: [lp.base, lp.top] for layer, lp in zip(layers, plans)},
        "weight_slots": {
            layer.name: [[k, slot, b.nbytes] for k, slot, b in zip(lp.load_after, lp.w_slots, lp.blocks)]
            for layer, lp in zip(layers, plans)
            if lp.blocks
        },
    }
    return (commands, weights, placed, ddr_top, sram_top, info), None, 0


def plan(cfg: NPUConfig, graph: Graph) -> Stream:
    """Place every tensor, plan every layer, and return the stream (weights included)."""
    # How much SRAM to give resident intermediates is a trade: more residents mean less DDR traffic but
    # smaller tiles. Plan with a few budgets and keep the fastest schedule (the cost model decides; at
    # equal cycles, the one that moves fewer bytes). Weight-heavy layers' small blocks (_block_size) help
    # only when the streamer has earlier layers to load them behind: with the best budget, plan without
    # them too -- with them, a lone classifier on a larger SRAM ran slower and moved more bytes. (Once:
    # MobileNetV2 plans in 20% more time; per budget it took 70% more, for the same schedule.)
    pinned = recurrence.state_tensors(graph)
    slices_of, joined = slices.resolve(graph, pinned)

    def attempt(share, small_first):  # ((cycles, DDR bytes) or None, share, plan or (layer, need))
        planned, bad_layer, bad_need = _plan_region(
            cfg, graph, int(cfg.sram_bytes * share), slices_of, joined, pinned, small_first
        )
        if planned is None:
            return None, share, (bad_layer, bad_need)
        est = cost_model.estimate(cfg, planned[0])
        return (est.total_cycles, est.ddr_read_bytes + est.ddr_write_bytes), share, planned

    tries = [attempt(share, True) for share in RESIDENT_SHARES]
    done = [t for t in tries if t[0] is not None]
    if done and _any_weight_heavy(cfg, graph):
        tries.append(attempt(min(done, key=lambda t: t[0])[1], False))
    done = [t for t in tries if t[0] is not None]
    result = min(done, key=lambda t: t[0])[2] if done else None
    failed = [t[2] for t in tries if t[0] is None]
    layer = failed[0][0] if failed else None
    need = max((n for _, n in failed), default=0)
    if result is None:
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"layer {layer.name.rsplit('.', 1)[-1]} ({layer.composite}) of {graph.label} does not fit "
            f"{cfg.sram_bytes} bytes of SRAM "
            f"even with one output row per tile and its weights split into blocks (its largest "
            f"tensor or smallest weight block is {need} bytes); use a configuration with more SRAM, "
            f"or split the layer",
        )
    commands, weights, placed, ddr_top, sram_used, info = result
    tensors = []
    for role, names in (("input", graph.inputs), ("output", graph.outputs)):
        for i, name in enumerate(names):
            info_t, p = graph.staged.get((role, i), graph.tensors[name]), placed[name]
            scale, zp = info_t.qparams or (0.0, 0)  # quantized staging (format 1.3)
            tensors.append(
                TensorDesc(
                    role,
                    i,
                    info_t.dtype,
                    info_t.host_dtype,
                    info_t.host_layout,
                    info_t.host_shape,
                    info_t.view,
                    p.addr,
                    p.row_stride,
                    scale,
                    zp,
                )
            )
    # The task's tensor table holds its inputs and outputs (weights live inside the stream's weight
    # region, intermediates are the planner's own), so the limit is on the region's boundary.
    if len(tensors) > cfg.max_tensors:
        raise NPUError(
            "ERR_TASK_TOO_COMPLEX",
            f"{graph.label} has {len(tensors)} inputs and outputs; the NPU takes {cfg.max_tensors} per task",
        )
    # What any schedule must move: the constants once, the region's inputs in and outputs out.
    info["compulsory_ddr_bytes"] = len(weights) + sum(placed[n].nbytes for n in graph.inputs + graph.outputs)
    stream = Stream(cfg, tensors, commands, weights, ddr_top, sram_used)
    stream.info = info
    return stream
