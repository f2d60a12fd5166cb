"""`tvm_npu.tools.sustain` and `tvm-npu sustain`: a model's sustained performance over a stream of frames.

    res = sustain("model.so", inputs=[x], fps=30, seconds=120, policy="throttle")
    print(res.text())                       # fps, latency percentiles, energy, power, temperature
    write_sustain_html(res, "sustain.html") # temperature, clock and fps over time (html_report.py)
    write_sustain_trace(res, "trace.json")  # the same as Perfetto counter tracks (trace.py)

The NPU part of a frame is the cycle model's time of the library's own command streams (read back from
its NPU modules), at each operating point (power/model.py). The CPU part is measured on this machine:
`main` runs `repeats` times and the time outside the NPU calls (the ops that stayed on the CPU, the
VM, staging) is the median; `pre` (a callable: the application's pre- and post-processing of one
frame) is timed alike and added. Or it is given (`cpu_ms`). The run itself is power/pipeline.py.
"""

from __future__ import annotations

import math
import numbers
import statistics
import time
from pathlib import Path

from ..contract.config import PRESETS, NPUConfig
from ..contract.errors import NPUError
from ..power import DEFAULT_POWER, NpuWork, PowerModel, SustainResult, operating_points, simulate, work_of


def region_calls(vm, arrays: list) -> dict:
    """{NPU module symbol: its calls in one call of `main` on `arrays`}: regions the partitioner found
    identical (a transformer's attention blocks) are one module called once per block."""
    import tvm

    from .. import runtime

    modules = runtime.npu_modules(vm)
    for m in modules:
        m["reset_profile"]()
    vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return {runtime.profile_of(m)["symbol"]: runtime.profile_of(m)["calls"] for m in modules}


def npu_work(vm, calls: dict | None = None) -> tuple[NPUConfig, NpuWork]:
    """The NPU configuration and one call's NPU work of every NPU module of `vm` (a VirtualMachine,
    an executable or a library), from the command streams they hold; each module counted `calls[symbol]`
    times (`region_calls`), once when `calls` is None."""
    from .. import runtime
    from ..contract import stream

    modules = runtime.npu_modules(vm)
    if not modules:
        raise NPUError(
            "NPU_E_UNSUPPORTED_OP",
            "the model has no NPU region: nothing runs on the NPU, so there is no NPU power to model "
            "(`tvm-npu report` says why each op stayed on the CPU)",
        )
    cfg, total = None, None
    for m in modules:
        s = stream.decode(bytes(m["get_stream"]()))
        preset = next((p for p in PRESETS.values() if p.block() == s.config.block()), None)
        cfg = preset or s.config
        w = work_of(s.config, s.commands)
        for _ in range((calls or {}).get(runtime.profile_of(m)["symbol"], 1)):
            total = w if total is None else total + w
    assert cfg is not None and total is not None
    return cfg, total


def _executable(model, config, inputs):
    """(runtime.Model, argument arrays) of an .so / ONNX path, an IRModule or an executable: calls go
    through the checked boundary, so wrong inputs are a coded NPUError."""
    import tvm

    from .. import runtime
    from . import inputs as inputs_mod

    irmod = None
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise NPUError("ERR_INVALID_MODEL", f"model file {str(path)!r} does not exist")
        if path.suffix == ".onnx":
            from ..frontend.onnx import from_onnx

            model = from_onnx(str(path))
        else:
            model = runtime.load_module(path)
    if isinstance(model, tvm.IRModule):
        from ..build import build

        irmod, model = model, build(model, config=config)
    vm = runtime.Model(model)
    if inputs is not None:
        return vm, inputs_mod.as_arguments(inputs, inputs_mod.signature(irmod) if irmod is not None else None)
    if irmod is not None:
        from .profiler import random_inputs

        return vm, random_inputs(irmod)
    return vm, None


