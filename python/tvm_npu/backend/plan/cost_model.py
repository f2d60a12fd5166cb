"""The one cost model: docs/npu.md section 5, in Python.

The planner uses it to choose tile sizes, and reports use it to estimate a stream before it runs. The C++
emulator implements the same formulas independently (src/runtime/cycle_model.cc) while executing; the
tests check the two agree. Change a formula only together with docs/npu.md, in a commit of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...contract.config import NPUConfig
from ...contract.stream import DTYPE_NAMES, ENGINES, NORM_KINDS, Command, at_position, two_byte_lanes
from ...contract.stream import DTYPES as DTYPES_BY_NAME


def conv_passes(cfg: NPUConfig, a: dict) -> int:
    """MAC-array passes of a CONV2D tile (docs section 4): one pass = mac_rows x mac_cols MACs."""
    pixels = a["out_h"] * a["out_w"]
    if a.get("groups", 1) > 1:  # depthwise: channels on the columns, kernel taps on the rows
        return pixels * math.ceil(a["oc"] / cfg.mac_cols) * math.ceil(a["kh"] * a["kw"] / cfg.mac_rows)
    return pixels * a["kh"] * a["kw"] * math.ceil(a["in_c"] / cfg.mac_rows) * math.ceil(a["oc"] / cfg.mac_cols)


def conv_macs(a: dict) -> int:
    per_output = a["kh"] * a["kw"] * (1 if a.get("groups", 1) > 1 else a["in_c"])
    return a["out_h"] * a["out_w"] * a["oc"] * per_output


def _rate_div(cfg: NPUConfig, dtype: int) -> int:
    """MAC slots per MAC of a dtype code (docs section 5): fp16_rate_div for fp16, 1 for int8."""
    return cfg.fp16_rate_div if DTYPE_NAMES[dtype] == "float16" else 1


def conv_cycles(cfg: NPUConfig, a: dict) -> int:
    """op_overhead + passes * rate_div, for the operands `a` of a CONV2D command."""
    rate = _rate_div(cfg, a["dtype"])
    return cfg.op_overhead + rate * conv_passes(cfg, a)


def matmul_passes(cfg: NPUConfig, a: dict) -> int:
    """MAC-array passes of a MATMUL (docs section 4): B in the weights' place, k on the rows, n on the
    columns, A's rows streamed like pixels."""
    return a["batch"] * a["m"] * math.ceil(a["k"] / cfg.mac_rows) * math.ceil(a["n"] / cfg.mac_cols)


def mac_macs(cmd: Command) -> int:
    """MACs of a MAC-engine command: CONV2D's nominal taps, MATMUL's batch * m * n * k."""
    a = cmd.args
    return a["batch"] * a["m"] * a["n"] * a["k"] if cmd.op == "MATMUL" else conv_macs(a)


def vector_cycles(cfg: NPUConfig, op: str, a: dict) -> int:
    """op_overhead + ceil(steps / lanes) for an ADD, ELTWISE, UNARY, SOFTMAX, NORM, ROPE, GN_STATS, GN_APPLY or
    POOL (docs section 5)."""
    lanes = cfg.vector_lanes // 2 if two_byte_lanes(op, a) else cfg.vector_lanes
    if op in ("ADD", "ELTWISE", "UNARY"):  # one step per element (a table lookup is one step)
        steps = a["rows"] * a["row_elems"]
    elif op == "SOFTMAX":  # a maximum pass, an exp-and-sum pass, a division pass
        steps = 3 * a["rows"] * a["row_elems"]
    elif op == "NORM":  # layernorm: sum, squared-deviation and normalize passes; rmsnorm: no sum pass
        steps = (3 if a["kind"] == NORM_KINDS["layernorm"] else 2) * a["rows"] * a["row_elems"]
    elif op == "ROPE":  # a multiply step, then a multiply-and-add step per element
        steps = 2 * a["rows"] * a["row_elems"]
    elif op in ("GN_STATS", "GN_APPLY"):  # format 1.7: sum + deviations (apply: normalize, + SiLU); G merges
        passes = 2 if op == "GN_STATS" or a.get("silu", 0) else 1
        steps = passes * a["rows"] * a["row_pixels"] * a["channels"] + a["groups"]
    else:
        steps = a["out_h"] * a["out_w"] * a["c"] * a["kh"] * a["kw"]
    return cfg.op_overhead + math.ceil(steps / lanes)


def compute_cycles(cfg: NPUConfig, cmd: Command) -> int:
    """Cycles of a compute command (CONV2D, MATMUL or a vector op) on its engine (0 for DMA and END)."""
    if cmd.op == "CONV2D":
        return conv_cycles(cfg, cmd.args)
    if cmd.op == "MATMUL":  # rate_div as CONV2D's: fp16_rate_div for fp16, 1 for int8 (docs section 5)
        return cfg.op_overhead + _rate_div(cfg, cmd.args["dtype"]) * matmul_passes(cfg, cmd.args)
    if cmd.engine == "vector":
        return vector_cycles(cfg, cmd.op, cmd.args)
    return 0


