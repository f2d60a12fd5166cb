"""Command-stream verifier: the compiler's safety net (docs/npu.md sections 3-6).

`verify` checks a planned stream before it is encoded: every address, stride and footprint the
runtime validates at load (so a planner bug is reported at compile time, with the command that
caused it), and every data hazard, decided from the waits alone — never from timing, because a
schedule that is race-free only for the cost model's cycle counts breaks as soon as a formula or a
configuration changes.

Ordering model (section 5). Engines run their commands in order; a wait `k` on engine `e` holds a
command's issue until at most `k` commands are outstanding on `e`; commands issue in stream order, so
whatever a command's waits forced complete is complete for every later command too (the planner
relies on this: a layer's second load carries no waits of its own). For each command we compute, per
engine, how many of that engine's commands are guaranteed complete when it starts (a vector clock of
completed prefixes, closed under "complete when the forced command started"). Command A *happens
before* command B iff B's vector counts A's position on A's engine.

Each byte range of SRAM and DDR carries its last writer and its latest reader per engine; a read
must happen after the last writer, a write after the last writer and every reader. Keeping only the
latest reader per engine is enough: engines are in order, so ordering after it orders after all
earlier readers on that engine. Footprints are whole ``rows * stride`` spans (row padding included),
the same spans the runtime bounds-checks.
"""

from __future__ import annotations

from bisect import bisect_right

from ..contract.errors import NPUError
from ..contract.stream import (
    B_MODES,
    DTYPE_BYTES,
    DTYPE_NAMES,
    ENGINES,
    NO_BIAS,
    NO_PARAM,
    NO_WAIT,
    OPERANDS,
    SLICE_ALIGNMENT,
    UNARY_TABLE_BYTES,
    Stream,
    at_position,
    int4_block_bytes,
    int4_weights,
    operand_dtype,
)

_NEVER = None  # byte state: never written (reading it is a bug)
_BEFORE = -1  # "command" that ends before command 0: the weight image and the staged inputs
_NO_READERS = (-1,) * len(ENGINES)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _Bytes:
    """Disjoint byte segments covering ``[0, size)``; segment ``j`` starts at ``starts[j]`` and
    carries ``states[j]`` = ``(writer, reader per engine...)``. Adjacent equal segments are merged,
    so the structure stays as small as the number of distinct buffers in flight."""

    def __init__(self, size: int, state: tuple):
        self.size, self.starts, self.states = size, [0], [state]

    def _cut(self, addr: int) -> int:
        """Index of the segment starting at `addr`, splitting one if needed."""
        if addr >= self.size:
            return len(self.starts)
        j = bisect_right(self.starts, addr) - 1
        if self.starts[j] != addr:
            j += 1
            self.starts.insert(j, addr)
            self.states.insert(j, self.states[j - 1])
        return j

    def update(self, lo: int, hi: int, fn) -> None:
        """Replace each state ``s`` of a segment of ``[lo, hi)`` by ``fn(seg_lo, seg_hi, s)``."""
        j0, j1 = self._cut(lo), self._cut(hi)
        for j in range(j0, j1):
            end = self.starts[j + 1] if j + 1 < len(self.starts) else self.size
            self.states[j] = fn(self.starts[j], end, self.states[j])
        # Re-merge the touched slice with its neighbours in one slice assignment (one memmove).
        a, b = max(j0 - 1, 0), min(j1 + 1, len(self.starts))
        starts, states = [], []
        for j in range(a, b):
            if not states or states[-1] != self.states[j]:
                starts.append(self.starts[j])
                states.append(self.states[j])
        self.starts[a:b], self.states[a:b] = starts, states


def _fail(i: int, cmd, what: str):
    raise NPUError("ERR_BAD_STREAM", f"command {i} ({cmd.op}{' ' + cmd.note if cmd.note else ''}): {what}")


def _pixel_row(width: int, channel_bytes: int, pstride: int) -> int:
    """Bytes of a row of `width` pixels `pstride` apart (0: packed), docs/npu.md section 3."""
    return width * channel_bytes if not pstride else (width - 1) * pstride + channel_bytes


