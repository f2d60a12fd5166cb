"""Stage 4 — plan: turn a lowered region into a command stream, in order:

    constants   weights / biases / requantization rows laid out in DDR, per layer whatever its blocks
                (constants.py)
    DDR         every region tensor that is not SRAM-resident gets a DDR home
    state       an unrolled recurrence's state pinned in SRAM for its whole life (recurrence.py)
    slices      concatenations resident in SRAM, their inputs written into their channels (slices.py)
    SRAM        intermediates kept resident by live range (sram.py); per-layer working buffers
    tiling      row tiles (and output-channel blocks for dense weights larger than SRAM), the tile
                height chosen with the cost model among those that fit (layer_plan.py, tiling.py,
                cost_model.py)
    weights     each layer's weight slot placed in SRAM over the longest run of earlier layers it can
                share SRAM with (weights.py), so its load overlaps their compute
    DMA         inputs stream in on channel 0, results out on channel 1; weights on channel 1 in chunks
                paced by the compute they hide behind; waits derived from data dependencies (schedule.py)

If residency leaves a layer too little working SRAM, the region is planned again without residents.
emit.py turns each planned layer into its commands, tile by tile.
"""

from __future__ import annotations

from ...contract.config import NPUConfig
from ...contract.errors import NPUError
from ...contract.stream import DTYPE_BYTES, Stream, TensorDesc
from ..lower.graph import Graph
from . import cost_model, fragmentation, held_inputs, recurrence, restride_plan, slices, sram_usage
from .constants import constant_bytes, layer_blocks
from .emit import Block, Placed, emit_layer
from .layer_plan import any_weight_heavy, block_sizes, choose, weight_bound
from .row_slices import is_sliced
from .schedule import Scoreboard, emit_dma
from .sram import align, live_ranges, place_residents, resident_top
from .upsample_plan import overhang
from .weights import WeightStreamer, place_weight_slots

# Fractions of SRAM offered to resident intermediates (0: everything streams through DDR).
RESIDENT_SHARES = (0.0, 0.5, 0.7, 0.85)


def compute_layers(graph: Graph) -> list:
    """The layers that become commands (views are resolved by aliasing)."""
    return [layer for layer in graph.layers if layer.kind not in ("view", "concat")]


