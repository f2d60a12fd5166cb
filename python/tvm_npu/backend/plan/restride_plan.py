"""Part of stage 4 (plan): a permute_dims between an NCHW map and its pixels as rows ("restride",
lower/views.py) whose pixel does not fill whole aligned rows (C x elem not a multiple of the 128-byte
alignment: the tiny UNet's 32 fp16 channels are 64 bytes). The map is stored as rows of W pixels packed
C * elem apart; its tokens are stored a row per pixel, each at the next aligned row. The same pixels at
two pitches: one POOL 1x1 max per row tile copies them (exact: the maximum of one tap is the tap), the
map side with its row stride and packed pixels, the tokens side with W token rows per map row
(stride W x the token row stride) and the token row stride as pixel stride (in_pstride / out_pstride,
docs/npu.md section 3: a multiple of 16 bytes, which C * elem must also be; constraints.py checks it).
No new command: the same addressing as an upsampling's copies (upsample_plan.py).

Tiles are bands of map rows of one image; a side in DDR streams through ping / pong SRAM buffers, a
band of map rows by one DMA of its rows, a band of tokens by one DMA of its W x rows token rows.
"""

from __future__ import annotations

from ...contract.stream import DTYPE_BYTES, DTYPES, POOL_KINDS, Command, f32_bits
from .schedule import Scoreboard, emit_dma
from .sram import Arena
from .tiling import Tile


def resolve(cfg, graph) -> None:
    """Make each permute view (lower/views.py, `func` "to_rows" / "to_map") whose pixel does not fill
    whole aligned rows a "restride" copy (`rows`: its input is the tokens); the others stay views."""
    for layer in graph.layers:
        if layer.kind == "view" and layer.func in ("to_rows", "to_map"):
            info = graph.tensors[layer.out]
            if info.view[3] * DTYPE_BYTES[info.dtype] % cfg.alignment:
                layer.kind, layer.pool_kind, layer.rows = "restride", "max", layer.func == "to_map"


def map_view(layer, srcs, dst) -> tuple:
    """The [N, H, W, C] view of the map side (the output when the input is the tokens, layer.rows)."""
    return (dst if layer.rows else srcs[0]).view


def restride_tiles(view: tuple, tile_oh: int) -> list[Tile]:
    """Bands of about `tile_oh` map rows of every image."""
    n_, h = view[0], view[1]
    step = max(1, min(h, tile_oh))
    return [Tile(n, r0, min(h, r0 + step), r0, min(h, r0 + step), 0) for n in range(n_) for r0 in range(0, h, step)]


def _side(p, view, rows: int, tokens: bool) -> dict:
    """One side's band: its DMA rows, row bytes and stride, and its POOL row stride and pixel stride."""
    if tokens:
        w = view[2]
        return dict(dma_rows=rows * w, row_bytes=view[3] * p.elem, stride=p.row_stride,
                    pool_stride=w * p.row_stride, pstride=p.row_stride)  # fmt: skip
    return dict(dma_rows=rows, row_bytes=p.row_bytes, stride=p.row_stride, pool_stride=p.row_stride,
                pstride=p.pstride)  # fmt: skip


def _addr(p, view, n: int, r: int, tokens: bool) -> int:
    """First byte of map row r of image n on one side."""
    return p.addr + ((n * view[1] + r) * view[2]) * p.row_stride if tokens else p.row_addr(n, r)


def restride_layout(cfg, layer, srcs, dst, base, tile_oh, plan_cls):
    """The SRAM layout of one tile height (a `plan_cls`, emit.LayerPlan), or None when it does not fit."""
    view = map_view(layer, srcs, dst)
    arena = Arena(cfg, base)
    rows = min(view[1], max(1, tile_oh))
    src, s_in, s_out = srcs[0], _side(srcs[0], view, rows, layer.rows), _side(dst, view, rows, not layer.rows)
    in_bufs = [None if src.space == "sram" else [arena.take(s_in["dma_rows"] * s_in["stride"]) for _ in (0, 1)]]
    out_bufs = None if dst.space == "sram" else [arena.take(s_out["dma_rows"] * s_out["stride"]) for _ in (0, 1)]
    if arena.top > cfg.sram_bytes:
        return None
    return plan_cls(tile_oh, [], None, in_bufs, out_bufs, base, arena.top, buffers=arena.taken, reach=arena.top)


def copy_command(layer, view, t: Tile, in_addr: int, out_addr: int, s_in: dict, s_out: dict) -> Command:
    """The POOL 1x1 max of tile `t`: its map rows from one pitch to the other."""
    int8 = layer.dtype == "int8"
    rows, w, c = t.out_rows, view[2], view[3]
    values = dict(dtype=DTYPES[layer.dtype], kind=POOL_KINDS["max"], in_addr=in_addr, in_h=rows, in_w=w, c=c,
                  in_stride=s_in["pool_stride"], out_addr=out_addr, out_h=rows, out_w=w,
                  out_stride=s_out["pool_stride"], kh=1, kw=1, stride_h=1, stride_w=1, pad_top=0, pad_left=0,
                  act=0, clip_lo=layer.clamp[0] if int8 else 0, clip_hi=layer.clamp[1] if int8 else 0,
                  in_pstride=s_in["pstride"], out_pstride=s_out["pstride"])  # fmt: skip
    if int8:
        values.update(in_zp=layer.in_zps[0], out_zp=layer.out_zp, scale=f32_bits(1.0))
    return Command("POOL", values, {}, layer.name)


def emit_restride(sb: Scoreboard, cfg, layer, srcs: list, dst, lp, after_compute=None, before_compute=None):
    """The commands of one planned restride into `sb`: per band, load it (unless resident), copy it
    to the other pitch, store it (unless resident)."""
    src, view = srcs[0], map_view(layer, srcs, dst)
    for i, t in enumerate(restride_tiles(view, lp.tile_oh)):
        s_in, s_out = _side(src, view, t.out_rows, layer.rows), _side(dst, view, t.out_rows, not layer.rows)
        in_addr = _addr(src, view, t.n, t.out_r0, layer.rows)
        if lp.in_bufs[0] is not None:
            buf = lp.in_bufs[0][i % 2]
            emit_dma(sb, "DMA_LOAD", 0, in_addr, buf, s_in["dma_rows"], s_in["row_bytes"], s_in["stride"],
                     s_in["stride"], layer.name)  # fmt: skip
            in_addr = buf
        home = _addr(dst, view, t.n, t.out_r0, not layer.rows)
        out_addr = home if dst.space == "sram" else lp.out_bufs[i % 2]
        cmd = copy_command(layer, view, t, in_addr, out_addr, s_in, s_out)
        if before_compute is not None:
            before_compute(cmd)
        reads = [("sram", in_addr, in_addr + t.out_rows * s_in["pool_stride"])]
        sb.emit(cmd, reads, [("sram", out_addr, out_addr + t.out_rows * s_out["pool_stride"])])
        if dst.space != "sram":
            emit_dma(sb, "DMA_STORE", sb.store_channel(), home, out_addr, s_out["dma_rows"], s_out["row_bytes"],
                     s_out["stride"], s_out["stride"], layer.name)  # fmt: skip
        if after_compute is not None:
            after_compute(cmd)
