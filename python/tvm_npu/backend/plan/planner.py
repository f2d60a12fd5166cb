"""Stage 4 — plan: turn a lowered region into a command stream, in order:

    constants   weights / biases / requantization rows laid out in DDR, per layer whatever its blocks
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
emit.py turns each planned layer into its commands, tile by tile.
"""

from __future__ import annotations

import math

import numpy as np

from ...contract.config import NPUConfig
from ...contract.errors import NPUError
from ...contract.stream import DTYPE_BYTES, SLICE_ALIGNMENT, Stream, TensorDesc
from ..lower.graph import Graph, Layer
from . import cost_model, recurrence, slices
from .emit import Block, LayerPlan, Placed, emit_layer, src_rows
from .matmul_plan import matmul_layout, tile_options
from .schedule import Scoreboard, emit_dma
from .sram import Arena, align, live_ranges, place_residents, resident_top
from .tiling import oc_blocks, row_tiles, tile_heights
from .weights import WeightStreamer, place_weight_slots

# Fractions of SRAM offered to resident intermediates (0: everything streams through DDR).
RESIDENT_SHARES = (0.0, 0.5, 0.7, 0.85)
# SRAM a layer may spend on one output buffer per channel block (_layout) instead of a ping / pong pair.
OUT_BUF_BYTES = 64 * 1024


def constant_bytes(cfg: NPUConfig, layer: Layer, oc0: int, oc1: int) -> tuple[bytes, int, int]:
    """Weights rows [oc0, oc1) then the fp32 bias, the int8 requantization block (bias, scale) or the W8A16
    dequantization block (fp32 bias, zeros without one, then the weights' scales); for a
    vector layer its one constant row (ELTWISE's b, or UNARY's int8 table), a SOFTMAX's mask rows, a
    ROPE's cos and sin rows, or a NORM's fp32 gamma and beta rows, each padded to the alignment (the command
    finds beta one aligned row after gamma)."""
    if layer.const is not None and layer.kind in ("softmax", "rope"):  # fp16 rows, each aligned (a stride)
        rows = layer.const.shape[1] * 2
        return b"".join(r.tobytes().ljust(align(rows, cfg.alignment), b"\0") for r in layer.const), 0, 0
    if layer.kind == "norm":
        row = align(layer.const.shape[1] * 4, cfg.alignment)
        return b"".join(r.astype("<f4").tobytes().ljust(row, b"\0") for r in layer.const), 0, 0
    if layer.const is not None:
        raw = np.ascontiguousarray(layer.const).tobytes()
        return raw, 0, 0
    if layer.w4:
        return int4_bytes(cfg, layer, oc0, oc1)
    w = layer.weight[oc0:oc1]
    oc = oc1 - oc0
    # Rows packed (docs/npu.md section 3); the bias / requantization rows start aligned after them.
    w_stride = int(np.prod(w.shape[1:])) * w.itemsize
    data = np.ascontiguousarray(w).tobytes()
    data = data.ljust(align(len(data), cfg.alignment), b"\0")
    vec = align(oc * 4, cfg.alignment)
    if layer.dtype == "int8" or layer.w8a16:  # int32 or (W8A16) fp32 bias, then the scales
        bias = np.zeros(oc, "<f4") if layer.bias is None else layer.bias[oc0:oc1]
        data += np.asarray(bias, "<i4" if layer.dtype == "int8" else "<f4").tobytes().ljust(vec, b"\0")
        data += np.asarray(layer.scale[oc0:oc1], "<f4").tobytes().ljust(vec, b"\0")
    elif layer.bias is not None:
        data += layer.bias[oc0:oc1].astype("<f4").tobytes().ljust(vec, b"\0")
    return data, w_stride, align(oc * w_stride, cfg.alignment)