def _place(
    cfg: NPUConfig, graph: Graph, budget: int, slices: dict, joined: set, pinned: set, small_first: bool, hold: bool
):
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
    for layer in graph.layers:  # an upsampling's copies reach past its output's last row (upsample_plan.py)
        if layer.kind == "upsample":
            w, c = graph.tensors[layer.out].view[2:]
            stride = align(w * c * elems[layer.out], cfg.alignment)
            sizes[layer.out] += align(overhang(stride, layer.stride, c * elems[layer.out]), cfg.alignment)
    for layer in compute_layers(graph):  # a column slice reaches up to a row past its tensor (row_slices.py)
        if is_sliced(cfg, layer, graph.tensors[layer.out].view):
            for name in {roots.get(t, t) for t in layer.inputs + [layer.out]}:
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
    # Region inputs loaded once and kept in SRAM for their readers (held_inputs.py)
    held_ranges = held_inputs.input_ranges(layers, graph.inputs, aliased | set(graph.outputs)) if hold else {}
    ranges.update(held_ranges)
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
    spilled = fragmentation.spills(cfg, ranges, sizes, budget, residents, [lay.name for lay in layers])
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
            block_sizes(cfg, layer, dst, sizes[layer.inputs[0]], small_first)
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
    placed, mirrors, homes = {}, {}, {}
    for name, info in graph.tensors.items():
        stride = align(info.view[2] * info.view[3] * elems[name], cfg.alignment)
        if name in roots or name in slices:
            continue
        if name in residents:
            placed[name] = Placed("sram", residents[name].addr, info.view, stride, elems[name])
            if name in mirrored or name in held_ranges:  # its DDR home, besides
                (mirrors if name in mirrored else homes)[name] = Placed("ddr", top, info.view, stride, elems[name])
                top += align(sizes[name], cfg.alignment)
        else:
            placed[name] = Placed("ddr", top, info.view, stride, elems[name])
            top += align(sizes[name], cfg.alignment)
    for name, root in roots.items():  # same bytes, the alias's own [N, H, W, C] view
        r, view = placed[root], graph.tensors[name].view
        # Same rows as the root, or (a map and its pixels as rows, constraint_permute_view) rows that
        # are whole aligned lines of it: then the alias's rows are packed at its own row size.
        own = view[2] * view[3] * r.elem
        stride = r.row_stride if own == r.row_bytes else align(own, cfg.alignment)
        placed[name] = Placed(r.space, r.addr + view_rows[name] * r.row_stride, view, stride, r.elem)
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
    held = {name: held_ranges[name] for name in homes}
    return residents, data, blocks, placed, top, sizes, mirrors, spilled, (homes, held)


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
    hold: bool = False,
):
    placement = _place(cfg, graph, budget, slices, joined, pinned, small_first, hold)
    if placement is None:
        layer = next(lay for lay in graph.layers if lay.kind == "concat" and lay.out in joined)
        n, h, w, c = graph.tensors[layer.out].view
        return None, layer, n * h * align(w * c * DTYPE_BYTES[layer.dtype], cfg.alignment)
    residents, data, blocks, placed, rel_top, sizes, mirrors, spilled, (held_homes, held) = placement
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
            lp = choose(cfg, layer, srcs, dst, blocks.get(layer.name, [[]]), max(base, plans[-1].top))
        if lp is None:
            lp = choose(cfg, layer, srcs, dst, blocks.get(layer.name, [[]]), base)
        if lp is None:
            smallest = min((b.nbytes for opt in blocks.get(layer.name, []) for b in opt), default=0)
            return None, layer, max([sizes[t] for t in layer.inputs + [layer.out]] + [smallest])
        plans.append(lp)
    homes = {**placed, **{(name, "ddr"): p for name, p in {**mirrors, **held_homes}.items()}}
    readers = held_inputs.first_readers(layers, held)
    held = {name: first for name, (first, _) in held.items()}
    weights, ddr_top, layer_weight_bytes = _finish_ddr(cfg, graph, plans, data, homes, rel_top)
    sram_top = place_weight_slots(cfg, plans, residents)
    streamer = WeightStreamer(cfg, sb, plans, [layer.name for layer in layers], lead)
    streamer.add(held_inputs.loads({n: placed[n] for n in held}, held_homes, readers, held))
    # A mirrored tensor is whole once the last layer writing its bytes has run: its producer, or the last
    # producer of its slices (a stack of rows is written by several layers and is no layer's output).
    complete = {}
    for i, layer in enumerate(layers):
        name = slices[layer.out].root if layer.out in slices else layer.out
        if name in mirrors:
            complete[name] = i
    copy_after = {i: name for name, i in complete.items()}
    ideal, first_commands = 0, []
    for i, (layer, lp) in enumerate(zip(layers, plans)):
        first_commands.append(len(sb.commands))  # the commands of layer i's phase start here (sram_usage.py)
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
    cramped = fragmentation.tile_limits(cfg, layers, plans, residents, placed)
    placed = {**placed, **mirrors, **held_homes}  # the region's inputs and outputs are their DDR homes
    # Without liveness reuse every resident, every layer's buffers and every weight slot would need
    # bytes of their own.
    info = {
        "residents": sorted(residents),
        "held_inputs": sorted(held),
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
        # Every SRAM reservation and the phase each command runs in: the SRAM report (sram_usage.py).
        "sram_allocations": sram_usage.allocations(residents, plans, [layer.name for layer in layers]),
        "layer_first_command": first_commands,
        # Where first fit lost to fragmentation (fragmentation.py); codegen.py warns about each.
        "sram_fragmentation": spilled + cramped,
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
    # equal cycles, the one that moves fewer bytes). Weight-heavy layers' small blocks (layer_plan.block_sizes) help
    # only when the streamer has earlier layers to load them behind: with the best budget, plan without
    # them too -- with them, a lone classifier on a larger SRAM ran slower and moved more bytes. (Once:
    # MobileNetV2 plans in 20% more time; per budget it took 70% more, for the same schedule.)
    restride_plan.resolve(cfg, graph)  # permute views of narrow pixels become copies
    pinned = recurrence.state_tensors(graph)
    slices_of, joined = slices.resolve(graph, pinned)

    def attempt(share, small_first, lead=False, hold=False):  # ((cycles, DDR bytes) or None, share, plan or ...)
        planned, bad_layer, bad_need = _plan_region(
            cfg, graph, int(cfg.sram_bytes * share), slices_of, joined, pinned, small_first, lead, hold
        )
        if planned is None:
            return None, share, (bad_layer, bad_need)
        est = cost_model.estimate(cfg, planned[0])
        return (est.total_cycles, est.ddr_read_bytes + est.ddr_write_bytes), share, planned

    tries = [attempt(share, True) for share in RESIDENT_SHARES]
    done = [t for t in tries if t[0] is not None]
    if done and any_weight_heavy(cfg, graph):
        tries.append(attempt(min(done, key=lambda t: t[0])[1], False))
    done = [t for t in tries if t[0] is not None]
    if done and weight_bound(cfg, min(done, key=lambda t: t[0])[2]):
        tries.append(attempt(min(done, key=lambda t: t[0])[1], True, lead=True))  # weights.py, lead mode
        done = [t for t in tries if t[0] is not None]
    if done and held_inputs.worth_trying(compute_layers(graph), graph.inputs):  # held_inputs.py
        tries.append(attempt(min(done, key=lambda t: t[0])[1], True, hold=True))
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
