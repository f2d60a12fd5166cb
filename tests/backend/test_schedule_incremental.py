"""The incremental scoreboard (bisected, per-engine latest reads) against two brute-force references.

1. Exactness: the quadratic scoreboard it replaced, copied here (whole-history scans, every reader kept).
   The streams must stay bit-identical, including its coarseness: a read marks the whole recorded range
   it touches, so a later write of another part of that range also waits for it (a false WAR, harmless).
2. Soundness: a byte-by-byte replay of the full access log. A byte's RAW/WAW dependency is its last
   writer, its WAR dependencies every read since; the scoreboard's wait on each such engine must be at
   least as strict as count[e] - position - 1 (docs/npu.md section 5).
Random access lists over a small address space make ranges overlap, split and nest.
"""

from __future__ import annotations

import pytest

from tvm_npu.backend.plan.schedule import MAX_OUTSTANDING, Scoreboard
from tvm_npu.contract.errors import NPUError
from tvm_npu.contract.stream import ENGINES, NO_WAIT, Command

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

SPACES = ("sram", "ddr")
# A synthetic command of each engine (the scoreboard looks only at the engine and the footprints).
ON = {"dma0": ("DMA_LOAD", {"channel": 0}), "dma1": ("DMA_LOAD", {"channel": 1}), "mac": ("CONV2D", {}),
      "vector": ("ADD", {})}  # fmt: skip


class _Quadratic:
    """The scoreboard before it was made incremental: a list of (lo, hi, writer, [readers]) per space."""

    def __init__(self):
        self.hist = {s: [] for s in SPACES}

    def deps(self, space, lo, hi, write):
        out = []
        for a_lo, a_hi, writer, readers in self.hist[space]:
            if a_hi > lo and a_lo < hi:
                out += ([writer] if writer is not None else []) + (readers if write else [])
        return out

    def record(self, space, lo, hi, who, write):
        hist = self.hist[space]
        if write:
            kept = []
            for a_lo, a_hi, writer, readers in hist:
                if a_hi <= lo or a_lo >= hi:
                    kept.append((a_lo, a_hi, writer, readers))
                    continue
                if a_lo < lo:
                    kept.append((a_lo, lo, writer, list(readers)))
                if a_hi > hi:
                    kept.append((hi, a_hi, writer, list(readers)))
            self.hist[space] = [*kept, (lo, hi, who, [])]
            return
        covered = []
        for a_lo, a_hi, _, readers in hist:
            if a_hi > lo and a_lo < hi:
                readers.append(who)
                covered.append((max(a_lo, lo), min(a_hi, hi)))
        start = lo
        for a, b in sorted(covered):
            if a > start:
                hist.append((start, a, None, [who]))
            start = max(start, b)
        if start < hi:
            hist.append((start, hi, None, [who]))

    def waits(self, count, engine, reads, writes):
        deps = [d for r in reads for d in self.deps(*r, False)] + [d for w in writes for d in self.deps(*w, True)]
        waits: dict = {}
        for e, pos in deps:
            if e != engine:
                waits[e] = min(waits.get(e, NO_WAIT), min(count[e] - pos - 1, MAX_OUTSTANDING))
        for r in reads:
            self.record(*r, (engine, count[engine]), False)
        for w in writes:
            self.record(*w, (engine, count[engine]), True)
        return waits


def _byte_waits(log: list, count: dict, engine, reads, writes) -> dict:
    """Waits of a command from the full access log [(space, lo, hi, engine, pos, is_write)], byte by byte."""
    latest: dict = {}
    for space, lo, hi, write in [(*r, False) for r in reads] + [(*w, True) for w in writes]:
        for byte in range(lo, hi):
            touching = [a for a in log if a[0] == space and a[1] <= byte < a[2]]
            last_write = max((i for i, a in enumerate(touching) if a[5]), default=-1)
            deps = [touching[last_write]] if last_write >= 0 else []
            if write:
                deps += [a for a in touching[last_write + 1 :] if not a[5]]
            for a in deps:
                latest[a[3]] = max(latest.get(a[3], -1), a[4])
    return {e: min(count[e] - p - 1, MAX_OUTSTANDING) for e, p in latest.items() if e != engine}


_range = st.tuples(st.sampled_from(SPACES), st.integers(0, 40), st.integers(1, 12)).map(
    lambda t: (t[0], t[1], t[1] + t[2])
)
_command = st.tuples(st.sampled_from(ENGINES), st.lists(_range, max_size=3), st.lists(_range, max_size=2))


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(st.lists(_command, min_size=1, max_size=40))
def test_waits_match_brute_force(commands):
    sb, old = Scoreboard(), _Quadratic()
    log: list = []
    count = dict.fromkeys(ENGINES, 0)
    for engine, reads, writes in commands:
        needed = _byte_waits(log, count, engine, reads, writes)
        got = sb.emit(Command(*ON[engine], {}), reads=reads, writes=writes)
        assert got.engine == engine
        assert got.waits == old.waits(count, engine, reads, writes)
        assert all(got.waits.get(e, NO_WAIT) <= k for e, k in needed.items())
        pos = count[engine]
        log += [(*r, engine, pos, False) for r in reads] + [(*w, engine, pos, True) for w in writes]
        count[engine] += 1


def test_empty_range_is_refused():
    with pytest.raises(NPUError) as e:
        Scoreboard().emit(Command("ADD", {}, {}), reads=[("sram", 64, 64)])
    assert e.value.code == "ERR_BAD_STREAM"
