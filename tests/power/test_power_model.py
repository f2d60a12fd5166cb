"""The power model (python/tvm_npu/power/model.py) against independent references: the schedule's time
split against a cycle-by-cycle boolean timeline, time at the nominal clock against the cycle model's
total, time and energy scaling against hand-written formulas, and energy falling at lower operating
points (hypothesis over the work's counts and the die's temperature)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tvm_npu
from builders import chain, conv_layer, dense_layer
from tvm_npu.backend.plan.cost_model import estimate
from tvm_npu.contract import stream
from tvm_npu.contract.config import NPU_REF, NPU_SMALL, PRESETS
from tvm_npu.power import DEFAULT_POWER, NpuWork, OperatingPoint, operating_points, work_of


@pytest.fixture(scope="module")
def streams():
    rng = np.random.default_rng(3)
    mod = chain(
        (1, 16, 24, 24), [conv_layer(rng, 16, 32, 3), conv_layer(rng, 32, 32, 3, stride=2), conv_layer(rng, 32, 64, 1)]
    )
    dense = chain((1, 256), [dense_layer(rng, 256, 512, act="relu"), dense_layer(rng, 512, 128)])
    out = []
    for m in (mod, dense):
        ex = tvm_npu.build(m, config=NPU_SMALL)
        out += [stream.decode(bytes(x["get_stream"]())) for x in tvm_npu.runtime.npu_modules(ex)]
    return out


def _timeline(cfg, commands):
    """Per cycle: a compute engine busy, a DMA busy (a boolean array each) -- the brute-force reference."""
    est = estimate(cfg, commands)
    compute = np.zeros(est.total_cycles, bool)
    ddr = np.zeros(est.total_cycles, bool)
    for cmd, (_, start, end) in zip(commands, est.schedule):
        if cmd.engine in ("mac", "vector"):
            compute[start:end] = True
        elif cmd.engine is not None:
            ddr[start:end] = True
    return est, compute, ddr


def test_time_split_matches_a_cycle_by_cycle_timeline(streams):
    for s in streams:
        cfg = PRESETS["npu-small"]
        w = work_of(cfg, s.commands)
        est, compute, ddr = _timeline(cfg, s.commands)
        assert w.compute_cycles == int(np.sum(compute & ~ddr))
        assert w.ddr_cycles == int(np.sum(ddr & ~compute))
        assert w.overlap_cycles == int(np.sum(compute & ddr))
        assert w.idle_cycles == int(np.sum(~compute & ~ddr))
        assert w.cycles == est.total_cycles > 0
        assert w.ddr_bytes == est.ddr_read_bytes + est.ddr_write_bytes
        assert w.compute_cycles + w.overlap_cycles > 0 and w.ddr_cycles + w.overlap_cycles > 0


def test_time_at_the_nominal_clock_is_the_cycle_models(streams):
    for s in streams:
        w = work_of(NPU_SMALL, s.commands)
        top = operating_points(NPU_SMALL)[0]
        assert top.mhz == NPU_SMALL.clock_mhz
        assert w.time_s(top) == pytest.approx(estimate(NPU_SMALL, s.commands).total_cycles / 500e6, rel=1e-12)


def test_ddr_time_does_not_scale_with_the_npu_clock():
    ddr_only = NpuWork(1000, ddr_cycles=10_000)
    compute_only = NpuWork(1000, compute_cycles=10_000)
    both = NpuWork(1000, overlap_cycles=10_000)
    for mhz in (1000, 800, 500, 250):
        op = OperatingPoint(mhz, 0.9)
        assert ddr_only.time_s(op) == pytest.approx(10e-6)
        assert compute_only.time_s(op) == pytest.approx(10_000 / (mhz * 1e6))
        assert both.time_s(op) == pytest.approx(10_000 / (mhz * 1e6))  # below f0 compute is the longer
    assert both.time_s(OperatingPoint(2000, 1.0)) == pytest.approx(10e-6)  # above f0 DDR is


def test_operating_points_follow_the_alpha_power_law():
    for cfg in PRESETS.values():
        ops = operating_points(cfg)
        assert 4 <= len(ops) <= 8 and ops[0].mhz == cfg.clock_mhz
        g = [(op.volts - 0.35) ** 1.3 / op.volts for op in ops]
        for op, gi in zip(ops, g):
            assert op.mhz == pytest.approx(cfg.clock_mhz * gi / g[0], abs=0.5)
        assert all(a.mhz > b.mhz and a.volts > b.volts for a, b in zip(ops, ops[1:]))


def test_energy_parts_scale_with_v_squared_except_ddr():
    w = NpuWork(1000, compute_cycles=1_000_000, macs_int8=10**9, ddr_bytes=10**6, sram_access_bytes=10**7)
    hi, lo = OperatingPoint(1000, 0.9), OperatingPoint(500, 0.6)
    a, b = DEFAULT_POWER.dynamic_j(NPU_REF, w, hi), DEFAULT_POWER.dynamic_j(NPU_REF, w, lo)
    # Horowitz's constants at 0.9 V: 0.3 pJ per int8 MAC, 160 pJ per DDR byte (energy.py).
    sram = 10**7 * 1.25 * math.sqrt(2 * 1024 * 1024 / 16 / 8192) * 1e-12
    assert a["core"] == pytest.approx(10**9 * 0.3e-12 + sram)
    assert b["core"] == pytest.approx(a["core"] * (0.6 / 0.9) ** 2)
    assert a["ddr"] == b["ddr"] == pytest.approx(10**6 * 160e-12)
    area = (1024 * 419 + 2 * 1024 * 1024 * 8 * 0.5) * 1e-6
    assert a["clock"] == pytest.approx(15e-12 * area * 1_000_000)  # one clock per cycle
    assert b["clock"] == pytest.approx(a["clock"] * (0.6 / 0.9) ** 2)  # as many cycles, at 0.6 V
    leak = DEFAULT_POWER.leakage_w(NPU_REF, 0.9, 50.0)
    assert leak == pytest.approx(10e-3 * area * 2.0)  # 25 K above 25 C: doubled


counts = st.integers(0, 10**9)


@settings(max_examples=200, deadline=None)
@given(
    compute=counts,
    ddr=counts,
    overlap=counts,
    macs=counts,
    fp16=counts,
    ddr_bytes=counts,
    sram=counts,
    temp=st.floats(0, 110),
    preset=st.sampled_from(sorted(PRESETS)),
)
def test_energy_per_inference_falls_at_a_lower_operating_point(
    compute, ddr, overlap, macs, fp16, ddr_bytes, sram, temp, preset
):
    cfg = PRESETS[preset]
    w = NpuWork(cfg.clock_mhz, compute, ddr, overlap, 0, macs, fp16, ddr_bytes, sram)
    ops = operating_points(cfg)
    energy = [DEFAULT_POWER.inference_j(cfg, w, op, temp) for op in ops]
    times = [w.time_s(op) for op in ops]
    for (e0, e1), (t0, t1) in zip(zip(energy, energy[1:]), zip(times, times[1:])):
        assert e1 <= e0 * (1 + 1e-12)
        assert t1 >= t0 * (1 - 1e-12)
        if compute + overlap + macs + fp16 + sram:  # something that scales with V: strictly less
            assert e1 < e0


def test_docs_table_of_operating_points_is_the_models():
    """docs/npu.md section 9 lists npu-ref's points; they are what operating_points gives."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "npu.md").read_text()
    section = text[text.index("## 9. Power and temperature") :]
    lines = {ln.split("|")[1].strip(): ln.split("|")[2:-1] for ln in section.splitlines() if ln.startswith("| ")}
    mhz = [float(c) for c in lines["clock (MHz)"]]
    volts = [float(c) for c in lines["supply (V)"]]
    assert [(op.mhz, op.volts) for op in operating_points(NPU_REF)] == list(zip(mhz, volts))
