"""A sustained run: a stream of frames through a two-stage CPU -> NPU pipeline, heating one cooler.

Each frame has a CPU part (pre- and post-processing, the ops that stayed on the CPU: `cpu_s` seconds,
measured or given) and an NPU part (the regions' cycle-model time at the governor's operating point,
power/model.py). Pipelined, the CPU prepares frame i+1 while the NPU computes frame i, with one buffer
between them (the CPU starts a frame once the NPU has taken the previous one); back to back, the CPU
waits for the NPU to finish. Frames come from a source at `fps` (a camera, a microphone: a frame the
CPU was too busy to take is dropped, and the CPU takes the newest one when it is free) or, with
`fps=None`, as fast as the pipeline takes them.

The die's temperature (power/thermal.py) integrates the NPU's power (each inference's energy over its
time, plus leakage at the running voltage and the die's temperature, idle too) and the CPU's while its
part runs (`cpu_w`: the cooler is shared). The governor (power/governor.py) reads the temperature when
an inference starts and picks its operating point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..contract.config import NPUConfig
from ..contract.errors import NPUError
from .governor import Governor
from .model import DEFAULT_POWER, NpuWork, OperatingPoint, PowerModel, operating_points
from .thermal import Thermal, get_thermal


@dataclass
class SustainResult:
    """`summary` (the numbers, JSON-serializable) and `timeline` (per inference: start s, temperature C,
    clock MHz; `fps`: completions per second of run, one value per whole second)."""

    summary: dict
    timeline: dict = field(default_factory=dict)

    def text(self) -> str:
        s = self.summary
        lines = [
            f"{s['policy']} policy, {s['thermal']} cooler, {s['seconds']:.0f} s, "
            f"{'pipelined' if s['pipelined'] else 'back to back'}; NPU {s['npu_ms_fastest']:.3f} ms at "
            f"{s['operating_points'][0]}, CPU {s['cpu_ms']:.3f} ms per frame",
            f"  fps: burst {s['burst_fps']:.1f}, achieved {s['fps']:.1f}, sustained (last third) "
            f"{s['sustained_fps']:.1f}" + (f", target {s['target_fps']:.1f}" if s["target_fps"] else ""),
            f"  latency ms: p50 {s['latency_ms_p50']:.3f}, p90 {s['latency_ms_p90']:.3f}, "
            f"p99 {s['latency_ms_p99']:.3f}",
            f"  NPU energy per inference {s['energy_per_inference_mj']:.3f} mJ, NPU power {s['npu_power_w']:.3f} W, "
            f"with CPU {s['total_power_w']:.3f} W",
            f"  peak temperature {s['peak_temp_c']:.1f} C (threshold {s['threshold_c']:.0f} C), throttled "
            f"{s['throttled_s']:.1f} s, above threshold {s['above_threshold_s']:.1f} s",
        ]
        return "\n".join(lines)


class _Heat:
    """The die's temperature, integrated piece by piece as the run's power pieces become known."""

    def __init__(self, thermal: Thermal, leak):
        self.thermal, self.leak = thermal, leak  # leak(volts, temp_c) -> watts
        self.now, self.temp, self.peak = 0.0, thermal.ambient_c, thermal.ambient_c
        self.pieces: list = []  # (start, end, watts, "npu" | "cpu")
        self.energy = {"npu": 0.0, "cpu": 0.0, "other": 0.0}
        self.idle = 1.0  # the share of leakage left between inferences (PowerModel.idle_leak_fraction)
        self.above_s = 0.0

    def add(self, start: float, end: float, watts: float, kind: str) -> None:
        self.pieces.append((start, end, watts, kind))

    def advance(self, until: float, volts: float) -> float:
        """Integrate to `until` (no piece not yet added may start before it); the temperature then."""
        th = self.thermal
        while self.now < until:
            edges = [p[0] for p in self.pieces if p[0] > self.now] + [p[1] for p in self.pieces if p[1] > self.now]
            nxt = min([until, self.now + th.max_step_s, *edges])
            dt, mid = nxt - self.now, (self.now + nxt) / 2
            watts = {"npu": 0.0, "cpu": 0.0, "other": 0.0}
            for a, b, w, kind in self.pieces:
                if a <= mid < b:
                    watts[kind] += w
            running = any(a <= mid < b for a, b, _, kind in self.pieces if kind == "npu")
            watts["npu"] += self.leak(volts, self.temp) * (1.0 if running else self.idle)
            power = sum(watts.values())
            new = th.step(self.temp, power, dt)
            self.above_s += _time_above(th, self.temp, power, dt)
            for kind in watts:
                self.energy[kind] += watts[kind] * dt
            self.temp, self.now = new, nxt
            self.peak = max(self.peak, new)  # monotone within a piece: its ends bound it
        self.pieces = [p for p in self.pieces if p[1] > self.now]
        return self.temp


def _time_above(th: Thermal, temp: float, power: float, dt: float) -> float:
    """Seconds of a piece the die spends at or above the threshold (the exact step is monotone)."""
    target = th.ambient_c + power * th.r_k_per_w
    end = th.step(temp, power, dt)
    hot0, hot1 = temp >= th.threshold_c, end >= th.threshold_c
    if hot0 == hot1:
        return dt if hot0 else 0.0
    cross = -th.tau_s * math.log((th.threshold_c - target) / (temp - target))
    return dt - cross if hot1 else cross


def simulate(
    cfg: NPUConfig,
    work: NpuWork,
    cpu_s: float,
    fps: float | None = 30.0,
    seconds: float = 120.0,
    policy: str = "throttle",
    thermal: Thermal | str | None = None,
    power: PowerModel = DEFAULT_POWER,
    cpu_w: float = 1.0,
    pipelined: bool = True,
    fixed_index: int = 0,
    ops: list[OperatingPoint] | None = None,
    other_w: float = 0.0,
) -> SustainResult:
    """Run frames for `seconds` and report fps, latency, energy, temperature (see the module doc).

    Parameters
    ----------
    cfg : NPUConfig
        The NPU (its area sets leakage and clock-tree power; its name the operating points).
    work : NpuWork
        One inference's NPU work (power.model.work_of per region, summed).
    cpu_s : float
        The CPU part of each frame in seconds.
    fps : float or None
        The source's frame rate; None runs frames back to back as fast as the pipeline takes them.
    seconds : float
        Length of the run.
    policy : str
        "fixed", "throttle" or "target" (power/governor.py).
    thermal : Thermal or str, optional
        The cooler ("phone", "laptop", "large" or a Thermal; default "phone").
    power : PowerModel
        Clock-tree and leakage constants.
    cpu_w : float
        The CPU's power while it runs its part (it shares the cooler).
    pipelined : bool
        Overlap the CPU part of frame i+1 with the NPU part of frame i (else back to back).
    fixed_index : int
        The "fixed" policy's operating point (0 = fastest).
    other_w : float
        The rest of the platform's power on the same cooler (display, camera, modem), constant.
    ops : list of OperatingPoint, optional
        Operating points, fastest first (default `operating_points(cfg)`).

    Returns
    -------
    SustainResult
    """
    if seconds <= 0 or (fps is not None and fps < 0) or cpu_s < 0:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"a sustained run needs seconds > 0, fps >= 0 (0 or None: as fast as it runs) and a CPU part "
            f">= 0; got seconds={seconds}, fps={fps}, cpu_s={cpu_s}",
        )
    th = get_thermal(thermal)
    ops = ops or operating_points(cfg)
    stage = [work.time_s(op) for op in ops]
    dyn = [power.dynamic_j(cfg, work, op) for op in ops]
    dyn_w = [sum(d.values()) / s if s > 0 else 0.0 for d, s in zip(dyn, stage)]
    period = 1.0 / fps if fps else 0.0
    gov = Governor(policy, stage, th, period_s=period or None, fixed_index=fixed_index)
    heat = _Heat(th, lambda v, t: power.leakage_w(cfg, v, t))
    heat.idle = power.idle_leak_fraction
    heat.add(0.0, math.inf, other_w, "other")
    cpu_free = npu_free = last_npu_start = 0.0
    next_k, volts = 0, ops[gov.wanted].volts
    frames = _Frames()
    while True:
        ready = max(cpu_free, last_npu_start if pipelined else npu_free)
        if period:
            k = max(next_k, int(ready / period + 1e-9))
            arrival, next_k = k * period, k + 1
            begin = max(ready, arrival)
        else:
            arrival = begin = ready
        if begin >= seconds:
            break
        cpu_free = begin + cpu_s
        heat.add(begin, cpu_free, cpu_w, "cpu")
        start = max(cpu_free, npu_free)
        temp = heat.advance(start, volts)
        index, hot = gov.choose(start, temp)
        volts = ops[index].volts
        npu_free = start + stage[index]
        heat.add(start, npu_free, dyn_w[index], "npu")
        last_npu_start = start
        frames.add(start, temp, ops[index].mhz, npu_free, npu_free - arrival, hot)
    run_s = max(seconds, npu_free, cpu_free)
    heat.advance(run_s, volts)
    burst = 1.0 / (max(cpu_s, stage[0]) if pipelined else cpu_s + stage[0])
    setup = {
        "config": cfg.name,
        "policy": policy,
        "thermal": next((k for k, t in _thermal_names().items() if t == th), "custom"),
        "pipelined": pipelined,
        "seconds": seconds,
        "target_fps": fps or 0.0,
        "operating_points": [str(op) for op in ops],
        "npu_ms": [s * 1e3 for s in stage],
        "npu_ms_fastest": stage[0] * 1e3,
        "cpu_ms": cpu_s * 1e3,
        "burst_fps": min(burst, fps) if fps else burst,
        "threshold_c": th.threshold_c,
        "ambient_c": th.ambient_c,
        "npu_cycles": work.cycles,
        "cpu_w": cpu_w,
        "other_w": other_w,
    }
    return SustainResult({**setup, **_measures(frames, heat, seconds, run_s)}, _timeline(frames, seconds))


@dataclass
class _Frames:
    """Per inference: its NPU start (s), the die's temperature then (C), the clock (MHz), its end (s), its
    latency from the frame's arrival (s), whether the thermal cap slowed it."""

    starts: list = field(default_factory=list)
    temps: list = field(default_factory=list)
    mhz: list = field(default_factory=list)
    ends: list = field(default_factory=list)
    latency: list = field(default_factory=list)
    throttled: list = field(default_factory=list)

    def add(self, start: float, temp: float, mhz: float, end: float, latency: float, throttled: bool) -> None:
        self.starts.append(start)
        self.temps.append(temp)
        self.mhz.append(mhz)
        self.ends.append(end)
        self.latency.append(latency)
        self.throttled.append(throttled)