def int4_bytes(cfg: NPUConfig, layer: Layer, oc0: int, oc1: int) -> tuple[bytes, int, int]:
    """A W4A16 / W4A8 dense's rows [oc0, oc1): the codes two a byte along K (even k in the low nibble), then
    its int4 dequantization block (docs/npu.md section 6): the fp32 bias row (zeros without one), under int8
    the fp32 requantization row S, the fp16
    scales [G][oc] packed, and for uint4 from the next aligned offset the zero points, G rows of
    ceil(oc / 2) bytes, even o in the low nibble."""
    codes = layer.weight[oc0:oc1].reshape(oc1 - oc0, -1).astype(np.uint8) & 0x0F
    rows = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    oc, w_stride = oc1 - oc0, rows.shape[1]
    data = rows.tobytes().ljust(align(rows.size, cfg.alignment), b"\0")
    bias = np.zeros(oc, "<f4") if layer.bias is None else layer.bias[oc0:oc1]
    block = np.asarray(bias, "<f4").tobytes().ljust(align(oc * 4, cfg.alignment), b"\0")
    if layer.dtype == "int8":  # W4A8: the requantization row S after the bias row
        block += np.asarray(layer.scale[oc0:oc1], "<f4").tobytes().ljust(align(oc * 4, cfg.alignment), b"\0")
    block += np.ascontiguousarray(layer.w_scales[:, oc0:oc1], "<f2").tobytes()
    if layer.w_zeros is not None:
        zeros = layer.w_zeros[:, oc0:oc1]
        if oc % 2:
            zeros = np.pad(zeros, ((0, 0), (0, 1)))
        packed = (zeros[:, 0::2] | (zeros[:, 1::2] << 4)).astype(np.uint8)
        block = block.ljust(align(len(block), cfg.alignment), b"\0") + packed.tobytes()
    return data + block, w_stride, align(oc * w_stride, cfg.alignment)


def layer_blocks(cfg: NPUConfig, layer: Layer, size: int, image: tuple) -> list[tuple[Block, bytes]]:
    """A conv layer's output-channel blocks of at most `size` channels, each with the DDR bytes it loads
    from. `image` is `constant_bytes` of the whole layer, its one-block layout: every weight row, then the
    bias / scale rows of every channel.

    A layer's constants lie in DDR in that layout whatever its blocks, so the blocks a planner chooses
    for M activation rows do not change the weight region: a prefill (M = the bucket's rows) and a decode
    step (M = 1) carry the same bytes, which the runtime then holds once (docs/llm.md, "The artifact").
    A block loads its weight rows and (a DMA each) its part of the bias / scale rows from there, which
    needs each to start aligned; a layer whose blocks cannot (rows of an odd size, int4's grouped
    scales) stores each block's bytes on their own."""
    raw, w_stride, w_all = image
    oc = layer.weight.shape[0]
    if size >= oc:
        return [(Block(0, oc, -1, len(raw), w_stride, w_all), raw)]
    a = cfg.alignment
    vec_all = align(oc * 4, a)
    if layer.w4 or size * w_stride % a or size * 4 % a:
        out = []
        for oc0, oc1 in oc_blocks(oc, size):
            own, _, w_bytes = constant_bytes(cfg, layer, oc0, oc1)
            out.append((Block(oc0, oc1, -1, len(own), w_stride, w_bytes), own))
        return out
    rows = (len(raw) - w_all) // vec_all  # bias / scale rows: 0, 1 (fp16 bias) or 2 (int8, W8A16)
    out = []
    for oc0, oc1 in oc_blocks(oc, size):
        n = oc1 - oc0
        w_bytes, vec = align(n * w_stride, a), align(n * 4, a)
        # One load per row: a 2-row load's source footprint (rows x stride) would reach past the layer's
        # last row from any block but the first (docs/npu.md section 6).
        pieces = ((oc0 * w_stride, 0, n * w_stride),)
        pieces += tuple((w_all + r * vec_all + oc0 * 4, w_bytes + r * vec, n * 4) for r in range(rows))
        out.append((Block(oc0, oc1, -1, w_bytes + rows * vec, w_stride, w_bytes, pieces), raw))
    return out


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


