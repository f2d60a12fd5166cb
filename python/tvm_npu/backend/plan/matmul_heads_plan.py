"""Planning a matmul whose operands or output are attention heads addressed in place (format 1.8's head
slices, layer.heads): output batch o = b * H + h of a head-split tensor [B, S, H * D] is its rows from
b * S at byte offset h * D * elem, with the tensor's own row stride. One MATMUL per (image b, row tile,
head h), batch 1; or one over every head of an image.

DMA addresses keep the full alignment, so a head-split tensor in DDR moves as whole rows (every head)
and its heads are addressed inside SRAM: A's row tile and B's rows of image b are loaded once for all
H heads that read them, and a merged output's row tile collects every head's columns in SRAM before
one store. One image with every head's own B (tile height WHOLE): one MATMUL over all heads, the
batch stride of a head-split tensor one head's bytes (its batches interleave within each row). A
tensor resident in SRAM is addressed where it is. Buffers are matmul_plan.matmul_layout's (rows of
the tensor's row stride, double-buffered); the scoreboard orders their reuse."""

from __future__ import annotations

from ...contract.stream import Command
from ..lower.graph import Layer
from .matmul_plan import WHOLE, b_rows, dtype_args, footprint
from .schedule import Scoreboard, emit_dma

ELEM = 2  # fp16: head slices are the fp16 datapath's (check_matmul_heads)


class _Operand:
    """One operand of the loop: where its rows of a (key) live, loaded on the first use of each key."""

    def __init__(self, sb: Scoreboard, src, bufs, name: str):
        self.sb, self.src, self.bufs, self.name = sb, src, bufs, name
        self.key, self.loads, self.addr = None, 0, None

    def at(self, key, row: int, rows: int, col_bytes: int) -> int:
        """SRAM address of the slice at byte `col_bytes` of source row `row` ([row, row + rows) loaded
        whole when `key` differs from the last one)."""
        if self.bufs is None:
            return self.src.row_addr(0, row) + col_bytes
        if key != self.key:
            self.addr = self.bufs[self.loads % 2]
            s = self.src
            emit_dma(self.sb, "DMA_LOAD", 0, s.row_addr(0, row), self.addr, rows, s.row_bytes, s.row_stride,
                     s.row_stride, self.name)  # fmt: skip
            self.loads += 1
            self.key = key
        return self.addr + col_bytes


def emit_matmul_heads(sb: Scoreboard, layer: Layer, srcs: list, dst, lp, after_compute=None) -> None:
    """Every (image, row tile, head): the operands' slices addressed, one MATMUL, the output stored per
    tile (or, merged, once per row tile after all its heads). Tile height WHOLE (one image): one MATMUL
    over every head."""
    if lp.tile_oh == WHOLE:
        return _emit_whole(sb, layer, srcs, dst, lp, after_compute)
    sa, sbt = srcs
    batch, m, k, n, transposed = layer.matmul
    ha, hb, ho = layer.heads
    heads = ha or hb or ho
    images = batch // heads
    rb = b_rows(layer)
    a_op, b_op = _Operand(sb, sa, lp.in_bufs[0], layer.name), _Operand(sb, sbt, lp.in_bufs[1], layer.name)
    tile_m = lp.tile_oh
    stores = 0
    for img in range(images):
        for r0 in range(0, m, tile_m):
            rows = min(tile_m, m - r0)
            out_buf = None
            if dst.space != "sram" and ho:
                out_buf = lp.out_bufs[stores % 2]
            for h in range(heads):
                o = img * heads + h
                if ha:
                    a_addr = a_op.at((img, r0), img * m + r0, rows, h * k * ELEM)
                else:
                    a_addr = a_op.at((o, r0), o * m + r0, rows, 0)
                q = layer.b_index[o]
                if hb:
                    b_img, b_h = divmod(q, hb)
                    col = (k if transposed else n) * ELEM
                    b_addr = b_op.at(b_img, b_img * rb, rb, b_h * col)
                else:
                    b_addr = b_op.at(q, q * rb, rb, 0)
                out_row = img * m + r0 if ho else o * m + r0
                col = h * n * ELEM if ho else 0
                if dst.space == "sram":
                    out_addr = dst.row_addr(0, out_row) + col
                elif ho:
                    out_addr = out_buf + col
                else:
                    out_addr = lp.out_bufs[stores % 2]
                args = dict(dtype_args(layer), batch=1, b_group=1, m=rows, k=k, n=n, b_transposed=transposed)
                args.update(a_addr=a_addr, a_stride=sa.row_stride, a_bstride=0, b_addr=b_addr,
                            b_stride=sbt.row_stride, b_bstride=0, out_addr=out_addr, out_stride=dst.row_stride,
                            out_bstride=0)  # fmt: skip
                cmd = Command("MATMUL", args, {}, layer.name)
                sb.emit(cmd, *footprint(cmd))
                if after_compute is not None:
                    after_compute(cmd)
                if dst.space != "sram" and not ho:
                    _store(sb, dst, out_row, out_addr, rows, layer.name)
                    stores += 1
            if out_buf is not None:
                _store(sb, dst, img * m + r0, out_buf, rows, layer.name)
                stores += 1


def _store(sb: Scoreboard, dst, row: int, addr: int, rows: int, name: str) -> None:
    emit_dma(sb, "DMA_STORE", 1, dst.row_addr(0, row), addr, rows, dst.row_bytes, dst.row_stride, dst.row_stride,
             name)  # fmt: skip


def _emit_whole(sb: Scoreboard, layer: Layer, srcs: list, dst, lp, after_compute) -> None:
    """One image, every head at once: each operand's rows whole (loaded when in DDR), one MATMUL of batch
    H whose head-split operands step by one head's bytes, the output stored whole."""
    (sa, sbt), (batch, m, k, n, transposed) = srcs, layer.matmul
    ha, hb, ho = layer.heads
    rb = b_rows(layer)
    addrs = []
    for s, rows, buf in zip(srcs, (m if ha else batch * m, rb if hb else batch * rb), lp.in_bufs):
        addrs.append(s.row_addr(0, 0) if buf is None else buf[0])
        if buf is not None:
            emit_dma(sb, "DMA_LOAD", 0, s.row_addr(0, 0), buf[0], rows, s.row_bytes, s.row_stride, s.row_stride,
                     layer.name)  # fmt: skip
    out_addr = dst.row_addr(0, 0) if dst.space == "sram" else lp.out_bufs[0]
    args = dict(dtype_args(layer), batch=batch, b_group=1, m=m, k=k, n=n, b_transposed=transposed)
    args.update(a_addr=addrs[0], a_stride=sa.row_stride, a_bstride=k * ELEM if ha else m * sa.row_stride)
    args.update(b_addr=addrs[1], b_stride=sbt.row_stride)
    args.update(b_bstride=(k if transposed else n) * ELEM if hb else rb * sbt.row_stride)
    args.update(out_addr=out_addr, out_stride=dst.row_stride, out_bstride=n * ELEM if ho else m * dst.row_stride)
    cmd = Command("MATMUL", args, {}, layer.name)
    sb.emit(cmd, *footprint(cmd))
    if after_compute is not None:
        after_compute(cmd)
    if dst.space != "sram":
        _store(sb, dst, 0, out_addr, m if ho else batch * m, layer.name)