def dma_bus_bytes(cfg: NPUConfig, rows: int, row_bytes: int) -> int:
    """Bytes on the DDR bus: each row moves whole bursts."""
    return rows * math.ceil(row_bytes / cfg.burst_bytes) * cfg.burst_bytes


def dma_data_cycles(cfg: NPUConfig, rows: int, row_bytes: int) -> int:
    return math.ceil(dma_bus_bytes(cfg, rows, row_bytes) / cfg.ddr_bytes_per_cycle)


def ideal_cycles(cfg: NPUConfig, layer) -> int:
    """A layer's compute cycles as one command over the whole output, with no data movement: the
    bound a schedule is measured against."""
    dtype = DTYPES_BY_NAME[layer.dtype]
    if layer.kind == "matmul":  # every batch in one command: (batch, m, k, n) in layer.matmul
        batch, m, k, n = layer.matmul[:4]
        return cfg.op_overhead + _rate_div(cfg, dtype) * matmul_passes(cfg, dict(batch=batch, m=m, k=k, n=n))
    if layer.kind == "conv":
        oc, kh, kw, icg = layer.weight.shape
        in_c = icg * layer.groups
        pixels = layer.macs // (oc * kh * kw * icg)
        return conv_cycles(
            cfg, dict(dtype=dtype, out_h=pixels, out_w=1, kh=kh, kw=kw, in_c=in_c, oc=oc, groups=layer.groups)
        )
    if layer.kind == "softmax":
        return vector_cycles(cfg, "SOFTMAX", dict(dtype=dtype, rows=1, row_elems=layer.out_elems))
    if layer.kind == "norm":
        return vector_cycles(
            cfg, "NORM", dict(dtype=dtype, kind=NORM_KINDS[layer.func], rows=1, row_elems=layer.out_elems)
        )
    if layer.kind == "group_norm":  # GN_STATS then GN_APPLY over the whole map (format 1.7)
        a = dict(dtype=dtype, rows=1, row_pixels=1, channels=layer.out_elems, groups=layer.groups)
        return vector_cycles(cfg, "GN_STATS", a) + vector_cycles(cfg, "GN_APPLY", dict(a, silu=layer.func == "silu"))
    if layer.kind == "rope":
        return vector_cycles(cfg, "ROPE", dict(dtype=dtype, rows=1, row_elems=layer.out_elems))
    if layer.kind in ("add", "eltwise", "unary"):
        widths = dict(zip(("a_dtype", "b_dtype", "out_dtype"), (DTYPES_BY_NAME[d] for d in layer.dtypes)))
        return vector_cycles(
            cfg,
            "ELTWISE" if layer.kind == "eltwise" else "ADD",
            dict(dtype=dtype, rows=1, row_elems=layer.out_elems, **widths),
        )
    return vector_cycles(
        cfg, "POOL", dict(dtype=dtype, out_h=1, out_w=1, c=layer.out_elems, kh=layer.window[0], kw=layer.window[1])
    )


@dataclass
class Estimate:
    """Cycle and traffic estimate of a command list, with the schedule of every command."""

    total_cycles: int = 0
    mac_cycles: int = 0
    vector_cycles: int = 0
    macs: int = 0
    ddr_read_bytes: int = 0
    ddr_write_bytes: int = 0
    schedule: list = field(default_factory=list)  # (issue, start, end) per command


def estimate(cfg: NPUConfig, commands: list[Command], position: int = 0) -> Estimate:
    """Time a command list with the issue rule and engine formulas of docs/npu.md section 5; a `pos_mode`
    command (format 1.4) with its effective operands at `position` (docs/npu.md section 3)."""
    est = Estimate()
    ends = {e: [] for e in ENGINES}  # end cycle of each command issued to an engine, in order
    busy = dict.fromkeys(ENGINES, 0)
    ddr_busy = 0
    prev_issue = -1
    for cmd in commands:
        cmd = at_position(cmd, position)
        t_issue = prev_issue + 1
        for engine, k in cmd.waits.items():
            n = len(ends[engine])
            if k < n:
                t_issue = max(t_issue, ends[engine][n - k - 1])
        prev_issue = t_issue
        engine = cmd.engine
        if engine is None:  # END: the call ends when every engine is idle
            est.schedule.append((t_issue, t_issue, t_issue))
            continue
        start = max(t_issue, busy[engine])
        a = cmd.args
        if engine in ("mac", "vector"):
            end = start + compute_cycles(cfg, cmd)
            if engine == "mac":
                est.mac_cycles += end - start
                est.macs += mac_macs(cmd)
            else:
                est.vector_cycles += end - start
        else:
            bus = dma_bus_bytes(cfg, a["rows"], a["row_bytes"])
            t_data = max(start + cfg.dma_latency, ddr_busy)
            end = ddr_busy = t_data + dma_data_cycles(cfg, a["rows"], a["row_bytes"])
            if cmd.op == "DMA_LOAD":
                est.ddr_read_bytes += bus
            else:
                est.ddr_write_bytes += bus
        busy[engine] = end
        ends[engine].append(end)
        est.schedule.append((t_issue, start, end))
    est.total_cycles = max([0] + list(busy.values()))
    return est
