"""Emitting one planned layer: its DMA loads, compute commands and stores, tile by tile, with the
read / write footprints the scoreboard derives the waits from. The planner (planner.py) decides where
everything goes (`Placed`, `LayerPlan`); this file turns that into commands."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...contract.config import NPUConfig
from ...contract.stream import (
    ACTIVATIONS,
    DTYPES,
    NO_BIAS,
    POOL_KINDS,
    Command,
    f32_bits,
    int4_block_bytes,
    int4_weights,
)
from ..lower.graph import Layer
from .group_norm_plan import emit_group_norm
from .matmul_plan import emit_matmul
from .matmul_plan import footprint as matmul_footprint
from .restride_plan import emit_restride
from .row_slices import column_slices, slice_command
from .schedule import Scoreboard, emit_dma
from .sram import align
from .tiling import row_tiles
from .upsample_plan import emit_upsample
from .vector_commands import VECTOR_OPS, binary_requant, vector_command, vector_footprint


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
    """The constants of one output-channel block of a conv layer: `nbytes` in its SRAM slot (weight rows,
    then from `w_bytes` on the bias / scale rows), loaded from the layer's constants at `ddr_addr`."""

    oc0: int
    oc1: int
    ddr_addr: int
    nbytes: int
    w_stride: int
    w_bytes: int
    # The byte runs that fill the slot, (DDR offset from ddr_addr, slot offset, bytes); empty: the slot's
    # bytes as they lie in DDR. A block of a layer stored in its row-independent layout
    # (constants.layer_blocks) takes its weight rows and its bias / scale rows from where the whole layer
    # keeps them.
    pieces: tuple = ()

    def loads(self, slot: int, alignment: int, chunk: int) -> list:
        """(DDR address, SRAM address, rows, row_bytes, DDR stride, SRAM stride) of the one-row loads that
        fill the block's slot at `slot`, each of at most `chunk` bytes."""
        out = []
        for src, dst, nbytes in self.pieces or ((0, 0, self.nbytes),):
            for off in range(0, nbytes, chunk):
                n = min(chunk, nbytes - off)
                stride = align(n, alignment)
                out.append((self.ddr_addr + src + off, slot + dst + off, 1, n, stride, stride))
        return out


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
    # What the layout took from its arena: the (address, bytes) of each activation buffer, and the first
    # byte above everything it took (its weight slot included), which had to fit SRAM. Reports only
    # (sram_usage.py, fragmentation.py).
    buffers: list | None = None
    reach: int = 0
    w_reserved: list = field(default_factory=list)  # set by weights.place_weight_slots

    def __post_init__(self):
        self.w_slots = self.w_slots or [self.w_slot] * len(self.blocks)
        self.load_after = self.load_after or [None] * len(self.blocks)


def _broadcast(layer: Layer, k: int) -> bool:
    """Input `k` is read whole from row (0, 0) by every tile: a per-channel ELTWISE b, or a ROPE's run-time
    cos / sin table (any row of x may read any table row)."""
    return (layer.kind == "eltwise" and k == 1 and layer.b_mode != "same") or (layer.kind == "rope" and k > 0)


def broadcast_row(layer: Layer, k: int, src: Placed, t) -> tuple[int, int]:
    """(image, row) of broadcast input `k` that tile `t` reads: row (0, 0) of its tensor, or, for an
    ELTWISE b with one channel vector per image ([N, C, 1, 1] as an NCHW map (N, 1, 1, C), N > 1), the
    tile's image's row (n, 0): a tile never spans two images (tiling.row_tiles), so the one-row operand
    of the unchanged command is that image's vector."""
    return (t.n, 0) if layer.kind == "eltwise" and src.view[0] > 1 else (0, 0)


def src_rows(layer: Layer, k: int, rows: int) -> int:
    if layer.kind == "rope" and k > 0:
        return layer.rope_rows
    return 1 if _broadcast(layer, k) else rows


def _compute(
    cfg, layer: Layer, t, ins: list, srcs: list, dst: Placed, out_addr: int, out_stride: int, blk: Block | None, w_slot
) -> Command:
    """The CONV2D / ADD / POOL command of one tile (and one output-channel block)."""
    int8 = layer.dtype == "int8"
    lo, hi = layer.clamp if int8 else (f32_bits(layer.clip[0]), f32_bits(layer.clip[1]))
    common = dict(dtype=DTYPES[layer.dtype], act=0 if int8 else ACTIVATIONS[layer.act], clip_lo=lo, clip_hi=hi)
    if layer.kind in ("eltwise", "unary", "softmax", "norm", "rope"):
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
    w8 = layer.w8a16
    has_bias = int8 or w8 or layer.w4 is not None or layer.bias is not None
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
    if w8:  # int8 codes, the dequantization block (bias, scale) after them (format 1.4)
        a.update(w_dtype=DTYPES["int8"])
    if layer.w4:  # int4 codes, the group size in bits 8-15, the int4 dequantization block (format 1.4)
        a.update(w_dtype=DTYPES[layer.w4] | layer.w_group << 8)
    return Command("CONV2D", a, {}, layer.name)


