"""Stage 4e — weight streaming: where each layer's weights wait in SRAM, and when they load.

A layer's weights can load while earlier layers compute only if their SRAM slot is free during those
layers. After every layer's activation buffers are placed, each weight slot (in layer order) gets the
lowest address that is free over the longest run of layers ending at its own: the load may start as
soon as the first layer of that run has begun. Late layers of a CNN have small activations but large
weights (MobileNetV2's last 1x1 convolutions and classifier hold most of its 3.5 MB); with slots
reaching back over the cheap-to-hold early-weight layers, their loads hide behind earlier compute
instead of stalling the MAC array at the end of the network.

A block whose bytes an earlier layer already loaded (an unrolled recurrence reads the same weights at
every time step: one DDR copy, shared) stays where that load put it when its slot can be kept free over
the layers in between: it is loaded once, not once per step (`RESIDENT`).

The loads go out in chunks on DMA channel 1, paced by the compute they hide behind: after each compute
command the streamer may queue as many bytes as the DDR bus moves in that command's cycles. Queuing
everything at once would put a classifier's megabyte in front of the output stores that share the
channel, and in front of the next input tiles on the shared DDR bus.

That pacing starves a weight-bound region (an LLM decode step: one row per dense layer, each layer's
compute a few hundred cycles against thousands of cycles of weights): the loads of layer j+1 went out
after layer j's compute and output store, so the bus idled for that compute, the store and a DMA
latency at every layer, and for a latency at every 32 KiB chunk. The *lead mode* keeps the bus busy
instead: each block loads as one transfer, the transfers alternate between the two channels (one's
latency hides behind the other's data, docs/npu.md section 5), and before every compute command the
loads of later layers are queued until `LEAD_BYTES` of them are ahead of it in the stream (commands
issue in order: a load placed after a compute that waits for its own weights could not start before
them). The planner keeps whichever mode the cost model times faster (planner.py).
"""

from __future__ import annotations

from ...contract.config import NPUConfig
from . import cost_model
from .schedule import Scoreboard, emit_dma
from .sram import align

# Bytes per weight-load command: long enough that the DMA set-up latency is ~3% of a chunk.
CHUNK_BYTES = 32 * 1024
# How far (in chunks) the loads may run ahead of the compute they hide behind: the pacing starts with
# this much credit and saves up no more while nothing is eligible to load.
MAX_CREDIT_CHUNKS = 4
# `load_after` of a block that needs no load: an earlier layer's load of the same bytes is still in SRAM.
RESIDENT = "resident"
# Lead mode: weight bytes of later layers queued ahead of each compute command (at least one block, whatever
# its size). Enough that the next layer's weights are in flight while this one computes; more would put
# more weights in front of the activation transfers behind them (DDR serves transfers in stream order).
# On the 4-layer d-256 decode steps of benchmarks/llm_decode.py, 32 to 64 KiB ran fastest.
LEAD_BYTES = 64 * 1024


def _first_fit(busy: list, size: int, limit: int, alignment: int) -> int | None:
    """Lowest aligned address where [addr, addr + size) overlaps none of the `busy` ranges."""
    addr = 0
    for lo, hi in sorted(busy):
        if addr + size <= lo:
            break
        addr = max(addr, align(hi, alignment))
    return addr if addr + size <= limit else None


def _merged(union: list, ranges: list) -> list:
    """`union` (sorted, disjoint, no two touching) with `ranges` added, kept so. First fit over it is
    first fit over all the ranges (an address inside or at the end of overlapping or touching ranges is
    busy either way), but the list stays as short as the gaps between them: the same resident seen in
    every earlier layer no longer grows it once per layer, which made the search cubic in the layers."""
    out: list = []
    for lo, hi in sorted(union + list(ranges)):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def place_weight_slots(cfg: NPUConfig, plans: list, residents: dict) -> int:
    """Give every constant block a slot (`w_slots`) and the index of the first layer its load may
    overlap (`load_after`). Returns the first SRAM byte above everything placed. Each plan's
    `w_reserved` lists the slot reservations made for its blocks, as (address, bytes, first layer, last
    layer): the SRAM report reads them (sram_usage.py). A block loaded into the previous block's slot
    reserves nothing of its own."""
    busy = [[(lp.base, lp.top)] for lp in plans]
    for r in residents.values():
        for k in range(r.first, r.last + 1):
            busy[k].append((r.addr, r.addr + r.size))
    loaded = {}  # (DDR address, bytes) of a single-block layer's weights -> (slot, last layer it is kept)
    for i, lp in enumerate(plans):
        own = list(lp.w_slots)  # the layer's own slots (layer_plan._layout): one, or two alternating
        for b, blk in enumerate(lp.blocks):
            size = align(blk.nbytes, cfg.alignment)
            key = (blk.ddr_addr, blk.nbytes) if len(lp.blocks) == 1 else None
            if key in loaded and _keep(busy, *loaded[key], i, size):
                slot, last = loaded[key]
                for k in range(last + 1, i + 1):
                    busy[k].append((slot, slot + size))
                lp.w_reserved.append((slot, size, last + 1, i))
                lp.w_slots[b], lp.load_after[b] = slot, RESIDENT
                loaded[key] = (slot, i)
                continue
            best, union = None, []
            for k in range(i, -1, -1):
                union = _merged(union, busy[k])
                addr = _first_fit(union, size, cfg.sram_bytes, cfg.alignment)
                if addr is None:
                    break
                best = (k, addr)
            if best is None:
                # No room beside the blocks already waiting: load into the previous block's slot once
                # its computes are done. Block 0 always fits above the layer's buffers (layer_plan._layout).
                # With two own slots (layer_plan._layout), the blocks alternate: block b loads into block
                # b - 2's slot, while block b - 1 computes; block 1 into the own slot block 0 left free.
                if len(set(own)) > 1 and b >= 2 and lp.w_slots[b - 2] != lp.w_slots[b - 1]:
                    lp.w_slots[b], lp.load_after[b] = lp.w_slots[b - 2], None
                    continue
                spare = [s for s in own if all(hi <= s or lo >= s + size for lo, hi in busy[i])]
                if len(set(own)) > 1 and b == 1 and spare:
                    lp.w_slots[b], lp.load_after[b] = spare[0], None
                    busy[i].append((spare[0], spare[0] + size))
                    continue
                lp.w_slots[b], lp.load_after[b] = lp.w_slots[b - 1], None
                continue
            lp.load_after[b], lp.w_slots[b] = best
            for k in range(best[0], i + 1):
                busy[k].append((best[1], best[1] + size))
            lp.w_reserved.append((best[1], size, best[0], i))
            if key is not None:
                loaded[key] = (best[1], i)
    return max((hi for ranges in busy for _, hi in ranges), default=0)


