"""Planning a matmul of two activations (layer kind "matmul", MATMUL of docs/npu.md section 4): row tiles
of one output batch at a time. A tile is `tile_m` rows of A and of the output; its B batch (the whole
[K, N] or [N, K] block, as b_index says) is loaded once for the run of tiles that reads it, so a
grouped-query attention's KV head is loaded once per group of query heads. Inputs and the output that are
not resident in SRAM are double-buffered like the other layers' tiles (emit.py). One MATMUL per tile with
batch 1; or, when the whole layer fits SRAM and its B batches follow MATMUL's o / b_group rule, one MATMUL
over every batch (tile height WHOLE), which saves op_overhead per head in a decode step. A B batch larger
than what is left of SRAM fails the plan (ERR_SRAM_OVERFLOW naming the layer)."""

from __future__ import annotations

from ...contract.stream import DTYPES, Command, f32_bits
from ..lower.graph import Layer
from .schedule import Scoreboard, emit_dma
from .sram import Arena

WHOLE = 0  # the tile height that means one MATMUL over every batch


def b_group(layer: Layer) -> int | None:
    """MATMUL's b_group when output batch o reads B batch o / b_group for every o, else None."""
    batch, nb = layer.matmul[0], max(layer.b_index) + 1
    g = batch // nb
    ok = batch % nb == 0 and all(q == o // g for o, q in enumerate(layer.b_index))
    return g if ok else None


def dtype_args(layer: Layer) -> dict:
    """MATMUL's dtype and, int8 (docs/npu.md section 2), its zero points and requantization scale S."""
    if layer.dtype != "int8":
        return dict(dtype=DTYPES["float16"])
    a_zp, b_zp = layer.in_zps
    return dict(dtype=DTYPES["int8"], a_zp=a_zp, b_zp=b_zp, out_zp=layer.out_zp, scale=f32_bits(float(layer.scale[0])))


def tile_options(layer: Layer, heights: list) -> list:
    """Tile heights to try: WHOLE first when the batches follow the b_group rule, then `heights` (a
    matmul of head slices, format 1.8, always tiles: matmul_heads_plan.py)."""
    if any(layer.heads):  # one image, each batch its own B: every head in one MATMUL, batches interleaved
        heads = max(layer.heads)
        whole = layer.matmul[0] == heads > 1 and layer.b_index == tuple(range(heads))
        return ([WHOLE] if whole else []) + heights
    return ([WHOLE] if b_group(layer) is not None and layer.matmul[0] > 1 else []) + heights


def b_rows(layer: Layer) -> int:
    """Rows of one B batch: k ([K, N]) or n ([N, K], b_transposed)."""
    _, _, k, n, transposed = layer.matmul
    return n if transposed else k


def matmul_layout(cfg, layer: Layer, srcs: list, dst, base: int, tile_m: int, plan_cls):
    """The SRAM buffers of a plan with tiles of `tile_m` rows above `base`, or None when they do not fit."""
    arena = Arena(cfg, base)
    batch, m = layer.matmul[:2]
    rows = (batch * m, (max(layer.b_index) + 1) * b_rows(layer)) if tile_m == WHOLE else (tile_m, b_rows(layer))
    out_rows = batch * m if tile_m == WHOLE else tile_m
    if tile_m == WHOLE and any(layer.heads):  # a head-split tensor of one image: its rows hold every head
        ha, hb, ho = layer.heads
        rows = (m if ha else rows[0], b_rows(layer) if hb else rows[1])
        out_rows = m if ho else out_rows
    copies = (0,) if tile_m == WHOLE else (0, 1)  # one tile: nothing to double-buffer
    in_bufs = [
        None if s.space == "sram" else [arena.take(r * s.row_stride) for _ in copies] for s, r in zip(srcs, rows)
    ]
    out_bufs = None if dst.space == "sram" else [arena.take(out_rows * dst.row_stride) for _ in copies]
    if arena.top > cfg.sram_bytes:
        return None
    return plan_cls(tile_m, [], None, in_bufs, out_bufs, base, arena.top, buffers=arena.taken, reach=arena.top)


def _tiles(layer: Layer, tile_m: int) -> list:
    """(output batch, first row, rows) of every tile, batch by batch."""
    batch, m = layer.matmul[:2]
    return [(o, r0, min(tile_m, m - r0)) for o in range(batch) for r0 in range(0, m, tile_m)]


def footprint(cmd: Command) -> tuple[list, list]:
    """(reads, writes) of a MATMUL in SRAM as (space, lo, hi): every batch's block and the gaps between."""
    a = cmd.args
    b_batches = (a["batch"] - 1) // a["b_group"] + 1
    rows_b = a["n"] if a["b_transposed"] else a["k"]
    return (
        [
            ("sram", a["a_addr"], a["a_addr"] + (a["batch"] - 1) * a["a_bstride"] + a["m"] * a["a_stride"]),
            ("sram", a["b_addr"], a["b_addr"] + (b_batches - 1) * a["b_bstride"] + rows_b * a["b_stride"]),
        ],
        [("sram", a["out_addr"], a["out_addr"] + (a["batch"] - 1) * a["out_bstride"] + a["m"] * a["out_stride"])],
    )


def _emit_whole(sb: Scoreboard, layer: Layer, srcs: list, dst, lp, after_compute) -> None:
    """Every batch at once: load A and B whole, one MATMUL with b_group, store the output whole."""
    (sa, sbt), (batch, m, k, n, transposed) = srcs, layer.matmul
    rows_b = (max(layer.b_index) + 1) * b_rows(layer)
    addrs = []
    for s, rows, buf in zip(srcs, (batch * m, rows_b), lp.in_bufs):
        addrs.append(s.row_addr(0, 0) if buf is None else buf[0])
        if buf is not None:
            emit_dma(sb, "DMA_LOAD", 0, s.row_addr(0, 0), buf[0], rows, s.row_bytes, s.row_stride, s.row_stride,
                     layer.name)  # fmt: skip
    out_addr = dst.row_addr(0, 0) if dst.space == "sram" else lp.out_bufs[0]
    args = dict(dtype_args(layer), batch=batch, b_group=b_group(layer), m=m, k=k, n=n, b_transposed=transposed)
    args.update(a_addr=addrs[0], a_stride=sa.row_stride, a_bstride=m * sa.row_stride, b_addr=addrs[1])
    args.update(b_stride=sbt.row_stride, b_bstride=b_rows(layer) * sbt.row_stride, out_addr=out_addr)
    args.update(out_stride=dst.row_stride, out_bstride=m * dst.row_stride)
    cmd = Command("MATMUL", args, {}, layer.name)
    sb.emit(cmd, *footprint(cmd))
    if dst.space != "sram":
        emit_dma(sb, "DMA_STORE", 1, dst.row_addr(0, 0), out_addr, batch * m, dst.row_bytes, dst.row_stride,
                 dst.row_stride, layer.name)  # fmt: skip
    if after_compute is not None:
        after_compute(cmd)


def emit_matmul(sb: Scoreboard, cfg, layer: Layer, srcs: list, dst, lp, after_compute=None) -> None:
    """Per tile: load its A rows (and its B batch when that changes), one MATMUL, store its output rows."""
    if any(layer.heads):  # attention's heads addressed in place (format 1.8)
        from .matmul_heads_plan import emit_matmul_heads

        return emit_matmul_heads(sb, layer, srcs, dst, lp, after_compute)
    if lp.tile_oh == WHOLE:
        return _emit_whole(sb, layer, srcs, dst, lp, after_compute)
    sa, sbt = srcs
    _, m, k, n, transposed = layer.matmul
    rb = b_rows(layer)
    loaded_b, b_loads = None, 0
    b_addr = None
    for i, (o, r0, rows) in enumerate(_tiles(layer, lp.tile_oh)):
        row = o * m + r0  # the tile's first row in the rows views of A and of the output
        if lp.in_bufs[0] is None:
            a_addr = sa.row_addr(0, row)
        else:
            a_addr = lp.in_bufs[0][i % 2]
            emit_dma(sb, "DMA_LOAD", 0, sa.row_addr(0, row), a_addr, rows, sa.row_bytes, sa.row_stride,
                     sa.row_stride, layer.name)  # fmt: skip
        q = layer.b_index[o]
        if q != loaded_b:
            if lp.in_bufs[1] is None:
                b_addr = sbt.row_addr(0, q * rb)
            else:
                b_addr = lp.in_bufs[1][b_loads % 2]
                emit_dma(sb, "DMA_LOAD", 0, sbt.row_addr(0, q * rb), b_addr, rb, sbt.row_bytes, sbt.row_stride,
                         sbt.row_stride, layer.name)  # fmt: skip
                b_loads += 1
            loaded_b = q
        out_addr = dst.row_addr(0, row) if dst.space == "sram" else lp.out_bufs[i % 2]
        args = dict(dtype_args(layer), batch=1, b_group=1, m=rows, k=k, n=n, b_transposed=transposed)
        args.update(a_addr=a_addr, a_stride=sa.row_stride, a_bstride=0, b_addr=b_addr, b_stride=sbt.row_stride)
        args.update(b_bstride=0, out_addr=out_addr, out_stride=dst.row_stride, out_bstride=0)
        cmd = Command("MATMUL", args, {}, layer.name)
        reads, writes = footprint(cmd)
        sb.emit(cmd, reads, writes)
        if dst.space != "sram":
            emit_dma(sb, "DMA_STORE", 1, dst.row_addr(0, row), out_addr, rows, dst.row_bytes, dst.row_stride,
                     dst.row_stride, layer.name)  # fmt: skip
        if after_compute is not None:
            after_compute(cmd)
