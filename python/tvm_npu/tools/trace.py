"""Chrome trace-event output of a profile: open the file in https://ui.perfetto.dev or chrome://tracing.

One process per NPU region with a thread per engine ("DMA ch0", "DMA ch1", "MAC array", "vector unit")
and "layers" threads with one span per NPU layer; one "CPU" process whose spans ("cpu fallback") are
the host time between NPU calls. Two time bases meet on one axis: NPU spans are the cycle model's cycles
at the configuration's clock (cycles / clock_mhz = microseconds), CPU spans are measured host
wall-clock gaps (std::chrono::steady_clock around each NPU call). Each NPU call is laid out with its
modeled duration, and each CPU gap with its measured duration, in the order the host ran them. A region
whose float32 inputs held values beyond the fp16 range gets an instant event "saturated inputs" at its
start, with the count per input (docs/npu.md section 2).
"""

from __future__ import annotations

import json

from ..runtime.files import write_text

CPU_PID = 0
THREADS = {"dma0": (0, "DMA ch0"), "dma1": (1, "DMA ch1"), "mac": (2, "MAC array"), "vector": (3, "vector unit")}
LAYERS_TID = 100  # lanes 100, 101, ... (DMA channels past 1 are 10 + channel)


def _meta(name: str, pid: int, value: str, tid: int = 0) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}


def _thread(engine: str) -> tuple[int, str]:
    if engine in THREADS:
        return THREADS[engine]
    ch = int(engine[3:])  # dma2, dma3, ... on configurations with more channels
    return 10 + ch, f"DMA ch{ch}"


def _span(name: str, cat: str, t0: float, start: float, end: float, pid: int, tid: int, args: dict) -> dict:
    """An "X" event; times rounded to whole nanoseconds so back-to-back spans never overlap."""
    ts = round(t0 + start, 3)
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": max(0.0, round(t0 + end - ts, 3)),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _layer_spans(layers: list, t0: float, mhz: float, pid: int) -> tuple[list, int]:
    """The layers' spans, on as many "layers" lanes as partly overlapping spans need (a layer's weight
    prefetch starts inside the previous layer's span; one lane's slices must nest)."""
    lanes: list = []
    events = []
    for lay in sorted(layers, key=lambda x: x["start"]):
        lane = next((i for i, end in enumerate(lanes) if end <= lay["start"]), len(lanes))
        lanes[lane : lane + 1] = [lay["end"]]
        args = {
            k: lay[k]
            for k in (
                "name",
                "kind",
                "dtype",
                "macs",
                "cycles",
                "mac_utilization",
                "ddr_read_bytes",
                "ddr_write_bytes",
                "roofline_bound",
                "saturated",
                "fp16_overflow",
                "nan",
            )
            if k in lay
        }
        events.append(
            _span(
                f"{lay['region']}.{lay['name'].rsplit('.', 1)[-1]} {lay['composite']}",
                "layer",
                t0,
                lay["start"] / mhz,
                lay["end"] / mhz,
                pid,
                LAYERS_TID + lane,
                args,
            )
        )
    return events, len(lanes)


def trace_events(prof: dict) -> list:
    """The trace events of a `tvm_npu.profile` result (metadata, then "X" complete events).

    Parameters
    ----------
    prof : dict
        A `profile` result (its "regions", "layers" and "config").

    Returns
    -------
    list of dict
        Chrome trace events; ``ts`` and ``dur`` in microseconds.
    """
    mhz = float(prof["config"]["clock_mhz"])
    events = [_meta("process_name", CPU_PID, "CPU"), _meta("thread_name", CPU_PID, "CPU", 0)]
    calls = sorted(prof["regions"].items(), key=lambda kv: kv[1].get("host_start_ns", 0))
    t, prev_end, prev = 0.0, None, None
    for pid, (symbol, region) in enumerate(calls, start=1):
        events.append(_meta("process_name", pid, f"NPU {region['alias']} ({symbol})"))
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for engine in sorted({r["engine"] for r in region["records"] if r["engine"]}):
            events.append(_meta("thread_name", pid, _thread(engine)[1], _thread(engine)[0]))
        start_ns = region.get("host_start_ns", 0)
        if prev_end and start_ns > prev_end:  # host time between two NPU calls: CPU ops, VM work
            gap = start_ns - prev_end
            events.append(
                _span(
                    "cpu fallback",
                    "cpu",
                    t,
                    0.0,
                    gap / 1e3,
                    CPU_PID,
                    0,
                    {"host_ns": gap, "after": prev, "before": region["alias"]},
                )
            )
            t = events[-1]["ts"] + events[-1]["dur"]
        if any(region.get("saturated_inputs", ())):  # the staging policy of docs/npu.md section 2
            events.append(
                {
                    "name": "saturated inputs",
                    "cat": "numerics",
                    "ph": "i",
                    "s": "p",
                    "ts": t,
                    "pid": pid,
                    "tid": 0,
                    "args": {"saturated_inputs": region["saturated_inputs"]},
                }
            )
        for r in region["records"]:
            if r["engine"]:
                args = {k: r[k] for k in ("layer", "index", "issue", "start", "end", "bus_bytes", "macs")}
                events.append(
                    _span(
                        r["opcode"],
                        r["layer"] or "npu",
                        t,
                        r["start"] / mhz,
                        r["end"] / mhz,
                        pid,
                        _thread(r["engine"])[0],
                        args,
                    )
                )
        spans, lanes = _layer_spans([x for x in prof["layers"] if x["symbol"] == symbol], t, mhz, pid)
        events += spans
        events += [
            _meta("thread_name", pid, "layers" + (f" ({i + 1})" if i else ""), LAYERS_TID + i) for i in range(lanes)
        ]
        t = round(t + region["call_cycles"] / mhz, 3)
        prev_end, prev = region.get("host_end_ns"), region["alias"]
    return events


