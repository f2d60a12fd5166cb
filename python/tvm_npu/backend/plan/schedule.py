"""Stage 4d — DMA scheduling: the waits of every command, derived from what it reads and writes.

The planner emits commands in program order together with the memory ranges each one reads and writes;
the scoreboard finds the earlier commands it depends on (read after write, write after read, write after
write) and turns them into the per-engine wait counts of docs/npu.md section 5 ("issue once at most k
commands are outstanding on engine e"). Only true dependencies become waits, so a prefetch on one DMA
channel overlaps the MAC array and the other channel whenever the memory allows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...contract.stream import ENGINES, NO_WAIT, OPERANDS, Command

# Wait fields are 4 bits and 15 means "no wait": the deepest wait we can express is 14 outstanding.
MAX_OUTSTANDING = NO_WAIT - 1


@dataclass
class _Access:
    lo: int
    hi: int
    writer: tuple | None  # (engine, position) of the last command that wrote [lo, hi)
    readers: list = field(default_factory=list)  # (engine, position) of reads since that write


class Scoreboard:
    """Per-space access history and per-engine command counts of the stream being emitted."""

    def __init__(self):
        self.count = dict.fromkeys(ENGINES, 0)
        self.history = {"sram": [], "ddr": []}
        self.commands: list[Command] = []
        # The DMA channels results go out on, in turn: channel 1, or (the weight streamer's lead mode) both,
        # so that each store's set-up latency hides behind the previous one's data (docs/npu.md section 5).
        self.store_channels = (1,)
        self.stores = 0

    def store_channel(self) -> int:
        """The channel of the next DMA_STORE of a result."""
        self.stores += 1
        return self.store_channels[(self.stores - 1) % len(self.store_channels)]

    def _deps(self, space: str, lo: int, hi: int, write: bool) -> list:
        deps = []
        for acc in self.history[space]:
            if acc.hi <= lo or acc.lo >= hi:
                continue
            if acc.writer is not None:
                deps.append(acc.writer)  # RAW, or WAW for a write
            if write:
                deps.extend(acc.readers)  # WAR
        return deps

    def _record(self, space: str, lo: int, hi: int, who: tuple, write: bool):
        hist = self.history[space]
        if write:
            # The new write supersedes older accesses of the same bytes: cut them out.
            kept = []
            for acc in hist:
                if acc.hi <= lo or acc.lo >= hi:
                    kept.append(acc)
                    continue
                if acc.lo < lo:
                    kept.append(_Access(acc.lo, lo, acc.writer, list(acc.readers)))
                if acc.hi > hi:
                    kept.append(_Access(hi, acc.hi, acc.writer, list(acc.readers)))
            kept.append(_Access(lo, hi, who))
            self.history[space] = kept
            return
        covered = []
        for acc in hist:
            if acc.hi > lo and acc.lo < hi:
                acc.readers.append(who)
                covered.append((max(acc.lo, lo), min(acc.hi, hi)))
        # Bytes never written inside the stream (inputs staged by the runtime): remember the read.
        start = lo
        for a, b in sorted(covered):
            if a > start:
                hist.append(_Access(start, a, None, [who]))
            start = max(start, b)
        if start < hi:
            hist.append(_Access(start, hi, None, [who]))

    def emit(self, cmd: Command, reads=(), writes=()) -> Command:
        """Append `cmd`, setting its waits from its (space, lo, hi) reads and writes."""
        engine = cmd.engine
        deps = []
        for space, lo, hi in reads:
            deps += self._deps(space, lo, hi, write=False)
        for space, lo, hi in writes:
            deps += self._deps(space, lo, hi, write=True)
        waits = dict(cmd.waits)
        for dep_engine, pos in deps:
            if dep_engine == engine:
                continue  # an engine runs its own commands in order
            k = min(self.count[dep_engine] - pos - 1, MAX_OUTSTANDING)
            waits[dep_engine] = min(waits.get(dep_engine, NO_WAIT), k)
        cmd.waits = waits
        if engine is not None:
            who = (engine, self.count[engine])
            for space, lo, hi in reads:
                self._record(space, lo, hi, who, write=False)
            for space, lo, hi in writes:
                self._record(space, lo, hi, who, write=True)
            self.count[engine] += 1
        self.commands.append(cmd)
        return cmd

    def finish(self) -> list[Command]:
        """Close the stream with END, which waits for every engine to drain."""
        self.commands.append(Command("END", {}, dict.fromkeys(ENGINES, 0)))
        return self.commands


def emit_dma(sb: Scoreboard, op, channel, ddr, sram, rows, row_bytes, ddr_stride, sram_stride, note):
    """Emit a DMA_LOAD (DDR -> SRAM) or DMA_STORE (SRAM -> DDR) of `rows` rows with its footprints."""
    span_ddr = ("ddr", ddr, ddr + (rows - 1) * ddr_stride + row_bytes)
    span_sram = ("sram", sram, sram + (rows - 1) * sram_stride + row_bytes)
    if op == "DMA_STORE":  # whole rows x stride spans, as verify.py checks them: stores may share no channel
        span_ddr, span_sram = ("ddr", ddr, ddr + rows * ddr_stride), ("sram", sram, sram + rows * sram_stride)
    values = {"channel": channel, "ddr_addr": ddr, "sram_addr": sram, "rows": rows, "row_bytes": row_bytes}
    values.update(ddr_stride=ddr_stride, sram_stride=sram_stride, pos_mode=0)  # static (format 1.4's 0)
    args = {name: values[name] for name in OPERANDS[op]}  # in the contract's word order
    src, dst = (span_ddr, span_sram) if op == "DMA_LOAD" else (span_sram, span_ddr)
    return sb.emit(Command(op, args, {}, note), reads=[src], writes=[dst])