def measure_cpu_s(vm, arrays: list, repeats: int = 20, pre=None) -> float:
    """Median seconds per call of `main` outside its NPU calls (plus `pre()`'s median, if given).

    `vm`: a runtime.Model (its first call checks `arrays` against the signature: wrong inputs are a
    coded NPUError) or a VirtualMachine."""
    import tvm

    from .. import runtime

    if isinstance(vm, runtime.Model):
        vm.call("main", *arrays)  # checked once; the timed calls below skip the check's copies
        vm = vm.vm
    modules = runtime.npu_modules(vm)
    args = [tvm.runtime.tensor(a) for a in arrays]
    fn = vm["main"]
    fn(*args)  # warm up: first-call allocations are not a frame's cost
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        if pre is not None:
            pre()
        fn(*args)
        wall = time.perf_counter_ns() - t0
        npu = 0
        for m in modules:
            last = runtime.profile_of(m)["last"]
            npu += last.get("host_end_ns", 0) - last.get("host_start_ns", 0)
        samples.append(max(0, wall - npu) * 1e-9)
    return statistics.median(samples)


# The simulation steps frame by frame (about 20 us each on one core): a run is refused past this many
# frames (some 20 s of work) rather than left to run for hours (--seconds 1e12 never ended).
MAX_FRAMES = 1_000_000


def _check_numbers(**values) -> None:
    """fps, seconds and cpu_ms: finite numbers (NaN or inf seconds ran forever); the signs simulate checks."""
    for name, v in values.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)):
            raise NPUError("ERR_INVALID_CONFIG", f"{name}={v!r}: pass a finite number")


def _check_platform(thermal, cpu_w: float, other_w: float) -> None:
    """Powers that are not negative and an ambient temperature a device meets (-40 to 125 C, the
    industrial range): NaN powers gave NaN energies, an ambient of 1000 C overflowed the thermal model."""
    for name, watts in (("cpu_w", cpu_w), ("other_w", other_w)):
        if watts < 0:
            raise NPUError("ERR_INVALID_CONFIG", f"{name}={watts!r}: a power in W cannot be negative")
    if isinstance(thermal, str):
        from ..power import get_thermal  # pylint: disable=import-outside-toplevel

        thermal = get_thermal(thermal)
    ambient = thermal.ambient_c
    if not isinstance(ambient, numbers.Real) or not math.isfinite(ambient) or not -40 <= float(ambient) <= 125:
        raise NPUError("ERR_INVALID_CONFIG", f"ambient {ambient!r} C: pass a temperature from -40 to 125 C")


def _check_frames(cfg, work, cpu_s: float, fps, seconds: float, pipelined: bool) -> None:
    """Refuse a run of more than MAX_FRAMES frames: `seconds` at the source's rate, or at the fastest
    rate the pipeline takes frames with fps 0 (throttling only lowers it), before any is simulated."""
    stage = work.time_s(operating_points(cfg)[0])
    frame_s = max(cpu_s, stage) if pipelined else cpu_s + stage
    burst = 1 / frame_s if frame_s > 0 else math.inf
    rate = min(fps, burst) if fps else burst
    frames = seconds * rate
    if 0 < frames < 1:  # no frame arrives in the run (signs: simulate says): every figure would be of nothing
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"seconds={seconds:g} at {rate:.4g} frames/s is less than one frame: pass seconds >= {1 / rate:.4g} "
            "(or a higher fps)",
        )
    if frames > MAX_FRAMES:
        fits = MAX_FRAMES / rate
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"seconds={seconds:g} at {rate:.4g} frames/s is {frames:.3g} frames; a sustained run simulates at most "
            f"{MAX_FRAMES:,} frames: pass seconds <= {fits:.4g} (or a lower fps)",
        )