def footprint(cfg: NPUConfig, cmd: Command) -> tuple[list, list]:
    """(reads, writes) of a compute command in SRAM, as (space, lo, hi) ranges."""
    a = cmd.args
    if cmd.op in VECTOR_OPS:
        return vector_footprint(cfg, cmd)
    if cmd.op == "MATMUL":
        return matmul_footprint(cmd)
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
        if int4_weights(a):
            reads.append(("sram", a["bias_addr"], a["bias_addr"] + int4_block_bytes(a, cfg.alignment)))
        elif a["bias_addr"] != NO_BIAS:
            rows = 2 if a["dtype"] == DTYPES["int8"] or a.get("w_dtype", 0) else 1
            reads.append(("sram", a["bias_addr"], a["bias_addr"] + rows * align(a["oc"] * 4, cfg.alignment)))
    return reads, [("sram", a["out_addr"], a["out_addr"] + a["out_h"] * a["out_stride"])]


def emit_layer(
    sb: Scoreboard, cfg, layer: Layer, srcs: list, dst: Placed, lp: LayerPlan, after_compute=None, before_compute=None
):
    """Commands of one layer into `sb`: per output-channel block, per row tile: load, compute, store.
    `after_compute(cmd)` runs after each tile's commands (the weight streamer paces itself on it),
    `before_compute(cmd)` after the tile's input loads, just before its compute command (where the
    weight streamer's lead mode queues the loads of later layers, weights.py)."""
    if layer.kind == "matmul":  # two activations, tiled by output batch (matmul_plan.py)
        return emit_matmul(sb, cfg, layer, srcs, dst, lp, after_compute)
    if layer.kind == "group_norm":  # two passes over the row tiles (group_norm_plan.py)
        return emit_group_norm(sb, cfg, layer, srcs, dst, lp, after_compute, before_compute)
    if layer.kind == "upsample":  # fH * fW strided POOL copies per row tile (upsample_plan.py)
        return emit_upsample(sb, cfg, layer, srcs, dst, lp, after_compute, before_compute)
    if layer.kind == "restride":  # one strided POOL copy per band of map rows (restride_plan.py)
        return emit_restride(sb, cfg, layer, srcs, dst, lp, after_compute, before_compute)
    tiles = row_tiles(layer, srcs[0].view, dst.view, lp.tile_oh)
    slices = column_slices(cfg, layer, dst.view)
    blocks = lp.blocks or [None]
    for bi, blk in enumerate(blocks):
        if blk is not None and lp.load_after[bi] is None:  # not streamed in, nor resident (weights.py)
            for dma in blk.loads(lp.w_slots[bi], cfg.alignment, blk.nbytes):
                emit_dma(sb, "DMA_LOAD", 1, *dma, layer.name)
        oc0 = blk.oc0 if blk is not None else 0
        ocb = (blk.oc1 - blk.oc0) if blk is not None else dst.view[3]

        def inputs_of(i, t):
            addrs = []
            for k, s in enumerate(srcs):
                n, r0 = broadcast_row(layer, k, s, t) if _broadcast(layer, k) else (t.n, t.in_r0)
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
                    src_rows(layer, k, t.in_rows),
                    s.row_bytes,
                    s.row_stride,
                    s.row_stride,
                    layer.name,
                )
                addrs.append(buf)
            return addrs

        # The ping / pong buffers alternate over the tiles of every block, not of each block: block b + 1's
        # first tile would otherwise wait for block b's first store (a classifier's blocks at M = 1 are one
        # tile each), and that store waits behind the weight loads queued on its channel.
        first = bi * len(tiles)
        pending = inputs_of(first, tiles[0])
        for i, t in enumerate(tiles):
            if dst.space == "sram":
                out_addr, out_stride = dst.row_addr(t.n, t.out_r0) + oc0 * dst.elem, dst.row_stride
            else:
                out_addr = lp.out_bufs[(first + i) % len(lp.out_bufs)]
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
            # A row wider than max_width: one command per column slice (row_slices.py), else cmd itself.
            cmds = [cmd] if len(slices) == 1 else [slice_command(cfg, layer, cmd, e0, e1) for e0, e1 in slices]
            for c in cmds:
                reads, writes = footprint(cfg, c)
                if before_compute is not None:
                    before_compute(c)
                sb.emit(c, reads, writes)
            if i + 1 < len(tiles):
                pending = inputs_of(first + i + 1, tiles[i + 1])
            if dst.space != "sram" and (len(blocks) == 1 or dst.view[2] == 1):
                row_bytes = dst.row_bytes if len(blocks) == 1 else ocb * dst.elem
                # One row: its footprint (rows x stride) ends at the row, not at the next block's bytes
                one = t.out_rows == 1 and len(blocks) > 1
                emit_dma(
                    sb,
                    "DMA_STORE",
                    sb.store_channel(),
                    dst.row_addr(t.n, t.out_r0) + oc0 * dst.elem,
                    out_addr,
                    t.out_rows,
                    row_bytes,
                    align(row_bytes, cfg.alignment) if one else dst.row_stride,
                    align(row_bytes, cfg.alignment) if one else out_stride,
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
                for c in cmds:
                    after_compute(c)
