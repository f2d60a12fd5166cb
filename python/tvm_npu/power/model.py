"""The power model: an inference's time and energy at a DVFS operating point, and the NPU's idle power.

Data, apart from the hardware contract (docs/npu.md section 9 describes it): the cycle model of
docs/npu.md section 5 gives cycles at `clock_mhz`; this module adds what a clock and a voltage cost.

Time. The cycle model counts DDR transfers in NPU cycles at `clock_mhz` (`ddr_bytes_per_cycle` is the
bus's bytes per NPU cycle there), but DDR runs on its own clock: slowing the NPU does not slow the
memory. So an inference's schedule (cost_model.estimate) is cut into the time when only a compute
engine is busy (`compute_cycles`), only a DMA is busy (`ddr_cycles`: its latency, its queue and its
transfer, all memory-side time), both (`overlap_cycles`) and neither (`idle_cycles`: issue gaps, NPU
time). At a clock f against the nominal f0:

    time = (compute + idle) / f + ddr / f0 + overlap / min(f, f0)

exact at f0 (it adds up to the cycle model's total); away from f0 it keeps the schedule's order (a
slower clock could let a later DMA start earlier than the schedule says), so it is a first-order
estimate, pessimistic for a memory-bound stream at a lower clock.

Energy per inference at voltage V (CMOS switching energy is C V^2; energy.py's constants are at
V0 = 0.9 V, Horowitz's process point):

- MAC and SRAM energy (energy.py) x (V / V0)^2; DDR energy does not scale (the memory's own rail).
- Clock tree: `clock_pj_per_cycle_mm2` x the die's area (energy.AreaModel) per NPU cycle x (V / V0)^2,
  while an inference runs (the clock is gated when idle). The clock network takes a third or more of
  a synchronous chip's dynamic power (E. G. Friedman, "Clock distribution networks in synchronous
  digital integrated circuits", Proc. IEEE 89(5), 2001); 15 pJ per cycle per mm^2 is about 30% of
  npu-ref's dynamic energy per cycle with the MAC array busy -- an assumption of that size, not a
  measurement.
- Leakage: `leak_mw_per_mm2` at V0 and 25 C, x (V / V0)^2 and x 2^((T - 25 C) / 25 K) while an
  inference runs; between inferences `idle_leak_fraction` (0.1) of it: the logic power-gated, the
  SRAM kept in retention so the weights stay resident (mobile NPUs power-collapse between frames).
  Subthreshold leakage grows exponentially with temperature and became a large share of power from
  65-45 nm on (N. S. Kim et al., "Leakage current: Moore's law meets static power", IEEE Computer
  36(12), 2003); the density, the V^2, the doubling every 25 K and the idle fraction are assumptions
  of that order, parameters to change.

Operating points: a voltage ladder per preset, and the frequency each voltage sustains from the
alpha-power law f ~ (V - Vt)^alpha / V (T. Sakurai, A. R. Newton, "Alpha-power law MOSFET model and its
applications to CMOS inverter delay", IEEE JSSC 25(2), 1990) with Vt = 0.35 V and alpha = 1.3, scaled
so the top point is the configuration's `clock_mhz`. Mobile SoCs publish 4-8 such points per clock
domain (their Linux device trees' OPP tables); four or five are enough here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backend.plan.energy import DEFAULT, DEFAULT_AREA, AreaModel, EnergyModel
from ..contract.config import NPUConfig
from ..contract.errors import NPUError

V0 = 0.9  # the voltage energy.py's constants are at (Horowitz, ISSCC 2014)
T0_C = 25.0  # the temperature the leakage density is at

# Voltage ladders, highest first (the top one runs at the configuration's clock_mhz). A configuration
# whose name is not here (a sweep point) uses "default".
VOLTAGES = {
    "npu-ref": (0.9, 0.8, 0.7, 0.6),
    "npu-small": (0.9, 0.8, 0.7, 0.6),
    "npu-laptop": (1.0, 0.9, 0.8, 0.7, 0.6),
    "default": (0.9, 0.8, 0.7, 0.6),
}


@dataclass(frozen=True)
class OperatingPoint:
    """A DVFS point: the NPU's clock in MHz and its supply in volts."""

    mhz: float
    volts: float

    def __str__(self) -> str:
        return f"{self.mhz:.0f} MHz @ {self.volts:.2f} V"


def alpha_power_mhz(f0_mhz: float, v0: float, v: float, vt: float = 0.35, alpha: float = 1.3) -> float:
    """The clock a supply `v` sustains, when `v0` sustains `f0_mhz` (the alpha-power law, module doc)."""
    if v <= vt:
        raise NPUError("ERR_INVALID_CONFIG", f"operating point {v} V is at or below the threshold {vt} V: no clock")
    g = lambda u: (u - vt) ** alpha / u  # noqa: E731
    return f0_mhz * g(v) / g(v0)


def operating_points(cfg: NPUConfig) -> list[OperatingPoint]:
    """The configuration's operating points, fastest first; the first is `cfg.clock_mhz`."""
    volts = VOLTAGES.get(cfg.name, VOLTAGES["default"])
    return [OperatingPoint(round(alpha_power_mhz(cfg.clock_mhz, volts[0], v), 0), v) for v in volts]