def sustain(
    model,
    fps: float | None = 30.0,
    seconds: float = 120.0,
    policy: str = "throttle",
    thermal="phone",
    inputs=None,
    cpu_ms: float | None = None,
    pre=None,
    config: NPUConfig | str | None = None,
    pipelined: bool = True,
    cpu_w: float = 1.0,
    power: PowerModel = DEFAULT_POWER,
    repeats: int = 20,
    other_w: float = 0.0,
) -> SustainResult:
    """Simulate `seconds` of frames at `fps` through the CPU -> NPU pipeline (power/pipeline.py).

    Parameters
    ----------
    model : str, Path, tvm.IRModule or executable
        A library (.so, `tvm_npu.export_library`), an ONNX file or an IRModule (built for `config`), or
        an executable of `tvm_npu.build`.
    fps : float or None
        The source's frame rate (None or 0: frames back to back, as fast as the pipeline runs).
    seconds, policy, thermal, pipelined, cpu_w, power, other_w
        As `tvm_npu.power.simulate`. A run of more than MAX_FRAMES (1,000,000) frames is refused
        (NPUError ERR_INVALID_CONFIG naming the seconds that fit), as are NaN and infinite numbers.
    inputs : optional
        `main`'s arguments (arrays, or .npy / .npz paths) to time the CPU part with; random for an
        ONNX file or an IRModule. A library does not say its inputs' shapes: give them, or `cpu_ms`.
    cpu_ms : float, optional
        The CPU part per frame in milliseconds, instead of measuring it.
    pre : callable, optional
        The application's per-frame pre- and post-processing, timed and added to the CPU part.
    config : NPUConfig or str, optional
        The NPU to build an ONNX file or IRModule for (a library keeps its own).
    repeats : int
        Calls of `main` to take the median CPU time of.

    Returns
    -------
    SustainResult
        `.summary` (fps, latency percentiles, energy per inference, power, peak temperature, time
        throttled), `.timeline`, `.text()`.
    """
    _check_numbers(fps=fps, seconds=seconds, cpu_ms=cpu_ms, cpu_w=cpu_w, other_w=other_w)
    _check_platform(thermal, cpu_w, other_w)
    if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral) or not 1 <= repeats <= 1000:
        raise NPUError("ERR_INVALID_CONFIG", f"repeats={repeats!r}: pass an int from 1 to 1000 (calls of main timed)")
    vm, arrays = _executable(model, config, inputs)
    if arrays is not None:
        vm.call("main", *arrays)  # checked against the signature first: wrong inputs are a coded error
    # Without inputs the calls per frame cannot be counted: each region is taken once (summary says so).
    calls = region_calls(vm.vm, arrays) if arrays is not None else None
    cfg, work = npu_work(vm.vm, calls)
    if cpu_ms is not None:
        if cpu_ms < 0:
            raise NPUError("ERR_INVALID_CONFIG", f"cpu_ms {cpu_ms}: the CPU part of a frame cannot be negative")
        cpu_s, measured = cpu_ms * 1e-3, False
    elif arrays is None:
        raise NPUError(
            "ERR_SHAPE_MISMATCH",
            "a library does not say its inputs' shapes: give its inputs (--input x.npy, inputs=) to measure "
            "the CPU part of a frame, or give that part (--cpu-ms, cpu_ms=)",
        )
    else:
        cpu_s, measured = measure_cpu_s(vm, arrays, repeats, pre), True
    _check_frames(cfg, work, cpu_s, fps, seconds, pipelined)
    res = simulate(cfg, work, cpu_s, fps or None, seconds, policy, thermal, power, cpu_w, pipelined, other_w=other_w)
    res.summary["cpu_measured"] = measured
    res.summary["region_calls_counted"] = calls is not None
    return res


def cmd_sustain(args) -> int:
    """`tvm-npu sustain`: print the run's numbers, write the HTML report / trace / JSON on request."""
    import json

    from ..power import get_thermal
    from ..runtime.files import write_text
    from .commands import outputs_apart
    from .html_report import write_sustain_html
    from .trace import write_sustain_trace

    outputs_apart({"--html": args.html, "--trace": args.trace, "--json": args.json}, [args.model, *(args.input or [])])
    thermal = get_thermal(args.thermal)
    if args.ambient is not None:
        thermal = thermal.replace(ambient_c=args.ambient)
    inputs = None
    if args.input:
        inputs = args.input[0] if len(args.input) == 1 else args.input
    res = sustain(
        args.model,
        fps=args.fps,
        seconds=args.seconds,
        policy=args.policy,
        thermal=thermal,
        inputs=inputs,
        cpu_ms=args.cpu_ms,
        config=args.config,
        pipelined=not args.back_to_back,
        cpu_w=args.cpu_w,
        other_w=args.other_w,
    )
    print(res.text())
    for path, write in (
        (args.html, lambda p: write_sustain_html(res, p)),
        (args.trace, lambda p: write_sustain_trace(res, p)),
        (args.json, lambda p: write_text(p, json.dumps({**res.__dict__}, indent=2) + "\n")),
    ):
        if path:
            write(path)
            print(f"wrote {path}")
    return 0
