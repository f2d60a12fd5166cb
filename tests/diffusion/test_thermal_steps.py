"""The denoising loop's thermal policy (diffusion/thermal_steps.py) against the RC model's closed form
and the policy's rules: a cool die runs every step at the fastest point; a hot one is throttled and its
run cut by cut_steps once per hot spell, never below min_steps, never for a run already that short."""

import math

import numpy as np
import pytest

from tvm_npu.contract.config import get_config
from tvm_npu.contract.errors import NPUError
from tvm_npu.diffusion.scheduler import DDIM
from tvm_npu.diffusion.thermal_steps import StepPolicy, ThermalLoop
from tvm_npu.power import NpuWork, PowerModel
from tvm_npu.power.thermal import Thermal

CFG = get_config("npu-laptop")
# One UNet step: 40 ms of MAC-bound work at the nominal clock (an SD-sized step on this preset is ~this).
WORK = NpuWork(CFG.clock_mhz, compute_cycles=int(0.04 * CFG.clock_mhz * 1e6), macs_fp16=10**11, regions=4)


def _run(loop: ThermalLoop, steps: int):
    ddim = DDIM()
    plan, i = ddim.plan(steps), 0
    while i < len(plan):
        plan, _ = loop.begin(i, plan, ddim.replan)
        loop.end()
        i += 1
    return plan


def test_a_cool_run_is_the_rc_models_constant_power_warm_up():
    """No leakage (so the power is constant): after n steps at the fastest point the die is at
    T_a + P R (1 - exp(-n dt / RC)), P the step's energy over its time."""
    power = PowerModel(leak_mw_per_mm2=0.0)
    thermal = Thermal(r_k_per_w=4.0, c_j_per_k=10.0, ambient_c=25.0, threshold_c=90.0)
    loop = ThermalLoop(CFG, WORK, thermal=thermal, power=power)
    plan = _run(loop, 20)
    assert len(plan) == 20 and all(e["mhz"] == 1800 and not e["throttled"] and not e["cut"] for e in loop.log)
    dt = WORK.time_s(loop.ops[0])
    watts = power.inference_j(CFG, WORK, loop.ops[0]) / dt
    want = 25.0 + watts * 4.0 * (1 - math.exp(-20 * dt / 40.0))
    assert loop.temp == pytest.approx(want, rel=1e-9) and loop.temp > 25.5


def test_a_hot_die_is_throttled_and_the_run_cut_once_per_hot_spell():
    loop = ThermalLoop(CFG, WORK, start_c=80.0)
    plan = _run(loop, 20)
    assert len(plan) == 15 and loop.log[0]["cut"] == 5 and sum(e["cut"] for e in loop.log) == 5
    assert loop.log[0]["steps_total"] == 15 and loop.log[0]["throttled"] and loop.log[0]["mhz"] < 1800
    np.testing.assert_array_equal(plan, DDIM().plan(15))  # cut before any step: the 15-step run
    ts = [e["t"] for e in loop.log]
    assert ts == sorted(ts, reverse=True) and len(set(ts)) == 15


@pytest.mark.parametrize("steps, total", [(12, 10), (10, 10), (6, 6)])
def test_the_cut_never_goes_below_min_steps_nor_grows_a_short_run(steps, total):
    loop = ThermalLoop(CFG, WORK, start_c=80.0)
    assert len(_run(loop, steps)) == total == len(loop.log)


def test_a_die_that_heats_part_way_is_cut_where_it_crosses():
    """A small cooler (C 0.05 J/K): the die crosses 75 C within the run; the cut comes at the first step
    that starts at or above it, and the steps after continue from where the run was."""
    hot = Thermal(r_k_per_w=40.0, c_j_per_k=0.05, ambient_c=25.0)
    loop = ThermalLoop(CFG, WORK, thermal=hot)
    plan = _run(loop, 30)
    first = next(e for e in loop.log if e["temp_c"] >= 75.0)
    assert first["step"] > 0 and first["cut"] == 5 and len(plan) == 25
    assert all(e["temp_c"] < 75.0 for e in loop.log[: first["step"]])
    k = first["step"]
    np.testing.assert_array_equal(plan[:k], DDIM().plan(30)[:k])
    assert plan[k, 0] == plan[k - 1, 1]


def test_bad_policies_are_coded():
    for bad in ({"cut_steps": -1}, {"min_steps": 0}, {"min_steps": 2.5}, {"hot_c": "hot"}, {"cut_steps": True}):
        with pytest.raises(NPUError, match="ERR_INVALID_CONFIG"):
            StepPolicy(**bad)
