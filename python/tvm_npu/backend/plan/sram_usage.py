"""SRAM utilization and fragmentation, from the planner's own allocations (reports only).

The planner reserves SRAM per layer: a resident from its producer to its last consumer (sram.py), a
layer's activation buffers for that layer (layer_plan.py, the arena's takes), a weight slot from the layer
its load may start in to the layer that uses it (weights.py). `allocations` lists those reservations as
the planner made them; a command is in the layer whose emission put it in the stream (its *phase*, in
planner.py), and the bytes live while it runs are the union of the reservations covering its phase.

`usage` turns that into what a user reads, for the whole region and per layer (the commands a layer
owns, its weight loads included, whatever phase they were emitted in):

    peak utilization           the most bytes live during any of the commands / sram_bytes
    time-weighted utilization  sum(bytes live x command cycles) / (sram_bytes x sum(command cycles))
    at the peak                the free bytes and the largest free (contiguous) block of SRAM

Command cycles are each command's own duration (start to end): the cost model's at compile time, the
runtime's records in `tvm_npu.profile`. Nothing here changes a placement.
"""

from __future__ import annotations

from bisect import bisect_right


def allocations(residents: dict, plans: list, names: list) -> list:
    """Every SRAM reservation of a planned region as [address, bytes, first layer, last layer, kind,
    name]: kind "resident" (a tensor, by name), "buffers" (one of a layer's activation buffers) or
    "weights" (a constant block's slot; name: the layer it belongs to). Layers are indices of `names`."""
    out = [
        [r.addr, r.size, r.first, r.last, "resident", r.name] for r in sorted(residents.values(), key=lambda r: r.name)
    ]
    for i, lp in enumerate(plans):
        out += [[addr, size, i, i, "buffers", names[i]] for addr, size in lp.buffers or ()]
        out += [[addr, size, first, last, "weights", names[i]] for addr, size, first, last in lp.w_reserved]
    return out


def merged(intervals, limit: int) -> list:
    """[lo, hi) intervals clipped to [0, limit), sorted and merged."""
    out: list = []
    for lo, hi in sorted((max(0, lo), min(limit, hi)) for lo, hi in intervals):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def free_space(busy: list, limit: int) -> tuple[int, int]:
    """(free bytes, largest free block) of [0, limit) around the merged `busy` intervals."""
    gaps, at = [], 0
    for lo, hi in busy:
        gaps.append(lo - at)
        at = hi
    gaps.append(limit - at)
    return sum(gaps), max(gaps)


def phases(first_commands: list, n_commands: int) -> list:
    """The layer index of every command, from the index of the first command of each layer's emission."""
    return [max(0, bisect_right(first_commands, c) - 1) for c in range(n_commands)]


def usage(allocs: list, first_commands: list, notes: list, durations: list, sram_bytes: int) -> dict:
    """The region's and each layer's SRAM use (module docstring).

    Parameters
    ----------
    allocs : list
        `allocations(...)`, as the planner recorded it (stream.info["sram_allocations"]).
    first_commands : list of int
        Per layer, the index of its first command (stream.info["layer_first_command"]).
    notes : list of str
        Per command, the layer it belongs to ("" for END).
    durations : list of int
        Per command, its cycles (end - start).
    sram_bytes : int
        The SRAM size.

    Returns
    -------
    dict
        ``peak_bytes``, ``peak_utilization``, ``time_weighted_utilization``, ``peak_command`` (index),
        ``free_bytes_at_peak``, ``largest_free_block_at_peak`` for the region, and the same under
        ``layers[name]`` for each layer's commands.
    """
    phase = phases(first_commands, len(notes))
    cache: dict = {}

    def at(p: int) -> tuple[int, int, int]:  # bytes live, free bytes, largest free block in phase p
        if p not in cache:
            busy = merged(((a, a + n) for a, n, lo, hi, *_ in allocs if lo <= p <= hi), sram_bytes)
            cache[p] = (sum(hi - lo for lo, hi in busy), *free_space(busy, sram_bytes))
        return cache[p]

    def summary(indices: list) -> dict:
        peak = max(indices, key=lambda c: (at(phase[c])[0], -c), default=None)
        cycles = sum(durations[c] for c in indices)
        weighted = sum(at(phase[c])[0] * durations[c] for c in indices)
        live, free, largest = at(phase[peak]) if peak is not None else (0, sram_bytes, sram_bytes)
        return {
            "peak_bytes": live,
            "peak_utilization": live / sram_bytes,
            "time_weighted_utilization": weighted / (sram_bytes * cycles) if cycles else 0.0,
            "peak_command": peak,
            "free_bytes_at_peak": free,
            "largest_free_block_at_peak": largest,
        }

    owned: dict = {}
    for c, note in enumerate(notes):
        if note:
            owned.setdefault(note, []).append(c)
    return {**summary(list(range(len(notes)))), "layers": {name: summary(cs) for name, cs in owned.items()}}