def _layout(cfg, layer, srcs, dst, blocks, base, tile_oh) -> LayerPlan | None:
    if layer.kind == "matmul":
        return matmul_layout(cfg, layer, srcs, dst, base, tile_oh, LayerPlan)
    arena = Arena(cfg, base)
    tiles = row_tiles(layer, srcs[0].view, dst.view, tile_oh)
    in_rows = max(t.in_rows for t in tiles)
    in_bufs = [
        None if s.space == "sram" else [arena.take(src_rows(layer, k, in_rows) * s.row_stride) for _ in (0, 1)]
        for k, s in enumerate(srcs)
    ]
    out_rows = max(t.out_rows for t in tiles)  # the last tile may have grown (tiling.row_tiles)
    out_bytes = (
        out_rows * align(dst.view[2] * max(b.oc1 - b.oc0 for b in blocks) * dst.elem, cfg.alignment)
        if blocks and len(blocks) > 1
        else out_rows * dst.row_stride
    )
    # One buffer per block when a block is one tile (a decode step's classifier): a block's store waits behind
    # the weight loads already queued (DDR serves transfers in stream order), so a block reusing an
    # earlier block's buffer would wait for those loads too instead of computing as its weights arrive.
    n_out = len(blocks) if len(tiles) == 1 and len(blocks) > 2 and len(blocks) * out_bytes <= OUT_BUF_BYTES else 2
    out_bufs = None if dst.space == "sram" else [arena.take(out_bytes) for _ in range(n_out)]
    top = arena.top
    # Until weights.place_weight_slots finds it an earlier home, the weight slot sits right above.
    w_slot = arena.take(max(b.nbytes for b in blocks)) if blocks else None
    if arena.top > cfg.sram_bytes:
        return None
    return LayerPlan(tile_oh, blocks, w_slot, in_bufs, out_bufs, base, top)


def _choose(cfg, layer, srcs, dst, blocks_options, base) -> LayerPlan | None:
    """The fastest (estimated) tile height and block size among those that fit above `base`."""
    best = None
    for blocks in blocks_options:
        heights = tile_options(layer, tile_heights(layer.matmul[1])) if layer.kind == "matmul" else None
        for tile_oh in heights or tile_heights(dst.view[1]):
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


def _weight_bound(cfg: NPUConfig, planned: tuple) -> bool:
    """Loading the region's constants takes the bus longer than its compute takes the engines (an LLM
    decode step): the weight streamer's lead mode may be faster (weights.py)."""
    est = cost_model.estimate(cfg, planned[0])
    return len(planned[1]) > (est.mac_cycles + est.vector_cycles) * cfg.ddr_bytes_per_cycle


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
    aliased = set(roots) | set(roots.values()) | set(slices) | joined | pinned
    # A region output that later layers of the region read too (a decoder layer's residual stream, read by
    # the next norm) may stay resident for them, a copy stored to its DDR home as soon as it is written:
    # otherwise they load it back after that store, which waits behind the weight loads queued before it.
    mirrored = (set(graph.outputs) - set(graph.inputs) - aliased) if budget else set()
    boundary = set(graph.inputs) | (set(graph.outputs) - mirrored) | set(roots) | set(roots.values())
    layers = compute_layers(graph)
    ranges = live_ranges(layers, boundary, {t: s.root for t, s in slices.items()})
    for name in mirrored & set(ranges):  # kept to the end: a later layer's buffer there would wait for the copy
        ranges[name] = (ranges[name][0], len(layers) - 1)
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
        if layer.const is not None:  # one block: ELTWISE's b, UNARY's table, NORM's gamma and beta
            raw, _, _ = constant_bytes(cfg, layer, 0, 1)
            blk = Block(0, 1, -1, len(raw), 0, 0)
            data[id(blk)] = raw
            blocks[layer.name] = [[blk]]
            continue
        if layer.kind != "conv":
            continue
        oc = layer.weight.shape[0]
        image = constant_bytes(cfg, layer, 0, oc)
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
            for blk, raw in layer_blocks(cfg, layer, size, image):
                data[id(blk)] = raw
                opt.append(blk)
            options.append(opt)
        blocks[layer.name] = options
    top = 0
    placed, mirrors = {}, {}
    for name, info in graph.tensors.items():
        stride = align(info.view[2] * info.view[3] * elems[name], cfg.alignment)
        if name in roots or name in slices:
            continue
        if name in residents:
            placed[name] = Placed("sram", residents[name].addr, info.view, stride, elems[name])
            if name in mirrored:
                mirrors[name] = Placed("ddr", top, info.view, stride, elems[name])
                top += align(sizes[name], cfg.alignment)
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
    return residents, data, blocks, placed, top, sizes, mirrors