def write_chrome_trace(prof: dict, path) -> None:
    """Write `prof` as a Chrome trace-event JSON file ({"traceEvents": [...]}) that Perfetto loads.

    Parameters
    ----------
    prof : dict
        A `tvm_npu.profile` result.
    path : str or os.PathLike
        The .json file to write.
    """
    from .profiler import check_profile  # pylint: disable=import-outside-toplevel

    check_profile(prof)
    doc = {
        "traceEvents": trace_events(prof),
        "displayTimeUnit": "ns",
        "otherData": {"npu_time": "cycle model at clock_mhz", "cpu_time": "host wall clock"},
    }
    write_text(path, json.dumps(doc))


def sustain_events(result) -> list:
    """Counter tracks of a sustained run (tools/sustain.py): the die's temperature (C), the NPU's clock
    (MHz) at each sampled inference start, and the frames completed in each second of the run."""
    tl, pid = result.timeline, 1
    events = [_meta("process_name", pid, f"sustained run: {result.summary['policy']} policy")]
    for t, temp, mhz in zip(tl["t_s"], tl["temp_c"], tl["mhz"]):
        ts = round(t * 1e6, 3)
        events.append({"name": "temperature C", "ph": "C", "pid": pid, "ts": ts, "args": {"C": round(temp, 3)}})
        events.append({"name": "NPU clock MHz", "ph": "C", "pid": pid, "ts": ts, "args": {"MHz": mhz}})
    for t, n in zip(tl["fps_t_s"], tl["fps"]):
        events.append({"name": "fps", "ph": "C", "pid": pid, "ts": round(t * 1e6, 3), "args": {"fps": n}})
    return events


def write_sustain_trace(result, path) -> None:
    """Write a sustained run's counter tracks (`sustain_events`) as a Chrome trace-event JSON file."""
    doc = {"traceEvents": sustain_events(result), "displayTimeUnit": "ms", "otherData": result.summary}
    write_text(path, json.dumps(doc))


def denoise_events(profile: dict, clock_mhz: float) -> list:
    """A denoising loop (tvm_npu.diffusion's `profile()`) as a trace: one slice per UNet step, as long as
    the cycle model says (at the step's clock under a thermal policy, else at `clock_mhz`), and with a
    thermal policy the die's temperature, the clock and the steps in all as counters."""
    pid, ts = 1, 0.0
    events = [_meta("process_name", pid, "denoising loop"), _meta("thread_name", pid, "UNet steps", tid=1)]
    log = {e["step"]: e for e in profile.get("thermal", [])}
    for s in profile["steps"]:
        e = log.get(s["step"])
        dur = e["step_ms"] * 1e3 if e else s["cycles"] / clock_mhz
        args = {"t": s["t"], "cycles": s["cycles"]}
        if e:
            args.update(temp_c=round(e["temp_c"], 3), mhz=e["mhz"], steps_total=e["steps_total"], cut=e["cut"])
            for name, key, value in (("temperature C", "C", round(e["temp_c"], 3)), ("NPU clock MHz", "MHz", e["mhz"]),
                                     ("steps in all", "steps", e["steps_total"])):  # fmt: skip
                events.append({"name": name, "ph": "C", "pid": pid, "ts": round(ts, 3), "args": {key: value}})
        events.append({"name": f"step {s['step']}", "ph": "X", "pid": pid, "tid": 1, "ts": round(ts, 3),
                       "dur": round(dur, 3), "args": args})  # fmt: skip
        ts += dur
    return events


def write_denoise_trace(profile: dict, clock_mhz: float, path) -> None:
    """Write `denoise_events` as a Chrome trace-event JSON file (Perfetto opens it)."""
    doc = {"traceEvents": denoise_events(profile, clock_mhz), "displayTimeUnit": "ms"}
    write_text(path, json.dumps(doc))
