"""Stage 4d — DMA scheduling: the waits of every command, derived from what it reads and writes.

The planner emits commands in program order together with the memory ranges each one reads and writes;
the scoreboard finds the earlier commands it depends on (read after write, write after read, write after
write) and turns them into the per-engine wait counts of docs/npu.md section 5 ("issue once at most k
commands are outstanding on engine e"). Only true dependencies become waits, so a prefetch on one DMA
channel overlaps the MAC array and the other channel whenever the memory allows it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from ...contract.errors import NPUError
from ...contract.stream import ENGINES, NO_WAIT, OPERANDS, Command

# Wait fields are 4 bits and 15 means "no wait": the deepest wait we can express is 14 outstanding.
MAX_OUTSTANDING = NO_WAIT - 1


@dataclass
class _Access:
    lo: int
    hi: int
    writer: tuple | None  # (engine, position) of the last command that wrote [lo, hi)
    # engine -> position of its latest read since that write: a wait on an engine's latest command covers its
    # earlier ones, so older reads can never tighten a wait and keeping them made emission quadratic.
    readers: dict = field(default_factory=dict)


class Scoreboard:
    """Per-space access history and per-engine command counts of the stream being emitted.

    Each space's history is a list of disjoint ranges sorted by start, found by bisection, so emitting a
    command costs the ranges it touches rather than the whole history (large regions compiled in minutes).
    """

    def __init__(self):
        self.count = dict.fromkeys(ENGINES, 0)
        self.history = {"sram": [], "ddr": []}
        self.starts = {"sram": [], "ddr": []}  # the .lo of each history entry, for bisect
        self.commands: list[Command] = []
        # The DMA channels results go out on, in turn: channel 1, or (the weight streamer's lead mode) both,
        # so that each store's set-up latency hides behind the previous one's data (docs/npu.md section 5).
        self.store_channels = (1,)
        self.stores = 0

    def store_channel(self) -> int:
        """The channel of the next DMA_STORE of a result."""
        self.stores += 1
        return self.store_channels[(self.stores - 1) % len(self.store_channels)]

    def _span(self, space: str, lo: int, hi: int) -> tuple[int, int]:
        """Indices [i, j) of the history entries overlapping [lo, hi) (entries are disjoint and sorted)."""
        hist, starts = self.history[space], self.starts[space]
        i = max(bisect_right(starts, lo) - 1, 0)
        if i < len(hist) and hist[i].hi <= lo:
            i += 1
        return i, max(bisect_left(starts, hi), i)

    def _deps(self, space: str, lo: int, hi: int, write: bool) -> list:
        if hi <= lo:
            raise NPUError("ERR_BAD_STREAM", f"empty {space} access [{lo}, {hi}): the planner must not emit one")
        i, j = self._span(space, lo, hi)
        deps = []
        for acc in self.history[space][i:j]:
            if acc.writer is not None:
                deps.append(acc.writer)  # RAW, or WAW for a write
            if write:
                deps.extend(acc.readers.items())  # WAR
        return deps

    def _record(self, space: str, lo: int, hi: int, who: tuple, write: bool):
        hist = self.history[space]
        i, j = self._span(space, lo, hi)
        pieces = []
        if write:
            # The new write supersedes older accesses of the same bytes: cut them out.
            if i < j and hist[i].lo < lo:
                pieces.append(_Access(hist[i].lo, lo, hist[i].writer, dict(hist[i].readers)))
            pieces.append(_Access(lo, hi, who))
            if i < j and hist[j - 1].hi > hi:
                last = hist[j - 1]
                pieces.append(_Access(hi, last.hi, last.writer, dict(last.readers)))
        else:
            # Bytes never written inside the stream (inputs staged by the runtime): remember the read.
            start = lo
            for acc in hist[i:j]:
                if acc.lo > start:
                    pieces.append(_Access(start, acc.lo, None, {who[0]: who[1]}))
                acc.readers[who[0]] = who[1]
                pieces.append(acc)
                start = max(start, acc.hi)
            if start < hi:
                pieces.append(_Access(start, hi, None, {who[0]: who[1]}))
        hist[i:j] = pieces
        self.starts[space][i:j] = [acc.lo for acc in pieces]

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
