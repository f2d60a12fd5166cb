"""The thermal policy a denoising loop obeys: the NPU's clock and the number of steps, per step.

Image generation is minutes of the NPU at full load on a passively or lightly cooled device: the die
heats, and a governor that only lowers the clock makes every remaining step slower. The application can
do better: take fewer sampling steps (a DDIM run of 15 steps instead of 20 is still an image). Here the
power/ package's models decide both, one step at a time:

- the die's temperature integrates each step's NPU power (power/model.py's energy at the step's
  operating point, leakage at the die's temperature) over the step's time, and the CPU's between the
  UNet calls (`cpu_w` for `cpu_s` per step), with power/thermal.py's exact RC step;
- the operating point is power/governor.py's "throttle" policy with its threshold at `hot_c`: one point
  slower per poll while the die is at or above it, one faster once it has cooled by the hysteresis;
- the steps: when a step starts with the die at or above `hot_c`, the remaining steps are cut by
  `cut_steps` (the run never shrinks below `min_steps` in all, nor grows); the cut is made once per hot
  spell, again only after the die has cooled below `hot_c` minus the hysteresis. The scheduler's
  `replan` spreads the remaining steps over the timesteps left.

The temperatures are the model's, not a sensor's: the loop runs on the reference NPU, whose cycle counts
give the step times at each clock (docs/sustained.md, the same models `tvm-npu sustain` uses).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from ..contract.config import NPUConfig
from ..contract.errors import NPUError
from ..power import DEFAULT_POWER, Governor, NpuWork, PowerModel, get_thermal, operating_points
from ..power.thermal import Thermal


@dataclass(frozen=True)
class StepPolicy:
    """Above `hot_c` degrees C: the governor lowers the clock and the remaining steps are cut by
    `cut_steps`, never below `min_steps` in all (the module doc)."""

    hot_c: float = 75.0
    cut_steps: int = 5
    min_steps: int = 10

    def __post_init__(self):
        ints = all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (self.cut_steps, self.min_steps)
        )
        if not ints or self.cut_steps < 0 or self.min_steps < 1 or not isinstance(self.hot_c, numbers.Real):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"StepPolicy(hot_c={self.hot_c!r}, cut_steps={self.cut_steps!r}, min_steps={self.min_steps!r}): "
                "give a temperature, cut_steps >= 0 and min_steps >= 1 as integers",
            )


class ThermalLoop:
    """The die, the governor and the step policy over one denoising loop; `begin` before each step,
    `end` after it; `log` has one entry per step."""

    def __init__(
        self,
        cfg: NPUConfig,
        work: NpuWork,
        policy: StepPolicy | None = None,
        thermal: Thermal | str | None = "laptop",
        cpu_s: float = 0.0,
        cpu_w: float = 0.0,
        start_c: float | None = None,
        power: PowerModel = DEFAULT_POWER,
    ):
        self.cfg, self.work, self.power = cfg, work, power
        self.policy = policy or StepPolicy()
        self.thermal = get_thermal(thermal).replace(threshold_c=self.policy.hot_c)
        self.ops = operating_points(cfg)
        self.governor = Governor("throttle", [work.time_s(op) for op in self.ops], self.thermal)
        self.cpu_s, self.cpu_w = cpu_s, cpu_w
        self.now = 0.0
        self.temp = self.thermal.ambient_c if start_c is None else float(start_c)
        self.armed = True  # a cut may be made: the die was below the threshold since the last one
        self.log: list[dict] = []
        self._index = 0

    def begin(self, i: int, plan, replan) -> tuple:
        """Before step `i` of `plan`: (the plan, cut when the policy says so with `replan(plan, i, n)`,
        the operating point it runs at)."""
        p, th = self.policy, self.thermal
        if self.temp <= th.threshold_c - th.hysteresis_k:
            self.armed = True
        cut = 0
        if self.temp >= p.hot_c and self.armed:
            remaining = len(plan) - i
            keep = max(remaining - p.cut_steps, p.min_steps - i, 1)
            if keep < remaining:
                plan, cut = replan(plan, i, keep), remaining - keep
                self.armed = False
        self._index, throttled = self.governor.choose(self.now, self.temp)
        op = self.ops[self._index]
        self.log.append({"step": i, "t": int(plan[i][0]), "temp_c": self.temp, "mhz": op.mhz, "volts": op.volts,
                         "throttled": throttled, "steps_total": len(plan), "cut": cut})  # fmt: skip
        return plan, op

    def end(self) -> None:
        """After a step: the die over the step's NPU time at its point, then the CPU's part."""
        op = self.ops[self._index]
        npu_s = self.work.time_s(op)
        watts = self.power.inference_j(self.cfg, self.work, op, self.temp) / npu_s if npu_s > 0 else 0.0
        self.temp = self.thermal.step(self.temp, watts, npu_s)
        if self.cpu_s > 0:
            idle = self.power.leakage_w(self.cfg, op.volts, self.temp) * self.power.idle_leak_fraction
            self.temp = self.thermal.step(self.temp, idle + self.cpu_w, self.cpu_s)
        self.now += npu_s + self.cpu_s
        self.log[-1].update(step_ms=1e3 * npu_s, end_temp_c=self.temp)