@dataclass(frozen=True)
class NpuWork:
    """One inference on the NPU at the nominal clock: the schedule's time split (module doc) and the
    energy estimate's counts, summed over the NPU regions (which run one after another)."""

    clock_mhz: float
    compute_cycles: int = 0
    ddr_cycles: int = 0
    overlap_cycles: int = 0
    idle_cycles: int = 0
    macs_int8: int = 0
    macs_fp16: int = 0
    ddr_bytes: int = 0
    sram_access_bytes: int = 0
    regions: int = 0

    @property
    def cycles(self) -> int:
        """The cycle model's total at the nominal clock."""
        return self.compute_cycles + self.ddr_cycles + self.overlap_cycles + self.idle_cycles

    def time_s(self, op: OperatingPoint) -> float:
        """Seconds of one inference at `op` (DDR time does not scale with the NPU's clock)."""
        f, f0 = op.mhz * 1e6, self.clock_mhz * 1e6
        return (self.compute_cycles + self.idle_cycles) / f + self.ddr_cycles / f0 + self.overlap_cycles / min(f, f0)

    def __add__(self, other: NpuWork) -> NpuWork:
        if other.clock_mhz != self.clock_mhz:
            raise NPUError("ERR_INVALID_CONFIG", "NPU work at two clocks cannot be added: compile every region alike")
        sums = {k: getattr(self, k) + getattr(other, k) for k in _COUNTS}
        return NpuWork(self.clock_mhz, **sums)


_COUNTS = (
    "compute_cycles",
    "ddr_cycles",
    "overlap_cycles",
    "idle_cycles",
    "macs_int8",
    "macs_fp16",
    "ddr_bytes",
    "sram_access_bytes",
    "regions",
)


def _merged(spans: list) -> list:
    out: list = []
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _length(spans: list) -> int:
    return sum(hi - lo for lo, hi in spans)


def _intersection(a: list, b: list) -> int:
    total, j = 0, 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k = j
        while k < len(b) and b[k][0] < hi:
            total += max(0, min(hi, b[k][1]) - max(lo, b[k][0]))
            k += 1
    return total


def work_of(cfg: NPUConfig, commands: list) -> NpuWork:
    """The time split and energy counts of one region's command list (cost_model.estimate's schedule)."""
    from ..backend.plan.cost_model import estimate
    from ..backend.plan.energy import command_counts

    est = estimate(cfg, commands)
    compute, ddr = [], []
    for cmd, (_, start, end) in zip(commands, est.schedule):
        if cmd.engine in ("mac", "vector"):
            compute.append((start, end))
        elif cmd.engine is not None:
            ddr.append((start, end))
    compute, ddr = _merged(compute), _merged(ddr)
    both = _intersection(compute, ddr)
    counts = command_counts(cfg, commands)
    return NpuWork(
        clock_mhz=cfg.clock_mhz,
        compute_cycles=_length(compute) - both,
        ddr_cycles=_length(ddr) - both,
        overlap_cycles=both,
        idle_cycles=est.total_cycles - (_length(compute) + _length(ddr) - both),
        macs_int8=counts["macs_int8"],
        macs_fp16=counts["macs_fp16"],
        ddr_bytes=est.ddr_read_bytes + est.ddr_write_bytes,
        sram_access_bytes=counts["sram_access_bytes"],
        regions=1,
    )


@dataclass(frozen=True)
class PowerModel:
    """Clock-tree and leakage constants, on top of energy.py's dynamic energy (module doc)."""

    energy: EnergyModel = field(default_factory=lambda: DEFAULT)
    area: AreaModel = field(default_factory=lambda: DEFAULT_AREA)
    clock_pj_per_cycle_mm2: float = 15.0
    leak_mw_per_mm2: float = 10.0
    leak_doubling_k: float = 25.0
    idle_leak_fraction: float = 0.1

    def area_mm2(self, cfg: NPUConfig) -> float:
        return self.area.area_mm2(cfg.int8_macs_per_cycle, cfg.sram_bytes)

    def leakage_w(self, cfg: NPUConfig, volts: float, temp_c: float) -> float:
        """Watts the NPU leaks at `volts` and `temp_c`, running or not."""
        scale = (volts / V0) ** 2 * 2.0 ** ((temp_c - T0_C) / self.leak_doubling_k)
        return self.leak_mw_per_mm2 * 1e-3 * self.area_mm2(cfg) * scale

    def dynamic_j(self, cfg: NPUConfig, work: NpuWork, op: OperatingPoint) -> dict:
        """Joules of one inference at `op` without leakage: "core" (MACs + SRAM, x V^2), "ddr" (fixed),
        "clock" (the clock tree over the inference's NPU cycles, x V^2)."""
        parts = self.energy.energy_uj(cfg, work.macs_int8, work.macs_fp16, work.ddr_bytes, work.sram_access_bytes)
        v2 = (op.volts / V0) ** 2
        npu_cycles = work.time_s(op) * op.mhz * 1e6
        return {
            "core": (parts["energy_mac_uj"] + parts["energy_sram_uj"]) * 1e-6 * v2,
            "ddr": parts["energy_ddr_uj"] * 1e-6,
            "clock": self.clock_pj_per_cycle_mm2 * self.area_mm2(cfg) * npu_cycles * 1e-12 * v2,
        }

    def inference_j(self, cfg: NPUConfig, work: NpuWork, op: OperatingPoint, temp_c: float = T0_C) -> float:
        """Joules of one inference at `op` and die temperature `temp_c`, leakage over its time included."""
        return sum(self.dynamic_j(cfg, work, op).values()) + self.leakage_w(cfg, op.volts, temp_c) * work.time_s(op)


DEFAULT_POWER = PowerModel()
