"""Where SRAM fragmentation cost the chosen plan something (reports only: nothing here changes it).

Two ways the planner's first-fit placement can lose to fragmentation, both "enough free bytes in
total, but no contiguous block":

    spill   an intermediate that should stay resident (sram.place_residents) found no address free over
            its whole live range below the residency budget, though the residents alive with it leave
            at least its size free there: it makes a DDR round trip instead.
    tile    a layer's buffers go in one block above the residents alive with it (and above the previous
            layer's buffers, when the planner put them there so the two overlap); a taller tile the cost
            model times faster did not fit that block, though the SRAM free at the layer in total would
            have held it.

Each finding is a dict naming the layer, with the numbers; codegen.py warns with its message.
"""

from __future__ import annotations

from .layer_plan import heights, timed, unbounded
from .sram import align, resident_top
from .sram_usage import free_space, merged


def spills(cfg, ranges: dict, sizes: dict, budget: int, residents: dict, names: list) -> list:
    """The intermediates `place_residents` left in DDR for want of a contiguous block (module docstring).
    `ranges` and `sizes` are what it was given; `names` the layers' names by index."""
    found = []
    for tensor, (first, last) in sorted(ranges.items(), key=lambda kv: kv[1]):
        if tensor in residents:
            continue
        size = align(sizes[tensor], cfg.alignment)
        alive = [(r.addr, r.addr + r.size) for r in residents.values() if not (r.last < first or r.first > last)]
        free, largest = free_space(merged(alive, budget), budget)
        if largest < size <= free:
            found.append(
                {
                    "kind": "spill",
                    "layer": names[first],
                    "tensor": tensor,
                    "bytes": size,
                    "free_bytes": free,
                    "largest_free_block": largest,
                    "message": f"SRAM fragmentation: {tensor}, the output of layer {names[first]} ({size} bytes), "
                    f"goes to DDR and back instead of staying in SRAM until layer {names[last]}: {free} bytes of "
                    f"the {budget}-byte residency budget are free over its life, but the largest free block is "
                    f"{largest} bytes",
                }
            )
    return found


def tile_limits(cfg, layers: list, plans: list, residents: dict, placed: dict) -> list:
    """The layers whose tiles fragmentation kept smaller than the cost model's choice (module docstring)."""
    found = []
    for i, (layer, lp) in enumerate(zip(layers, plans)):
        srcs, dst = [placed[t] for t in layer.inputs], placed[layer.out]
        taller = [h for h in heights(layer, dst) if h > lp.tile_oh]
        if not taller:
            continue
        busy = [(r.addr, r.addr + r.size) for r in residents.values() if r.first <= i <= r.last]
        if i and lp.base >= plans[i - 1].top > resident_top(residents, i):  # above the previous layer's buffers
            busy.append((plans[i - 1].base, plans[i - 1].top))
        free, largest = free_space(merged(busy, cfg.sram_bytes), cfg.sram_bytes)
        if free == largest:
            continue  # one free block: whatever did not fit it did not fit SRAM
        best = None
        for h in taller:
            alt = unbounded(cfg, layer, srcs, dst, lp.blocks, lp.base, h)
            if alt is None or not largest < alt.reach - lp.base <= free:
                continue
            timed(cfg, layer, srcs, dst, alt)
            if alt.cycles < lp.cycles and (best is None or alt.cycles < best.cycles):
                best = alt
        if best is not None:
            need = best.reach - lp.base
            found.append(
                {
                    "kind": "tile",
                    "layer": layer.name,
                    "tile_rows": lp.tile_oh,
                    "better_rows": best.tile_oh,
                    "bytes": need,
                    "free_bytes": free,
                    "largest_free_block": largest,
                    "cycles": lp.cycles,
                    "better_cycles": best.cycles,
                    "message": f"SRAM fragmentation: layer {layer.name} runs tiles of {_rows(lp.tile_oh)} (estimated "
                    f"{lp.cycles} cycles); tiles of {_rows(best.tile_oh)} ({best.cycles} cycles) need {need} bytes of "
                    f"working SRAM, and {free} bytes are free while it runs, but the largest free block is "
                    f"{largest} bytes",
                }
            )
    return found


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