def _keep(busy: list, slot: int, last: int, i: int, size: int) -> bool:
    """Whether [slot, slot + size) is free in every layer after `last` up to `i`."""
    return all(hi <= slot or lo >= slot + size for k in range(last + 1, i + 1) for lo, hi in busy[k])


class WeightStreamer:
    """Emits the streamed constant-block loads of every layer, chunk by chunk, between compute commands."""

    def __init__(self, cfg: NPUConfig, sb: Scoreboard, plans: list, names: list, lead: bool = False):
        self.cfg, self.sb, self.names, self.lead = cfg, sb, names, lead
        if lead:  # results alternate channels like the loads (a decode step's q / k / v stores at its end)
            sb.store_channels = (1, 0)
        self.queue = []  # (layer, load_after, bytes, DMA operands of Block.loads), in layer order
        for j, lp in enumerate(plans):
            for blk, slot, after in zip(lp.blocks, lp.w_slots, lp.load_after):
                if after is None or after == RESIDENT:
                    continue
                chunk = blk.nbytes if lead else CHUNK_BYTES  # lead mode: one DMA per block piece
                for dma in blk.loads(slot, cfg.alignment, chunk):
                    self.queue.append((j, after, dma[2] * dma[3], dma))
        self.credit = float(MAX_CREDIT_CHUNKS * CHUNK_BYTES)
        self.loads = 0
        self.sent = {}  # layer -> bytes of its loads emitted so far (lead mode)

    def add(self, items: list):
        """Queue more loads, (layer, load_after, bytes, DMA operands) each, among those of the constants
        in layer order (a held region input's: held_inputs.py)."""
        self.queue = sorted(self.queue + items, key=lambda item: item[0])

    def _emit(self, item):
        j, _, n, dma = item
        channel = self.loads % 2 if self.lead else 1
        self.loads += 1
        self.sent[j] = self.sent.get(j, 0) + n
        emit_dma(self.sb, "DMA_LOAD", channel, *dma, self.names[j])

    def before_compute(self, layer: int):
        """Lead mode: called before each compute command of `layer`; queue the loads of later layers
        (those whose slots are free by now) until LEAD_BYTES of them are ahead of it."""
        if not self.lead:
            return
        ahead = sum(n for j, n in self.sent.items() if j > layer)
        kept = []
        for item in self.queue:
            if ahead < LEAD_BYTES and item[1] <= layer:
                self._emit(item)
                ahead += item[2]
            else:
                kept.append(item)
        self.queue = kept

    def flush(self, layer: int):
        """Emit what is left of the loads of `layer` and of the layers before it."""
        for item in [q for q in self.queue if q[0] <= layer]:
            self._emit(item)
        self.queue = [q for q in self.queue if q[0] > layer]

    def after_compute(self, layer: int, cmd):
        """Called after each compute command of `layer`: queue the loads its cycles can hide."""
        if self.lead:
            return self.before_compute(layer)  # the lead, not the compute, decides (module docstring)
        cap = MAX_CREDIT_CHUNKS * CHUNK_BYTES
        self.credit = min(cap, self.credit + cost_model.compute_cycles(self.cfg, cmd) * self.cfg.ddr_bytes_per_cycle)
        kept = []
        for item in self.queue:
            if self.credit > 0 and item[1] <= layer:
                self._emit(item)
                self.credit -= item[2]
            else:
                kept.append(item)
        self.queue = kept
