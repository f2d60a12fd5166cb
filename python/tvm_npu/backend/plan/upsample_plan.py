"""Part of stage 4 (plan): a nearest-neighbour upsampling ("upsample", lower/resize.py) as addressing. No
command of the contract upsamples, and none is needed: with factors (fH, fW), output pixel (fH*h + a,
fW*w + b) is input pixel (h, w), so the output is fH * fW copies of the input, copy (a, b) written with
an output pixel stride of fW * C * elem and a row stride of fH times the output's, from the output's row
a and pixel b. Each copy is one POOL 1x1 max (exact: the maximum of one tap is the tap; in int8 the
requantization by scale 1 between equal zero points returns the code); its output address moves by
whole pixels, C * elem bytes, which POOL's 16-byte address rule allows when C * elem is a multiple of 16
(docs/npu.md section 3; partition/resize_constraints.py checks it).

Tiles are bands of input rows, each producing fH times its rows of output: a map larger than SRAM
(SD-1.5's 16x16x1280 -> 32x32x1280 fp16 is 2.6 MB of output) streams through ping / pong input and
output buffers, input rows loaded and output rows stored by DMA at aligned addresses. A copy's
footprint (rows x stride from its first byte, as the runtime checks it) reaches up to `overhang` bytes
past the tile's last output row: the output buffers, and a resident output tensor (planner.py), are
that much larger. The tile height is chosen by layer_plan.choose with the one cost model, as for every
row-tiled layer: POOL's vector steps (one per output element) against the DMAs.
"""

from __future__ import annotations

from ...contract.stream import DTYPES, POOL_KINDS, Command, f32_bits
from .schedule import Scoreboard, emit_dma
from .sram import Arena
from .tiling import Tile


def overhang(row_stride: int, factors: tuple, px: int) -> int:
    """Bytes past a tile's last output row that its copies' footprints reach: copy (a, b) starts a rows
    and b pixels in, and spans its rows at fH times the row stride."""
    return (factors[0] - 1) * row_stride + (factors[1] - 1) * px


def upsample_tiles(layer, in_view: tuple, tile_oh: int) -> list[Tile]:
    """Row tiles of about `tile_oh` output rows: bands of ceil(tile_oh / fH) input rows of every image."""
    fh = layer.stride[0]
    step = max(1, -(-tile_oh // fh))
    n_, h = in_view[0], in_view[1]
    return [
        Tile(n, r0 * fh, min(h, r0 + step) * fh, r0, min(h, r0 + step), 0)
        for n in range(n_)
        for r0 in range(0, h, step)
    ]


def upsample_layout(cfg, layer, srcs, dst, base, tile_oh, plan_cls):
    """The SRAM layout of one tile height (a `plan_cls`, emit.LayerPlan), or None when it does not fit."""
    arena = Arena(cfg, base)
    tiles = upsample_tiles(layer, srcs[0].view, tile_oh)
    src = srcs[0]
    in_rows = max(t.in_rows for t in tiles)
    in_bufs = [None if src.space == "sram" else [arena.take(in_rows * src.row_stride) for _ in (0, 1)]]
    out_rows = max(t.out_rows for t in tiles)
    out_bytes = out_rows * dst.row_stride + overhang(dst.row_stride, layer.stride, dst.view[3] * dst.elem)
    out_bufs = None if dst.space == "sram" else [arena.take(out_bytes) for _ in (0, 1)]
    if arena.top > cfg.sram_bytes:
        return None
    return plan_cls(tile_oh, [], None, in_bufs, out_bufs, base, arena.top, buffers=arena.taken, reach=arena.top)


def copy_commands(layer, src, dst, t: Tile, in_addr: int, out_addr: int, out_stride: int) -> list[tuple]:
    """(command, reads, writes) of the fH * fW POOL copies of tile `t`, its input at `in_addr`, its
    output rows at `out_addr`, `out_stride` apart."""
    fh, fw = layer.stride
    n_, h, w, c = src.view
    px = dst.pstride or c * dst.elem
    int8 = layer.dtype == "int8"
    common = dict(
        dtype=DTYPES[layer.dtype],
        kind=POOL_KINDS["max"],
        in_addr=in_addr,
        in_h=t.in_rows,
        in_w=w,
        c=c,
        in_stride=src.row_stride,
        out_h=t.in_rows,
        out_w=w,
        out_stride=fh * out_stride,
        kh=1,
        kw=1,
        stride_h=1,
        stride_w=1,
        pad_top=0,
        pad_left=0,
        act=0,
        clip_lo=layer.clamp[0] if int8 else 0,
        clip_hi=layer.clamp[1] if int8 else 0,
        in_pstride=src.pstride,
        out_pstride=fw * px,
    )
    if int8:
        common.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp, scale=f32_bits(1.0))
    reads = [("sram", in_addr, in_addr + t.in_rows * src.row_stride)]
    out = []
    for a in range(fh):
        for b in range(fw):
            addr = out_addr + a * out_stride + b * px
            cmd = Command("POOL", dict(common, out_addr=addr), {}, layer.name)
            out.append((cmd, reads, [("sram", addr, addr + t.in_rows * fh * out_stride)]))
    return out


def emit_upsample(sb: Scoreboard, cfg, layer, srcs: list, dst, lp, after_compute=None, before_compute=None):
    """The commands of one planned upsample layer into `sb`: per tile, load its input rows (unless
    resident), its fH * fW copies, store its output rows (unless resident)."""
    src = srcs[0]
    for i, t in enumerate(upsample_tiles(layer, src.view, lp.tile_oh)):
        in_addr = src.row_addr(t.n, t.in_r0)
        if lp.in_bufs[0] is not None:
            buf = lp.in_bufs[0][i % 2]
            emit_dma(sb, "DMA_LOAD", 0, in_addr, buf, t.in_rows, src.row_bytes, src.row_stride, src.row_stride,
                     layer.name)  # fmt: skip
            in_addr = buf
        if dst.space == "sram":
            out_addr = dst.row_addr(t.n, t.out_r0)
        else:
            out_addr = lp.out_bufs[i % 2]
        cmds = copy_commands(layer, src, dst, t, in_addr, out_addr, dst.row_stride)
        if before_compute is not None:
            before_compute(cmds[0][0])
        for cmd, reads, writes in cmds:
            sb.emit(cmd, reads, writes)
        if dst.space != "sram":
            emit_dma(sb, "DMA_STORE", sb.store_channel(), dst.row_addr(t.n, t.out_r0), out_addr, t.out_rows,
                     dst.row_bytes, dst.row_stride, dst.row_stride, layer.name)  # fmt: skip
        if after_compute is not None:
            after_compute(cmds[-1][0])
