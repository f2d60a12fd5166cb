"""The thermal model: one lumped RC between the die and the air, and the governors that read it.

The die and its cooler are one heat capacity C_th (J/K) behind one thermal resistance R_th (K/W) to an
ambient at T_a: C dT/dt = P - (T - T_a) / R, the electrical RC dual that compact thermal models build
on (K. Skadron et al., "Temperature-aware microarchitecture", ISCA 2003, whose HotSpot uses a network
of them; one node is its coarsest form). For a power P held over dt the solution is exact:

    T(t + dt) = T_a + P R + (T(t) - T_a - P R) exp(-dt / (R C))

so `step` takes any dt without the error (or the instability past dt = 2 R C) of an Euler step. The
power changes only between intervals (an inference starts or ends, the CPU stage starts or ends), and
the leakage's temperature dependence is sampled at least every `max_step_s`.

The presets are chosen, not measured: "phone" is a passively cooled handset whose NPU shares the
cooler with the CPU (R 20 K/W: 2 W lift the die 40 K; tau = R C = 30 s, the minute-scale warm-up a
sustained benchmark shows), "laptop" a fan-cooled one (4 K/W, tau 40 s), "large" a cooler that
nothing here heats (a test's reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..contract.errors import NPUError


@dataclass(frozen=True)
class Thermal:
    """Thermal resistance (K/W), capacitance (J/K), ambient (C), throttle threshold (C), hysteresis (K)."""

    r_k_per_w: float = 20.0
    c_j_per_k: float = 1.5
    ambient_c: float = 25.0
    threshold_c: float = 70.0
    hysteresis_k: float = 5.0
    max_step_s: float = 0.05

    def __post_init__(self):
        if self.r_k_per_w <= 0 or self.c_j_per_k <= 0 or self.max_step_s <= 0 or self.hysteresis_k < 0:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                "Thermal: R_th, C_th and max_step_s must be positive and the hysteresis not negative, got "
                f"R={self.r_k_per_w}, C={self.c_j_per_k}, max_step_s={self.max_step_s}, "
                f"hysteresis={self.hysteresis_k}",
            )

    @property
    def tau_s(self) -> float:
        return self.r_k_per_w * self.c_j_per_k

    def step(self, temp_c: float, power_w: float, dt_s: float) -> float:
        """The temperature after `dt_s` seconds at `power_w` watts, from `temp_c` (exact)."""
        target = self.ambient_c + power_w * self.r_k_per_w
        return target + (temp_c - target) * math.exp(-dt_s / self.tau_s)

    def replace(self, **changes) -> Thermal:
        import dataclasses

        return dataclasses.replace(self, **changes)


THERMALS = {
    "phone": Thermal(),
    "laptop": Thermal(r_k_per_w=4.0, c_j_per_k=10.0, ambient_c=25.0, threshold_c=90.0, hysteresis_k=5.0),
    "large": Thermal(r_k_per_w=0.01, c_j_per_k=100.0, ambient_c=25.0, threshold_c=90.0, hysteresis_k=5.0),
}


def get_thermal(thermal: Thermal | str | None) -> Thermal:
    """A preset by name ("phone", "laptop", "large"), a Thermal, or None (the phone)."""
    if thermal is None:
        return THERMALS["phone"]
    if isinstance(thermal, Thermal):
        return thermal
    if thermal in THERMALS:
        return THERMALS[thermal]
    raise NPUError("ERR_INVALID_CONFIG", f"unknown thermal preset {thermal!r}; use one of {sorted(THERMALS)}")
