"""SRAM utilization and fragmentation (backend/plan/sram_usage.py, fragmentation.py, tools/sram_profile.py):
the numbers against a brute-force byte map, against the decoded stream's own SRAM addresses and a hand
count, and the fragmentation warning on a model that fragments and not on one that does not."""

import logging
import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tvm_npu
from builders import chain, conv_layer, dense_layer, residual_block
from tvm_npu.backend.plan import fragmentation, sram_usage
from tvm_npu.backend.plan.sram import Resident
from tvm_npu.build import compile_npu_regions
from tvm_npu.contract import stream as stream_mod
from tvm_npu.contract.config import get_config
from tvm_npu.tools.disasm import read_library

SRAM = 4096


def _brute(allocs, first_commands, notes, durations, size):
    """The same numbers from a byte map per command (no interval arithmetic, no phase bisection)."""
    live, free, largest = [], [], []
    for c in range(len(notes)):
        phase = sum(1 for f in first_commands if f <= c) - 1
        phase = max(phase, 0)
        used = np.zeros(size, bool)
        for addr, n, lo, hi, *_ in allocs:
            if lo <= phase <= hi:
                used[max(0, addr) : min(size, addr + n)] = True
        runs, run = [0], 0
        for b in used:
            run = 0 if b else run + 1
            runs.append(run)
        live.append(int(used.sum()))
        free.append(size - live[-1])
        largest.append(max(runs))

    def summary(cs):
        if not cs:
            return None
        peak = cs[int(np.argmax([live[c] for c in cs]))]  # the first command at the highest use
        cyc = sum(durations[c] for c in cs)
        tw = sum(live[c] * durations[c] for c in cs) / (size * cyc) if cyc else 0.0
        return live[peak], tw, free[peak], largest[peak], peak

    return summary(list(range(len(notes)))), {
        n: summary([c for c in range(len(notes)) if notes[c] == n]) for n in set(notes) if n
    }