def _footprints(cmd, alignment: int) -> tuple[list, list]:
    """(reads, writes) of a command: lists of ``(space, what, addr, rows, row_bytes, stride)``."""
    op = cmd.op
    a = {name: cmd.args.get(name, 0) for name in OPERANDS.get(op, ())}  # omitted operands encode as 0
    if op == "DMA_LOAD":
        return (
            [("DDR", "source", a["ddr_addr"], a["rows"], a["row_bytes"], a["ddr_stride"])],
            [("SRAM", "destination", a["sram_addr"], a["rows"], a["row_bytes"], a["sram_stride"])],
        )
    if op == "DMA_STORE":
        return (
            [("SRAM", "source", a["sram_addr"], a["rows"], a["row_bytes"], a["sram_stride"])],
            [("DDR", "destination", a["ddr_addr"], a["rows"], a["row_bytes"], a["ddr_stride"])],
        )
    if op not in COMPUTE_OPS:  # END (and an unknown opcode, refused by the caller)
        return [], []
    elem = DTYPE_BYTES.get(DTYPE_NAMES.get(a["dtype"], ""), 0)
    if op == "CONV2D":
        tap = 1 if a["groups"] > 1 else a["in_c"]  # depthwise weights are [C][KH][KW][1]
        in_row = _pixel_row(a["in_w"], a["in_c"] * elem, a["in_pstride"])
        w8 = a.get("w_dtype", 0) != 0  # format 1.4: int8 weight codes under fp16 activations
        int4 = int4_weights(a) is not None  # format 1.4: two codes a byte
        w_row = a["in_c"] // 2 if int4 else a["kh"] * a["kw"] * tap * (1 if w8 else elem)
        reads = [
            ("SRAM", "input", a["in_addr"], a["in_h"], in_row, a["in_stride"]),
            ("SRAM", "weights", a["w_addr"], a["oc"], w_row, a["w_stride"]),
        ]
        if int4:
            block = int4_block_bytes(a, alignment)
            reads.append(("SRAM", "int4 dequantization block", a["bias_addr"], 1, block, _align(block, alignment)))
        elif elem == 1 or w8:  # int8's requantization or W8A16's dequantization block: two rows of OC words
            vec = _align(a["oc"] * 4, alignment)
            reads.append(("SRAM", "requantization block", a["bias_addr"], 2, a["oc"] * 4, vec))
        elif a["bias_addr"] != NO_BIAS:
            # OC fp32 words; an aligned address and an aligned span end in the same space.
            reads.append(("SRAM", "bias", a["bias_addr"], 1, a["oc"] * 4, _align(a["oc"] * 4, alignment)))
        out_row = _pixel_row(a["out_w"], a["oc"] * elem, a["out_pstride"])
        out = ("SRAM", "output", a["out_addr"], a["out_h"], out_row, a["out_stride"])
        return reads, [out]
    if op in ("ELTWISE", "UNARY", "SOFTMAX", "NORM", "ROPE"):
        return _vector_footprints(a, op, elem, alignment)
    if op in ("GN_STATS", "GN_APPLY"):
        return _group_norm_footprints(a, op, alignment)
    if op == "MATMUL":  # one block per batch (B's: per B batch); the output's first block first
        rows_b, cols_b = (a["n"], a["k"]) if a["b_transposed"] else (a["k"], a["n"])
        b8, nb = a.get("b_dtype", 0) == 2, (a["batch"] - 1) // max(a["b_group"], 1) + 1
        reads = [
            ("SRAM", "a", a["a_addr"] + o * a["a_bstride"], a["m"], a["k"] * elem, a["a_stride"])
            for o in range(a["batch"])
        ]
        reads += [
            ("SRAM", "b", a["b_addr"] + q * a["b_bstride"], rows_b, cols_b * (1 if b8 else elem), a["b_stride"])
            for q in range(nb)
        ]
        if b8:  # an int8 B's scale table: one fp32 word per B batch
            reads.append(("SRAM", "b scales", a["b_scale_addr"], 1, nb * 4, _align(nb * 4, alignment)))
        out = [
            ("SRAM", "output", a["out_addr"] + o * a["out_bstride"], a["m"], a["n"] * elem, a["out_stride"])
            for o in range(a["batch"])
        ]
        return reads, out
    if op == "ADD":
        row = a["row_elems"] * elem
        return (
            [
                ("SRAM", "a", a["a_addr"], a["rows"], row, a["a_stride"]),
                ("SRAM", "b", a["b_addr"], a["rows"], row, a["b_stride"]),
            ],
            [("SRAM", "output", a["out_addr"], a["rows"], row, a["out_stride"])],
        )
    in_row, out_row = (
        _pixel_row(w, a["c"] * elem, a[p]) for w, p in ((a["in_w"], "in_pstride"), (a["out_w"], "out_pstride"))
    )
    return (
        [("SRAM", "input", a["in_addr"], a["in_h"], in_row, a["in_stride"])],
        [("SRAM", "output", a["out_addr"], a["out_h"], out_row, a["out_stride"])],
    )


