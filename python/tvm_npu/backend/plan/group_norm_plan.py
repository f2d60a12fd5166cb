"""Part of stage 4 (plan): a GroupNorm layer ("group_norm", lower/group_norm.py) as GN_STATS over every row
tile of an image, then GN_APPLY over the same tiles (format 1.7, docs/npu.md sections 2 and 6): two passes over
the map. The layer's weight slot holds gamma and beta (one aligned fp32 row each) and, after them, the G
statistics records (12 bytes each; constants.constant_bytes reserves them), resident between the passes.

A resident input is read in place by both passes. An input in DDR is loaded tile by tile through the layer's
ping / pong buffers for the statistics and loaded again for the apply, unless the image is one tile: then the
apply reads the tile the statistics pass loaded. The planner (layer_plan.choose) picks the tile height that
fits SRAM and costs least, as for any row-tiled layer; every image of a batch has its own statistics.
"""

from __future__ import annotations

from ...contract.stream import DTYPES, Command, f32_bits
from .schedule import Scoreboard, emit_dma
from .sram import align
from .tiling import row_tiles

GN_RECORD_BYTES = 12  # {u32 count, fp32 mean, fp32 m2} per group (docs/npu.md section 6)


def param_row_bytes(cfg, channels: int) -> int:
    """Bytes of gamma's (and beta's) aligned fp32 row in the weight slot."""
    return align(channels * 4, cfg.alignment)


def stats_bytes(cfg, groups: int) -> int:
    return align(groups * GN_RECORD_BYTES, cfg.alignment)


def _load(sb, layer, src, t, buf) -> int:
    emit_dma(sb, "DMA_LOAD", 0, src.row_addr(t.n, t.in_r0), buf, t.in_rows, src.row_bytes, src.row_stride,
             src.row_stride, layer.name)  # fmt: skip
    return buf


def emit_group_norm(sb: Scoreboard, cfg, layer, srcs: list, dst, lp, after_compute=None, before_compute=None):
    """The commands of one planned group_norm layer into `sb` (see the module docstring)."""
    src = srcs[0]
    n_, h, w, c = src.view
    blk = lp.blocks[0]
    slot = lp.w_slots[0]
    if lp.load_after[0] is None:  # not streamed in by the weight streamer (weights.py)
        for dma in blk.loads(slot, cfg.alignment, blk.nbytes):
            emit_dma(sb, "DMA_LOAD", 1, *dma, layer.name)
    prm = param_row_bytes(cfg, c)
    gamma, beta, stats = slot, slot + prm, slot + 2 * prm
    stats_span = ("sram", stats, stats + layer.groups * GN_RECORD_BYTES)
    params = [("sram", gamma, gamma + prm), ("sram", beta, beta + prm)]
    common = dict(dtype=DTYPES["float16"], row_pixels=w, channels=c, groups=layer.groups, stats_addr=stats)
    tiles = row_tiles(layer, src.view, dst.view, lp.tile_oh)
    k = j = 0  # ping / pong indices of the input loads and of the output tiles
    for n in range(n_):
        image = [t for t in tiles if t.n == n]
        held = []
        for i, t in enumerate(image):
            addr = src.row_addr(n, t.in_r0)
            if lp.in_bufs[0] is not None:
                addr = _load(sb, layer, src, t, lp.in_bufs[0][k % 2])
                k += 1
            held.append(addr)
            a = dict(common, in_addr=addr, in_stride=src.row_stride, rows=t.in_rows, first=int(i == 0))
            cmd = Command("GN_STATS", a, {}, layer.name)
            reads = [("sram", addr, addr + t.in_rows * src.row_stride)] + ([stats_span] if i else [])
            if before_compute is not None:
                before_compute(cmd)
            sb.emit(cmd, reads, [stats_span])
            if after_compute is not None:
                after_compute(cmd)
        for i, t in enumerate(image):
            addr = held[i]
            if lp.in_bufs[0] is not None and len(image) > 1:  # the statistics pass's buffers were reused
                addr = _load(sb, layer, src, t, lp.in_bufs[0][k % 2])
                k += 1
            if dst.space == "sram":
                out, out_stride = dst.row_addr(n, t.out_r0), dst.row_stride
            else:
                out, out_stride = lp.out_bufs[j % len(lp.out_bufs)], dst.row_stride
                j += 1
            a = dict(
                common,
                in_addr=addr,
                in_stride=src.row_stride,
                out_addr=out,
                out_stride=out_stride,
                rows=t.out_rows,
                gamma_addr=gamma,
                beta_addr=beta,
                eps=f32_bits(layer.alpha),
                silu=int(layer.func == "silu"),
            )
            cmd = Command("GN_APPLY", a, {}, layer.name)
            reads = [("sram", addr, addr + t.in_rows * src.row_stride), stats_span, *params]
            if before_compute is not None:
                before_compute(cmd)
            sb.emit(cmd, reads, [("sram", out, out + t.out_rows * out_stride)])
            if dst.space != "sram":
                emit_dma(sb, "DMA_STORE", sb.store_channel(), dst.row_addr(n, t.out_r0), out, t.out_rows,
                         dst.row_bytes, dst.row_stride, out_stride, layer.name)  # fmt: skip
            if after_compute is not None:
                after_compute(cmd)