@settings(max_examples=60, deadline=None)
@given(
    allocs=st.lists(
        st.tuples(st.integers(0, SRAM // 128 - 1), st.integers(1, 12), st.integers(0, 4), st.integers(0, 4)),
        max_size=10,
    ),
    steps=st.lists(st.integers(0, 3), min_size=5, max_size=5),
    commands=st.lists(st.tuples(st.sampled_from(["", "a", "b", "c"]), st.integers(0, 50)), min_size=1, max_size=25),
)
def test_usage_matches_a_byte_map_sweep(allocs, steps, commands):
    allocs = [[128 * a, 128 * n, min(lo, hi), max(lo, hi), "buffers", "x"] for a, n, lo, hi in allocs]
    first = list(np.cumsum([0] + steps[:-1]))  # layer i's phase starts at command first[i]
    notes, durations = [n for n, _ in commands], [d for _, d in commands]
    got = sram_usage.usage(allocs, first, notes, durations, SRAM)
    whole, layers = _brute(allocs, first, notes, durations, SRAM)

    def key(u):
        return (
            u["peak_bytes"],
            pytest.approx(u["time_weighted_utilization"]),
            u["free_bytes_at_peak"],
            u["largest_free_block_at_peak"],
            u["peak_command"],
        )

    assert key(got) == whole
    assert got["peak_utilization"] == whole[0] / SRAM
    assert {n: key(u) for n, u in got["layers"].items()} == {n: v for n, v in layers.items() if v}


def _sram_span(cmd):
    a = cmd.args
    if cmd.op == "DMA_STORE":  # whole rows x stride, as the scoreboard and verify.py count a store
        return a["sram_addr"], a["sram_addr"] + a["rows"] * a["sram_stride"]
    return a["sram_addr"], a["sram_addr"] + (a["rows"] - 1) * a["sram_stride"] + a["row_bytes"]


@pytest.fixture(scope="module")
def block():
    mod, _ = residual_block(np.random.default_rng(0))  # c 16, 20x20, fp16
    report = tvm_npu.BuildReport()
    prof = tvm_npu.profile(mod, report=report)
    ex = tvm_npu.build(mod)
    ((sym, blob),) = read_library(ex).regions
    return prof, report.regions[sym], stream_mod.decode(blob)


def _streaming_head():
    """Strided convolutions to 1x1, then two weight-heavy dense layers on npu-small: tiles through DDR,
    weights streamed into slots reserved over earlier layers (weights.py)."""
    rng = np.random.default_rng(0)
    layers = [conv_layer(rng, 16, 64, 3, stride=2), conv_layer(rng, 64, 64, 3, stride=2)]
    layers += [conv_layer(rng, 64, 64, 3, stride=2), conv_layer(rng, 64, 256, 4, pad=0)]
    layers += [{"op": "cpu", "fn": "reshape", "shape": (1, 256)}]
    layers += [dense_layer(rng, 256, 1000, act="relu"), dense_layer(rng, 1000, 600)]
    return chain((1, 16, 32, 32), layers)


@pytest.mark.parametrize("which", ["residual_block", "streaming_head"])
def test_every_dma_of_the_stream_lies_in_the_allocations_live_in_its_phase(which, block):
    if which == "residual_block":
        _, info, decoded = block
        config, least = get_config(), 6
    else:
        mod, config, least = _streaming_head(), get_config("npu-small"), 50
        report = tvm_npu.BuildReport()
        ex = tvm_npu.build(mod, config=config, report=report)
        ((sym, blob),) = read_library(ex).regions
        info, decoded = report.regions[sym], stream_mod.decode(blob)
    assert len(info["command_layers"]) == len(decoded.commands)
    allocs, first = info["sram_allocations"], info["layer_first_command"]
    phase = sram_usage.phases(first, len(decoded.commands))
    dmas = 0
    for c, cmd in enumerate(decoded.commands):
        if cmd.op not in ("DMA_LOAD", "DMA_STORE"):
            continue
        lo, hi = _sram_span(cmd)
        live = np.zeros(config.sram_bytes, bool)
        for addr, n, a, b, *_ in allocs:
            if a <= phase[c] <= b:
                live[addr : addr + n] = True
        assert live[lo:hi].all(), (c, cmd, phase[c])
        dmas += 1
    assert dmas >= least


def test_peak_counted_by_hand(block):
    # conv1 -> a, depthwise -> d, 1x1 conv -> p, add(a, p): while the 1x1 conv runs a, d and p are all
    # resident, each 20 rows of align(20 px x 16 ch x 2 B, 128) = 640 B, beside the 1x1 conv's weight slot
    # (its DMA loads' bytes, aligned). Nothing else is live then, and no other layer holds more.
    prof, info, decoded = block
    conv1x1 = next(lay["name"] for lay in info["layers"] if lay["name"].endswith(".2"))
    loads = [
        c.args["rows"] * c.args["row_bytes"]
        for c, note in zip(decoded.commands, info["command_layers"])
        if c.op == "DMA_LOAD" and note == conv1x1
    ]
    want = 3 * 20 * 640 + -(-sum(loads) // 128) * 128
    sram = prof["sram"]
    assert sram["peak_bytes"] == want == 38912
    assert sram["peak_utilization"] == want / 2**21
    assert sram["free_bytes_at_peak"] == sram["largest_free_block_at_peak"] == 2**21 - want
    lay = next(lay for lay in prof["layers"] if lay["name"] == conv1x1)["sram"]
    assert lay["peak_bytes"] == want
    # Time-weighted over the run's measured command cycles, from the region's records.
    (region,) = prof["regions"].values()
    durations = [r["end"] - r["start"] for r in sorted(region["records"], key=lambda r: r["index"])]
    whole, _ = _brute(info["sram_allocations"], info["layer_first_command"], info["command_layers"], durations, 2**21)
    assert sram["time_weighted_utilization"] == pytest.approx(whole[1])
    assert 0 < sram["time_weighted_utilization"] < sram["peak_utilization"]


def _findings(c, hw, sram_kib):
    mod, _ = residual_block(np.random.default_rng(0), c=c, hw=hw)
    report = tvm_npu.BuildReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_npu_regions(mod, get_config().replace(sram_bytes=sram_kib * 1024), report)
    ((info,),) = [list(report.regions.values())]
    return info, [w for w in caught if issubclass(w.category, tvm_npu.SRAMFragmentationWarning)]


def test_fragmentation_warns_when_a_taller_tile_fits_the_free_bytes_but_no_block():
    info, caught = _findings(8, 32, 32)
    found = info["sram_fragmentation"]
    assert found and len(caught) == len(found)
    for f, w in zip(found, caught):
        assert f["kind"] == "tile" and f["message"] == str(w.message)
        assert f["layer"] in str(w.message) and "runs tiles of" in str(w.message)
        # What the warning claims, from the allocation list: at the layer's phase the residents leave
        # free_bytes free in total, split so that no block holds the taller tile's working SRAM.
        assert f["largest_free_block"] < f["bytes"] <= f["free_bytes"]
        assert f["better_rows"] > f["tile_rows"] and f["better_cycles"] < f["cycles"]
        i = [lay["name"] for lay in info["layers"]].index(f["layer"])
        used = np.zeros(32 * 1024, bool)
        for addr, n, lo, hi, kind, _ in info["sram_allocations"]:
            if kind == "resident" and lo <= i <= hi:
                used[addr : addr + n] = True
        assert (~used).sum() >= f["free_bytes"]  # the previous layer's buffers may be counted busy too
        assert re.search(rf"{f['free_bytes']} bytes are free while it runs", f["message"])


def test_no_fragmentation_warning_with_room_to_spare():
    info, caught = _findings(8, 32, 2048)
    assert info["sram_fragmentation"] == [] and caught == []


def test_spill_by_fragmentation_is_found_and_a_real_overflow_is_not():
    # Residents a [0, 1 KiB) and b [2 KiB, 3 KiB) both alive at layer 1; t (1.5 KiB, layer 1) was left in
    # DDR. With a 4 KiB budget 2 KiB are free at layer 1 but the largest block is 1 KiB: fragmentation.
    # With a 3 KiB budget only 1 KiB is free: t did not fit, whatever the placement.
    cfg = get_config()
    residents = {"a": Resident("a", 1024, 0, 2, 0), "b": Resident("b", 1024, 0, 1, 2048)}
    ranges = {"a": (0, 2), "b": (0, 1), "t": (1, 1)}
    sizes = {"a": 1024, "b": 1024, "t": 1536}
    names = ["L0", "L1", "L2"]
    (f,) = fragmentation.spills(cfg, ranges, sizes, 4096, residents, names)
    assert (f["kind"], f["tensor"], f["layer"], f["free_bytes"], f["largest_free_block"]) == (
        "spill",
        "t",
        "L1",
        2048,
        1024,
    )
    assert "t, the output of layer L1 (1536 bytes), goes to DDR" in f["message"]
    assert fragmentation.spills(cfg, ranges, sizes, 3072, residents, names) == []


def test_compile_log_shows_the_region_and_every_layer(caplog):
    mod, _ = residual_block(np.random.default_rng(0))
    report = tvm_npu.BuildReport()
    with caplog.at_level(logging.INFO, logger="tvm_npu.backend.codegen"):
        compile_npu_regions(mod, get_config(), report)
    lines = [r.getMessage() for r in caplog.records if "SRAM peak" in r.getMessage()]
    (info,) = report.regions.values()
    assert len(lines) == 1 + len(info["layers"])
    # The peak does not depend on the cycles: the hand count of test_peak_counted_by_hand.
    assert re.search(r"npu region \S+: SRAM peak 38912 of 2097152 B \(1\.9%\), time-weighted [\d.]+%; at the peak "
                     r"2058240 B free, largest free block 2058240 B", lines[0])  # fmt: skip
    assert [re.search(r"npu layer (\S+):", ln).group(1) for ln in lines[1:]] == [lay["name"] for lay in info["layers"]]