COMPUTE_OPS = ("CONV2D", "ADD", "POOL", "ELTWISE", "UNARY", "SOFTMAX", "NORM", "ROPE", "MATMUL", "GN_STATS", "GN_APPLY")
_GN_RECORD_BYTES = 12  # GN_STATS / GN_APPLY (format 1.7): u32 count, fp32 mean, fp32 m2 per group


def _group_norm_footprints(a: dict, op: str, alignment: int) -> tuple[list, list]:
    """GN_STATS: the fp16 tile, the group records (read only when merging, first 0), the records written
    (in place: not an overlap); GN_APPLY: the tile, the records, gamma and beta (C fp32 each), the output
    tile (docs/npu.md section 6)."""
    row = a["row_pixels"] * a["channels"] * 2
    rec = a["groups"] * _GN_RECORD_BYTES
    tile = ("SRAM", "input", a["in_addr"], a["rows"], row, a["in_stride"])
    records = ("SRAM", "records", a["stats_addr"], 1, rec, _align(rec, alignment))
    if op == "GN_STATS":
        return ([tile] if a["first"] else [tile, records]), [records]
    reads = [tile, records]
    prm = a["channels"] * 4
    for name in ("gamma", "beta"):
        if a[f"{name}_addr"] != NO_PARAM:
            reads.append(("SRAM", name, a[f"{name}_addr"], 1, prm, _align(prm, alignment)))
    return reads, [("SRAM", "output", a["out_addr"], a["rows"], row, a["out_stride"])]


def _vector_footprints(a: dict, op: str, elem: int, alignment: int) -> tuple[list, list]:
    """ELTWISE: a, b (its rows per b_mode), output; UNARY: input, the int8 table, output; SOFTMAX: input,
    its mask rows (format 1.4), output; NORM: input, gamma and beta (fp32 rows), output; ROPE: input, the
    cos and sin tables, output."""
    if op == "ELTWISE":
        mode = a["b_mode"]
        b_rows, b_elems = (
            (a["rows"], a["row_elems"])
            if mode == B_MODES["same"]
            else (1, a["channels"] if mode == B_MODES["channel"] else 1)
        )
        size = {w: DTYPE_BYTES.get(operand_dtype(a, w), 0) for w in ("a", "b", "out")}  # format 1.2 widths
        return (
            [
                ("SRAM", "a", a["a_addr"], a["rows"], a["row_elems"] * size["a"], a["a_stride"]),
                ("SRAM", "b", a["b_addr"], b_rows, b_elems * size["b"], a["b_stride"]),
            ],
            [("SRAM", "output", a["out_addr"], a["rows"], a["row_elems"] * size["out"], a["out_stride"])],
        )
    row = a["row_elems"] * elem
    reads = [("SRAM", "input", a["in_addr"], a["rows"], row, a["in_stride"])]
    if op == "UNARY" and elem == 1:
        reads.append(("SRAM", "table", a["table_addr"], 1, UNARY_TABLE_BYTES, _align(UNARY_TABLE_BYTES, alignment)))
    if op == "SOFTMAX" and a.get("mask_rows", 0):  # format 1.4
        reads.append(("SRAM", "mask", a["mask_addr"], a["mask_rows"], a["row_elems"] * 2, a["mask_stride"]))
    if op == "ROPE":
        for name in ("cos", "sin"):
            reads.append(("SRAM", name, a[f"{name}_addr"], a["cs_rows"], row, a["cs_stride"]))
    if op == "NORM":
        prm = a["row_elems"] * 4
        for name in ("gamma", "beta"):
            if a[f"{name}_addr"] != NO_PARAM:
                reads.append(("SRAM", name, a[f"{name}_addr"], 1, prm, _align(prm, alignment)))
    return reads, [("SRAM", "output", a["out_addr"], a["rows"], row, a["out_stride"])]


