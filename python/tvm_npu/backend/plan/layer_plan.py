"""One layer's plan: the output-channel block sizes to try, the SRAM layout of each candidate (input,
output and weight buffers above a base), and the fastest candidate by the cost model (cost_model.py).

Also the two region-level tests planner.plan uses to decide which further attempts are worth planning
(weight-heavy layers planned without small blocks, the weight streamer's lead mode). Apart from
planner.py, which places a region's tensors and runs these choices layer by layer, so each file keeps
one concern: there the region, here a layer.
"""

from __future__ import annotations

import math

from ...contract.config import NPUConfig
from ...contract.stream import DTYPE_BYTES, SLICE_ALIGNMENT
from ..lower.graph import Graph, Layer
from . import cost_model
from .emit import LayerPlan, Placed, emit_layer, src_rows
from .matmul_plan import matmul_layout, tile_options
from .restride_plan import restride_layout
from .row_slices import is_sliced
from .schedule import Scoreboard
from .sram import Arena, align
from .tiling import row_tiles, tile_heights
from .upsample_plan import upsample_layout

# SRAM a layer may spend on one output buffer per channel block (_layout) instead of a ping / pong pair.
OUT_BUF_BYTES = 64 * 1024


def block_sizes(cfg: NPUConfig, layer: Layer, dst: Placed, in_bytes: int, small_first: bool = True) -> list[int]:
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
    """A classifier-like layer: weights far larger than its input (see block_sizes)."""
    return in_bytes * 64 <= layer.weight.nbytes


def _layout(cfg, layer, srcs, dst, blocks, base, tile_oh) -> LayerPlan | None:
    if layer.kind == "matmul":
        return matmul_layout(cfg, layer, srcs, dst, base, tile_oh, LayerPlan)
    if layer.kind == "upsample":  # bands of input rows, fH output rows each (upsample_plan.py)
        return upsample_layout(cfg, layer, srcs, dst, base, tile_oh, LayerPlan)
    if layer.kind == "restride":  # bands of map rows copied to the tokens' pitch or back (restride_plan.py)
        return restride_layout(cfg, layer, srcs, dst, base, tile_oh, LayerPlan)
    arena = Arena(cfg, base)
    tiles = row_tiles(layer, srcs[0].view, dst.view, tile_oh)
    in_rows = max(t.in_rows for t in tiles)
    # A column slice's footprint reaches up to a row past its buffer (row_slices.py): one more row each.
    extra = 1 if is_sliced(cfg, layer, dst.view) else 0
    in_bufs = [
        None
        if s.space == "sram"
        else [arena.take((src_rows(layer, k, in_rows) + extra) * s.row_stride) for _ in (0, 1)]
        for k, s in enumerate(srcs)
    ]
    out_rows = max(t.out_rows for t in tiles)  # the last tile may have grown (tiling.row_tiles)
    out_bytes = (
        out_rows * align(dst.view[2] * max(b.oc1 - b.oc0 for b in blocks) * dst.elem, cfg.alignment)
        if blocks and len(blocks) > 1
        else (out_rows + extra) * dst.row_stride
    )
    # One buffer per block when a block is one tile (a decode step's classifier): a block's store waits behind
    # the weight loads already queued (DDR serves transfers in stream order), so a block reusing an
    # earlier block's buffer would wait for those loads too instead of computing as its weights arrive.
    n_out = len(blocks) if len(tiles) == 1 and len(blocks) > 2 and len(blocks) * out_bytes <= OUT_BUF_BYTES else 2
    out_bufs = None if dst.space == "sram" else [arena.take(out_bytes) for _ in range(n_out)]
    top, buffers = arena.top, list(arena.taken)
    # Until weights.place_weight_slots finds it an earlier home, the weight slot sits right above.
    size = max(b.nbytes for b in blocks) if blocks else 0
    w_slot = arena.take(size) if blocks else None
    if arena.top > cfg.sram_bytes:
        return None
    # Blocks of a layer loaded by the layer itself alternate between two slots where a second fits: block
    # b + 1 loads while block b computes. In one slot, each load waited for the previous block's computes
    # (SD-1.5's 1280 -> 10240 GEGLU projection: 4 blocks of 3.3 MB, load and compute in series).
    w_slots = None
    if len(blocks) > 1 and align(arena.top, cfg.alignment) + size <= cfg.sram_bytes:
        pair = [w_slot, arena.take(size)]
        w_slots = [pair[b % 2] for b in range(len(blocks))]
    return LayerPlan(
        tile_oh, blocks, w_slot, in_bufs, out_bufs, base, top, w_slots=w_slots, buffers=buffers, reach=arena.top
    )


def heights(layer: Layer, dst: Placed) -> list[int]:
    """The tile heights `choose` tries, in its order."""
    options = tile_options(layer, tile_heights(layer.matmul[1])) if layer.kind == "matmul" else None
    return options or tile_heights(dst.view[1])


def timed(cfg, layer, srcs, dst, lp: LayerPlan) -> LayerPlan:
    """`lp` with its cycles set: its layer emitted alone, timed by the cost model."""
    sb = Scoreboard()
    emit_layer(sb, cfg, layer, srcs, dst, lp)
    lp.cycles = cost_model.estimate(cfg, sb.commands).total_cycles
    return lp


def unbounded(cfg, layer, srcs, dst, blocks, base, tile_oh) -> LayerPlan | None:
    """The layout `choose` would make of `tile_oh` rows above `base` if SRAM had no end: what a tile that
    did not fit would have needed (`reach - base` bytes). fragmentation.py asks; no plan uses it."""
    return _layout(cfg.replace(sram_bytes=cfg.sram_bytes * 64), layer, srcs, dst, blocks, base, tile_oh)


def choose(cfg, layer, srcs, dst, blocks_options, base) -> LayerPlan | None:
    """The fastest (estimated) tile height and block size among those that fit above `base`."""
    best, tried = None, None
    for blocks in blocks_options:
        for tile_oh in heights(layer, dst):
            lp = _layout(cfg, layer, srcs, dst, blocks, base, tile_oh)
            if lp is None:
                continue
            timed(cfg, layer, srcs, dst, lp)
            if best is None or lp.cycles < best.cycles:
                best = lp
        if best is not None:
            # Fewer, larger blocks first; smaller ones when nothing fits. Blocks in one slot load and
            # compute in series, and so does one block too large to load behind the layers before it
            # (a quarter of SRAM; SD-1.5's 1280 x 1280 projections, 3.3 MB of 8): then also the next
            # two smaller sizes, whose two slots may fit (_layout).
            tried = tried + 1 if tried is not None else 0
            serial = len(set(best.w_slots)) == 1 and (
                len(best.blocks) > 1 or best.blocks[0].nbytes > cfg.sram_bytes // 4
            )
            if tried == 2 or not serial:
                break
    return best


def any_weight_heavy(cfg: NPUConfig, graph: Graph) -> bool:
    for layer in graph.layers:
        if layer.kind == "conv" and layer.groups == 1:
            n, h, w, c = graph.tensors[layer.inputs[0]].view
            if _weight_heavy(layer, n * h * align(w * c * DTYPE_BYTES[layer.dtype], cfg.alignment)):
                return True
    return False


def weight_bound(cfg: NPUConfig, planned: tuple) -> bool:
    """Loading the region's constants takes the bus longer than its compute takes the engines (an LLM
    decode step): the weight streamer's lead mode may be faster (weights.py)."""
    est = cost_model.estimate(cfg, planned[0])
    return len(planned[1]) > (est.mac_cycles + est.vector_cycles) * cfg.ddr_bytes_per_cycle
