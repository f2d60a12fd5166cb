"""Governors: which operating point the next inference runs at, chosen between inferences.

- "fixed": always one point (the fastest by default); nothing watches the temperature.
- "throttle": the fastest point until the die reaches the threshold, then one point slower per poll
  while it stays at or above it, and one faster per poll once it has cooled by the hysteresis: the
  step-wise policy of Linux's thermal framework (Documentation/driver-api/thermal/, "step_wise"),
  polled every `poll_s` (Linux polls thermal zones every 100-1000 ms).
- "target": the slowest point whose NPU stage still fits the frame period (the least energy that holds
  the frame rate; a devfreq-style choice), under the same thermal cap as "throttle".

A point slower than the policy wants, because of the thermal cap, counts as throttled.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.errors import NPUError
from .thermal import Thermal

POLICIES = ("fixed", "throttle", "target")


@dataclass
class Governor:
    """A policy's state; `choose` is called once per inference, before it starts."""

    policy: str
    stage_s: list  # the NPU stage's seconds at each operating point, fastest first
    thermal: Thermal
    period_s: float | None = None  # the frame period ("target")
    fixed_index: int = 0
    poll_s: float = 0.1
    cap: int = 0  # the thermal cap: no point faster than this index
    _next_poll: float = 0.0

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise NPUError("ERR_INVALID_CONFIG", f"unknown governor policy {self.policy!r}; use one of {POLICIES}")
        if not 0 <= self.fixed_index < len(self.stage_s):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"operating point {self.fixed_index} does not exist: this NPU has {len(self.stage_s)} "
                "(0 is the fastest)",
            )
        self.wanted = self._wanted()

    def _wanted(self) -> int:
        if self.policy == "fixed":
            return self.fixed_index
        if self.policy == "target" and self.period_s:
            fits = [i for i, s in enumerate(self.stage_s) if s <= self.period_s]
            return fits[-1] if fits else 0
        return 0

    def choose(self, now_s: float, temp_c: float) -> tuple[int, bool]:
        """(operating point index, throttled) for an inference starting at `now_s` on a die at `temp_c`."""
        if self.policy == "fixed":
            return self.wanted, False
        if now_s >= self._next_poll:
            self._next_poll = now_s + self.poll_s
            t = self.thermal
            if temp_c >= t.threshold_c:
                self.cap = min(self.cap + 1, len(self.stage_s) - 1)
            elif temp_c <= t.threshold_c - t.hysteresis_k:
                self.cap = max(self.cap - 1, 0)
        index = max(self.wanted, self.cap)
        return index, index > self.wanted