def _check_static(i: int, cmd, stream: Stream, reads: list, writes: list) -> None:
    """Check 1: alignment, footprints inside their space, the read-only weight region."""
    cfg = stream.config
    if cmd.op in ("DMA_LOAD", "DMA_STORE"):
        if not 0 <= cmd.args.get("channel", 0) < cfg.dma_channels:
            _fail(i, cmd, f"DMA channel {cmd.args.get('channel')}, the NPU has {cfg.dma_channels}")
    elif cmd.op != "END" and DTYPE_NAMES.get(cmd.args.get("dtype", 0)) not in ("float16", "int8"):
        _fail(i, cmd, f"dtype {cmd.args.get('dtype', 0)} is neither fp16 (1) nor int8 (2)")
    for e, k in cmd.waits.items():
        if e not in ENGINES or not 0 <= k <= NO_WAIT:
            _fail(i, cmd, f"invalid wait {e}={k}")
    limits = {"SRAM": (0, cfg.sram_bytes), "DDR": (0, stream.ddr_bytes + stream.state_bytes)}
    for n, (space, what, addr, rows, row_bytes, stride) in enumerate(reads + writes):
        if rows <= 0 or row_bytes <= 0:
            _fail(i, cmd, f"{what} moves no data ({rows} rows of {row_bytes} bytes)")
        # Weight rows are packed (docs/npu.md section 3): only the block start is aligned. A CONV2D's
        # or POOL's input and output may start at a channel slice: one SRAM beat is enough.
        # Format 1.8: a MATMUL's operands may start at a head slice (one attention head's columns).
        sliced = (
            cmd.op in ("CONV2D", "POOL") and what in ("input", "output") or cmd.op == "MATMUL" and what != "b scales"
        )
        start = SLICE_ALIGNMENT if sliced else cfg.alignment
        if addr % start or (stride % cfg.alignment and what != "weights"):
            _fail(
                i,
                cmd,
                f"{what} address {addr} / row stride {stride} not a multiple of the "
                f"alignment {start} / {cfg.alignment}",
            )
        if stride < row_bytes:
            _fail(i, cmd, f"{what} row stride {stride} is less than its row of {row_bytes} bytes")
        lo, hi = limits[space]
        if space == "DDR" and n >= len(reads) and addr < len(stream.weights):
            _fail(i, cmd, f"DMA_STORE writes DDR {addr}, inside the read-only weight region [0, {len(stream.weights)})")
        if not lo <= addr <= addr + rows * stride <= hi:
            _fail(i, cmd, f"{what} footprint [{addr}, {addr + rows * stride}) lies outside {space} [{lo}, {hi})")
        if space == "SRAM" and addr + rows * stride > cfg.sram_bytes - stream.sram_state_bytes:
            _check_sram_state(i, cmd, stream, what, addr, addr + rows * stride)
    if cmd.op in COMPUTE_OPS:  # the kernel would read what it already overwrote
        for _, _, o, rows, row_bytes, stride in writes:
            for _, what, addr, r, rb, s in reads:
                if what == "records" and cmd.op == "GN_STATS":  # merged in place, by design
                    continue
                end, o_end = (
                    _end(cmd, addr, r, rb, s, cfg.alignment, exact=True),
                    _end(cmd, o, rows, row_bytes, stride, cfg.alignment, exact=True),
                )
                if addr < o_end and o < end:
                    _fail(i, cmd, f"output [{o}, {o_end}) overlaps its {what} [{addr}, {end})")