def _finish_ddr(cfg, graph, plans, data, placed, rel_top):
    """Lay out the chosen constant blocks' bytes from DDR address 0 and move the activations above them.
    Blocks with the same bytes (an unrolled recurrence's weights, one per time step; the blocks of a
    layer in its row-independent layout, layer_blocks) share one copy, which also lets weights.py keep
    one load of it in SRAM."""
    weights, per_layer, copies = bytearray(), {}, {}
    for layer, lp in zip(compute_layers(graph), plans):
        own = {}
        for blk in lp.blocks:
            raw = data[id(blk)]
            if raw not in copies:
                copies[raw] = len(weights)
                weights += raw.ljust(align(len(raw), cfg.alignment), b"\0")
            blk.ddr_addr = copies[raw]
            own[blk.ddr_addr] = align(len(raw), cfg.alignment)
        per_layer[layer.name] = sum(own.values())
    base = align(len(weights), cfg.alignment)
    for p in {id(p): p for p in placed.values()}.values():
        if p.space == "ddr":
            p.addr += base
    return bytes(weights), base + rel_top, per_layer


def _plan_region(
    cfg: NPUConfig,
    graph: Graph,
    budget: int,
    slices: dict,
    joined: set,
    pinned: set,
    small_first: bool = True,
    lead: bool = False,
):
    placement = _place(cfg, graph, budget, slices, joined, pinned, small_first)
    if placement is None:
        layer = next(lay for lay in graph.layers if lay.kind == "concat" and lay.out in joined)
        n, h, w, c = graph.tensors[layer.out].view
        return None, layer, n * h * align(w * c * DTYPE_BYTES[layer.dtype], cfg.alignment)
    residents, data, blocks, placed, rel_top, sizes, mirrors = placement
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
    homes = {**placed, **{(name, "ddr"): p for name, p in mirrors.items()}}
    weights, ddr_top, layer_weight_bytes = _finish_ddr(cfg, graph, plans, data, homes, rel_top)
    sram_top = place_weight_slots(cfg, plans, residents)
    streamer = WeightStreamer(cfg, sb, plans, [layer.name for layer in layers], lead)
    # A mirrored tensor is whole once the last layer writing its bytes has run: its producer, or the last
    # producer of its slices (a stack of rows is written by several layers and is no layer's output).
    complete = {}
    for i, layer in enumerate(layers):
        name = slices[layer.out].root if layer.out in slices else layer.out
        if name in mirrors:
            complete[name] = i
    copy_after = {i: name for name, i in complete.items()}
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
            before_compute=lambda cmd, i=i: streamer.before_compute(i),
        )
        if i in copy_after:  # the resident output's copy in its DDR home (_place)
            src, home = placed[copy_after[i]], mirrors[copy_after[i]]
            rows = src.view[0] * src.view[1]
            ch = sb.store_channel()
            emit_dma(sb, "DMA_STORE", ch, home.addr, src.addr, rows, src.row_bytes, home.row_stride, src.row_stride,
                     layer.name)  # fmt: skip
        ideal += cost_model.ideal_cycles(cfg, layer)
    commands = sb.finish()
    placed = {**placed, **mirrors}  # the region's outputs are their DDR homes
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

    def attempt(share, small_first, lead=False):  # ((cycles, DDR bytes) or None, share, plan or (layer, need))
        planned, bad_layer, bad_need = _plan_region(
            cfg, graph, int(cfg.sram_bytes * share), slices_of, joined, pinned, small_first, lead
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
    if done and _weight_bound(cfg, min(done, key=lambda t: t[0])[2]):
        tries.append(attempt(min(done, key=lambda t: t[0])[1], True, lead=True))  # weights.py, lead mode
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