def _measures(f: _Frames, heat: _Heat, seconds: float, run_s: float) -> dict:
    """What the run achieved: frames, rates, latency percentiles, energy, power, temperature, throttling."""
    done = np.asarray([e for e in f.ends if e <= seconds])
    lat = np.asarray(f.latency) * 1e3 if f.latency else np.zeros(1)
    gaps = np.diff([*f.starts, max(seconds, f.ends[-1] if f.ends else 0.0)])  # each inference's share of time
    return {
        "frames": len(f.ends),
        "fps": len(done) / seconds,
        "sustained_fps": float(np.sum(done > seconds * 2 / 3)) / (seconds / 3),
        "latency_ms_p50": float(np.percentile(lat, 50)),
        "latency_ms_p90": float(np.percentile(lat, 90)),
        "latency_ms_p99": float(np.percentile(lat, 99)),
        "energy_per_inference_mj": heat.energy["npu"] / max(len(f.ends), 1) * 1e3,
        "npu_power_w": heat.energy["npu"] / run_s,
        "total_power_w": (heat.energy["npu"] + heat.energy["cpu"]) / run_s,
        "peak_temp_c": heat.peak,
        "throttled_s": float(np.sum(gaps[np.asarray(f.throttled, bool)])) if f.starts else 0.0,
        "above_threshold_s": heat.above_s,
    }


def _thermal_names() -> dict:
    from .thermal import THERMALS

    return THERMALS


def _timeline(f: _Frames, seconds: float, points: int = 2000) -> dict:
    """At most `points` samples (every n-th inference) and the completions of each whole second."""
    step = max(1, len(f.starts) // points)
    bins = np.arange(0, math.ceil(seconds) + 1)
    fps = np.histogram(f.ends, bins=bins)[0] if len(bins) > 1 else np.zeros(0)
    return {
        "t_s": f.starts[::step],
        "temp_c": f.temps[::step],
        "mhz": f.mhz[::step],
        "fps_t_s": bins[:-1].tolist(),
        "fps": fps.tolist(),
    }