def _end(cmd, addr: int, rows: int, row_bytes: int, stride: int, alignment: int = 128, exact: bool = False) -> int:
    """One past a footprint: its rows with their padding. A MATMUL operand may be a head slice (format
    1.8): one head's columns of every row, at any 16-byte offset of the row, and that offset may itself
    be a multiple of the alignment (head 2 of SD-1.5's 320-byte heads starts 640 bytes in). So whether
    `addr` is aligned says nothing; a MATMUL footprint ends with its last row's bytes, rounded up to the
    alignment (the padding of a row that ends there), never `rows * stride` past a head's offset, which
    would reach into the next buffer by that offset. `exact`: without the rounding, as the runtime's
    MATMUL check measures an output overlapping an operand (src/runtime/matmul_checks.cc). The same for
    ADD, ELTWISE and UNARY: a row wider than max_width runs as column slices (plan/row_slices.py), each
    at an aligned offset of the row; the runtime bounds rows * stride from there, which the planner
    reserves, but the bytes that command reads end with its last row's."""
    if cmd.op not in ("MATMUL", "ADD", "ELTWISE", "UNARY"):
        return addr + rows * stride
    last = addr + (rows - 1) * stride + row_bytes
    return last if exact else min(addr + rows * stride, -(-last // alignment) * alignment)


def _sram_states(stream: Stream) -> list:
    """The SRAM state tensors' byte ranges (format 1.5; their `ddr_addr` is an SRAM address)."""
    return [
        (t.ddr_addr, t.ddr_addr + t.view[0] * t.view[1] * t.row_stride)
        for t in stream.tensors
        if t.role == "sram_state"
    ]


def _check_sram_state(i: int, cmd, stream: Stream, what: str, lo: int, hi: int) -> None:
    """A footprint that reaches the SRAM state area lies inside one SRAM state tensor: the area is kept
    across calls, and a tile there would overwrite another layer's (or step's) cache."""
    if not any(a <= lo and hi <= b for a, b in _sram_states(stream)):
        area = stream.config.sram_bytes - stream.sram_state_bytes
        _fail(
            i,
            cmd,
            f"{what} [{lo}, {hi}) reaches the SRAM state area [{area}, {stream.config.sram_bytes}) "
            "outside its SRAM state tensors",
        )


def verify(stream: Stream) -> None:
    """Check a command stream for invalid addresses and data hazards; raise on the first problem.

    Parameters
    ----------
    stream : Stream
        A planned (or decoded) stream; its config, weights and ddr_bytes give the address spaces,
        its input and output tensor descriptors the DDR bytes staged before and read after the run.

    A command with a `pos_mode` (format 1.4) is checked as it runs at position 0 and at the planner's
    position limit (`stream.info["position_limit"]`): its footprints only grow with the position, so the
    two bound every call the runtime accepts; the hazards are decided on the widest footprints. The state
    region after `ddr_bytes` holds what the previous call left, so it counts as written before command 0.

    Raises
    ------
    NPUError
        ``ERR_BAD_STREAM`` naming the command index and op, what is wrong and, for a hazard, the
        earlier command it conflicts with and the wait that would order them.
    """
    cmds = stream.commands
    if not cmds or cmds[-1].op != "END":
        raise NPUError("ERR_BAD_STREAM", "the stream does not end with END")
    sram = _Bytes(stream.config.sram_bytes, (_NEVER,) + _NO_READERS)
    area = stream.config.sram_bytes - stream.sram_state_bytes
    if stream.sram_state_bytes % stream.config.alignment or area < stream.sram_bytes_used:
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"the stream uses {stream.sram_bytes_used} bytes of SRAM next to an SRAM state area of "
            f"{stream.sram_state_bytes} (aligned to {stream.config.alignment}), SRAM is {stream.config.sram_bytes}",
        )
    for lo, hi in _sram_states(stream):  # format 1.5: what the previous call left, like the DDR state
        if not area <= lo <= hi <= stream.config.sram_bytes:
            raise NPUError(
                "ERR_BAD_STREAM",
                f"an SRAM state tensor at [{lo}, {hi}) lies outside the SRAM state area "
                f"[{area}, {stream.config.sram_bytes})",
            )
        sram.update(lo, hi, lambda a, b, s: (_BEFORE,) + _NO_READERS)
    ddr = _Bytes(stream.ddr_bytes + stream.state_bytes, (_NEVER,) + _NO_READERS)
    ddr.update(stream.ddr_bytes, stream.ddr_bytes + stream.state_bytes, lambda lo, hi, s: (_BEFORE,) + _NO_READERS)
    limit = stream.info.get("position_limit", 0)
    # The runtime copies the weight image and stages the inputs before command 0.
    ddr.update(0, len(stream.weights), lambda lo, hi, s: (_BEFORE,) + _NO_READERS)
    tensor_spans = {}
    for t in stream.tensors:
        if t.role in ("input", "output"):
            lo, hi = t.ddr_addr, t.ddr_addr + t.view[0] * t.view[1] * t.row_stride
            if not len(stream.weights) <= lo <= hi <= stream.ddr_bytes:
                raise NPUError(
                    "ERR_BAD_STREAM", f"{t.role} {t.io_index} at DDR [{lo}, {hi}) lies outside the activation region"
                )
            tensor_spans.setdefault(t.role, []).append((t.io_index, lo, hi))
    for _, lo, hi in tensor_spans.get("input", []):
        ddr.update(lo, hi, lambda a, b, s: (_BEFORE,) + _NO_READERS)

    issued = [[] for _ in ENGINES]  # command indices issued to each engine, in order
    engine_of, pos_of, start_clock = [], [], []  # per command: engine index, position, vector clock
    issue_clock = (0,) * len(ENGINES)  # completed prefixes guaranteed when the previous command issued

    def happens_before(a: int, b_clock: tuple) -> bool:
        return a == _BEFORE or b_clock[engine_of[a]] > pos_of[a]

    for i, cmd in enumerate(cmds):
        if cmd.op == "END" and i != len(cmds) - 1:
            _fail(i, cmd, "END before the last command")
        if cmd.op not in ("END", "DMA_LOAD", "DMA_STORE") + COMPUTE_OPS:
            _fail(i, cmd, "unknown opcode")
        if cmd.args.get("pos_mode", 0) and limit:  # at p = 0, then the widest at the limit
            _check_static(i, cmd, stream, *_footprints(cmd, stream.config.alignment))
            cmd = at_position(cmd, limit)
        reads, writes = _footprints(cmd, stream.config.alignment)
        _check_static(i, cmd, stream, reads, writes)
        # Issue is in stream order, so what was complete at the previous issue still is; each wait
        # adds the forced prefix and everything that was complete when its last command started.
        clock = list(issue_clock)
        for e, k in cmd.waits.items():
            ei, n = ENGINES.index(e), len(issued[ENGINES.index(e)])
            if k < NO_WAIT and k < n:
                clock = [max(x, y) for x, y in zip(clock, start_clock[issued[ei][n - k - 1]])]
                clock[ei] = max(clock[ei], n - k)
        issue_clock = tuple(clock)
        if cmd.op == "END":
            open_ = [
                f"{e} ({len(issued[x]) - clock[x]} outstanding)"
                for x, e in enumerate(ENGINES)
                if clock[x] < len(issued[x])
            ]
            if open_:
                _fail(
                    i,
                    cmd,
                    f"does not wait for every command to complete: {', '.join(open_)}; "
                    "the runtime reads the outputs after END",
                )
            break
        # Own engine is in order: the previous command on it ended, with all it was ordered after.
        own = ENGINES.index(cmd.engine)
        if issued[own]:
            prev = issued[own][-1]
            clock = [max(x, y) for x, y in zip(clock, start_clock[prev])]
            clock[own] = len(issued[own])
        start = tuple(clock)
        engine_of.append(own)
        pos_of.append(len(issued[own]))
        start_clock.append(start)

        def hazard(what, other, kind, space, lo, hi):
            oe = engine_of[other]
            need = len(issued[oe]) - pos_of[other] - 1
            _fail(
                i,
                cmd,
                f"{kind}: its {what} ({space} [{lo}, {hi})) conflicts with command {other} "
                f"({cmds[other].op}{' ' + cmds[other].note if cmds[other].note else ''}), "
                f"which is not guaranteed to have ended when it starts (e.g. wait "
                f"{ENGINES[oe]} <= {need} on this command)",
            )

        for space, what, addr, rows, row_bytes, stride in reads:
            mem = sram if space == "SRAM" else ddr

            def read(lo, hi, s, what=what, space=space):
                if s[0] is _NEVER:
                    _fail(i, cmd, f"reads its {what} ({space} [{lo}, {hi})) that no earlier command wrote")
                if not happens_before(s[0], start):
                    hazard(what, s[0], "read-after-write", space, lo, hi)
                return s[: 1 + own] + (i,) + s[2 + own :]

            mem.update(addr, _end(cmd, addr, rows, row_bytes, stride, stream.config.alignment), read)
        for space, what, addr, rows, row_bytes, stride in writes:
            mem = sram if space == "SRAM" else ddr

            def write(lo, hi, s, what=what, space=space):
                if s[0] is not _NEVER and s[0] != i and not happens_before(s[0], start):
                    hazard(what, s[0], "write-after-write", space, lo, hi)
                for r in s[1:]:
                    if r not in (-1, i) and not happens_before(r, start):
                        hazard(what, r, "write-after-read", space, lo, hi)
                return (i,) + _NO_READERS

            mem.update(addr, _end(cmd, addr, rows, row_bytes, stride, stream.config.alignment), write)
        issued[own].append(i)

    # The runtime reads every output back after END: all of it must have been written.
    for io, lo, hi in tensor_spans.get("output", []):

        def check_written(a, b, s, io=io):
            if s[0] is _NEVER:
                raise NPUError("ERR_BAD_STREAM", f"output {io}: DDR [{a}, {b}) is never written")
            return s

        ddr.update(lo, hi, check_written)
