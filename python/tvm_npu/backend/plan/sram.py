"""Stage 4c — SRAM planning: which intermediates stay resident in SRAM, and where everything goes.

Cascading: an intermediate tensor produced and consumed inside one NPU region is kept whole in SRAM
from its producer to its last consumer when it fits, so it never makes a DDR round trip (a residual
block's input stays resident until its add). Residents are placed by live range with a first-fit
address search, so tensors whose lives do not overlap share bytes. What a layer needs while it runs
(weights, input and output tiles) goes in the working area above the residents.

Bank awareness: SRAM interleaves banks every `alignment` bytes. Buffers whose size is a whole number
of bank rounds would all start in the same bank, so each next buffer is nudged by one bank; the ping
and pong halves of a double buffer then start in different banks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...contract.config import NPUConfig


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class Resident:
    name: str
    size: int
    first: int  # index of the producing layer
    last: int  # index of the last consuming layer
    addr: int = 0


def live_ranges(layers: list, boundary: set, root=None) -> dict:
    """(first, last) layer index of every intermediate tensor (produced and consumed by `layers`,
    not in `boundary`). `root` maps a tensor stored inside another (a channel slice) to that one."""
    root = root or {}
    first, last = {}, {}
    for i, layer in enumerate(layers):
        for name in layer.inputs:
            last[root.get(name, name)] = i
        first.setdefault(root.get(layer.out, layer.out), i)
    return {n: (first[n], last[n]) for n in first if n in last and n not in boundary}


def place_residents(cfg: NPUConfig, ranges: dict, sizes: dict, budget: int, required=()) -> dict:
    """Residents by first fit over address and live range, within `budget` bytes of SRAM; the
    `required` ones first, anywhere in SRAM (a concatenation exists only there)."""
    placed: list[Resident] = []
    order = sorted(ranges.items(), key=lambda kv: (kv[0] not in required, kv[1]))
    for name, (first, last) in order:
        size = align(sizes[name], cfg.alignment)
        addr = 0
        for other in sorted(placed, key=lambda r: r.addr):
            if other.last < first or other.first > last:
                continue  # never alive together: may share bytes
            if addr + size <= other.addr:
                break
            addr = max(addr, align(other.addr + other.size, cfg.alignment))
        if addr + size <= (cfg.sram_bytes if name in required else budget):
            placed.append(Resident(name, size, first, last, addr))
    return {r.name: r for r in placed}


def resident_top(residents: dict, layer_index: int) -> int:
    """First byte above every resident alive while layer `layer_index` runs."""
    alive = [r.addr + r.size for r in residents.values() if r.first <= layer_index <= r.last]
    return max(alive, default=0)


class Arena:
    """Bump allocation of a layer's working buffers from `base`, bank-aware (see module docstring)."""

    def __init__(self, cfg: NPUConfig, base: int):
        self.cfg, self.top = cfg, align(base, cfg.alignment)
        self.taken: list[tuple[int, int]] = []  # (address, bytes) of every take, for the SRAM report

    def take(self, size: int) -> int:
        addr = self.top
        size = align(size, self.cfg.alignment)
        self.taken.append((addr, size))
        bank_round = self.cfg.alignment * self.cfg.sram_banks
        self.top = addr + size + (self.cfg.alignment if size % bank_round == 0 else 0)
        return addr
