"""Part of stage 4 (plan): the vector-unit commands of format 1.1 (ELTWISE, UNARY, SOFTMAX) and 1.4 (NORM)
for one row tile, and their SRAM footprints (docs/npu.md section 6). plan.py places and tiles them like ADD:
a tile is a band of rows; a per-channel b is one row read by every tile; a constant b, an int8 table or a
softmax mask (format 1.4) is a constant block loaded into the layer's weight slot, as are a NORM's gamma
and beta rows.
"""

from __future__ import annotations

from ...contract.config import NPUConfig
from ...contract.stream import (
    B_MODES,
    DTYPE_BYTES,
    DTYPES,
    ELTWISE_KINDS,
    NO_PARAM,
    NO_TABLE,
    NORM_KINDS,
    UNARY_FUNCS,
    UNARY_TABLE_BYTES,
    Command,
    f32_bits,
)
from .sram import align

VECTOR_OPS = ("ELTWISE", "UNARY", "SOFTMAX", "NORM", "ROPE", "GN_STATS", "GN_APPLY")


def binary_requant(layer) -> dict:
    """The int8 operands of a two-input command (ADD, ELTWISE): zero points, integer multipliers of both
    inputs and their shift (docs/npu.md section 2)."""
    a_mult, b_mult = (int(m) for m in layer.mult[:2])
    return {
        "a_zp": layer.in_zps[0],
        "b_zp": layer.in_zps[1],
        "out_zp": layer.out_zp,
        "a_mult": a_mult,
        "b_mult": b_mult,
        "shift": layer.shift,
    }


def int8_io_operands(layer) -> dict:
    """The in / out scales and zero points of an int8 SOFTMAX or NORM (format 1.4; lower/softmax.int8_io)."""
    s_x, s_y = (float(v) for v in layer.scale)
    return dict(in_zp=layer.in_zps[0], in_scale=f32_bits(s_x), out_zp=layer.out_zp, out_scale=f32_bits(s_y))


def mask_stride(cfg: NPUConfig, layer) -> int:
    """Bytes between a SOFTMAX mask's rows in the weight slot: one aligned fp16 row each."""
    return align(layer.const.shape[1] * 2, cfg.alignment)


def vector_command(
    cfg: NPUConfig, layer, t, ins: list, srcs: list, dst, out_addr: int, out_stride: int, w_slot, common: dict
) -> Command:
    """The ELTWISE, UNARY, SOFTMAX or NORM command of one row tile; a constant b / int8 table / gamma and
    beta sit in the weight slot."""
    int8 = layer.dtype == "int8"
    rows = dict(out_addr=out_addr, out_stride=out_stride, rows=t.out_rows, row_elems=dst.view[2] * dst.view[3])
    if layer.kind == "softmax":  # rows are softmax rows: a tile is any band of them
        a = dict(rows, dtype=common["dtype"], in_addr=ins[0], in_stride=srcs[0].row_stride)
        if layer.softmax_scale:  # format 1.4; an unscaled, unmasked softmax keeps 1.1's operands
            a["scale"] = f32_bits(layer.softmax_scale)
        if layer.const is not None:  # the mask rows in the weight slot; tile row 0 is global row out_r0
            n = layer.const.shape[0]
            a.update(mask_addr=w_slot, mask_stride=mask_stride(cfg, layer), mask_rows=n, mask_row0=t.out_r0 % n)
        if int8:  # format 1.4: the codes' scales and zero points
            a.update(int8_io_operands(layer))
        return Command("SOFTMAX", a, {}, layer.name)
    if layer.kind == "rope":  # a tile is any band of rows: its first row sets the table row (cs_row0)
        return Command("ROPE", rope_operands(cfg, layer, t, rows, common, ins, srcs, w_slot), {}, layer.name)
    if layer.kind == "norm":  # rows are normalized on their own: a tile is any band of them
        return Command("NORM", norm_operands(cfg, layer, rows, common, ins, srcs, w_slot), {}, layer.name)
    if layer.kind == "unary":
        a = dict(
            rows,
            dtype=common["dtype"],
            func=UNARY_FUNCS[layer.func],
            in_addr=ins[0],
            in_stride=srcs[0].row_stride,
            table_addr=w_slot if int8 else NO_TABLE,
            alpha=0 if int8 else f32_bits(layer.alpha),
        )
        return Command("UNARY", a, {}, layer.name)
    b_dtype = layer.dtypes[1] if layer.dtypes else layer.dtype
    elem = DTYPE_BYTES[b_dtype]
    if layer.const is not None:  # from the weight slot: one aligned row
        b_addr, b_stride = w_slot, align(layer.const.size * elem, cfg.alignment)
    else:
        b_addr, b_stride = ins[1], srcs[1].row_stride
    a = dict(
        common,
        **rows,
        kind=ELTWISE_KINDS[layer.func],
        b_mode=B_MODES[layer.b_mode],
        a_addr=ins[0],
        a_stride=srcs[0].row_stride,
        b_addr=b_addr,
        b_stride=b_stride,
        channels=dst.view[3] if layer.b_mode == "channel" else 0,
    )
    if int8:
        a.update(binary_requant(layer))
        # Format 1.2: an operand's own dtype where it is not the command's (0 keeps 1.1's meaning).
        for which, d in zip(("a", "b", "out"), layer.dtypes):
            a[f"{which}_dtype"] = 0 if d == layer.dtype else DTYPES[d]
    return Command("ELTWISE", a, {}, layer.name)


def norm_operands(cfg: NPUConfig, layer, rows: dict, common: dict, ins: list, srcs: list, w_slot) -> dict:
    """NORM's operands: gamma, then beta, one aligned fp32 row each in the weight slot (constants.constant_bytes
    lays them out so), 0xFFFFFFFF for the one the op does not apply."""
    prm = align(rows["row_elems"] * 4, cfg.alignment)
    addr = {name: w_slot + k * prm for k, name in enumerate(layer.norm_params)}
    io = int8_io_operands(layer) if layer.dtype == "int8" else {}
    return dict(
        rows,
        **io,
        dtype=common["dtype"],
        kind=NORM_KINDS[layer.func],
        in_addr=ins[0],
        in_stride=srcs[0].row_stride,
        gamma_addr=addr.get("gamma", NO_PARAM),
        beta_addr=addr.get("beta", NO_PARAM),
        eps=f32_bits(layer.alpha),
    )


def rope_operands(cfg: NPUConfig, layer, t, rows: dict, common: dict, ins: list, srcs: list, w_slot) -> dict:
    """ROPE's operands: the tables in the weight slot (constants: cos rows then sin rows, each aligned,
    constants.constant_bytes) or the layer's second and third inputs; row r of the tile is row t.out_r0 + r
    of x, which reads table row (t.out_r0 + r) % rope_rows."""
    if layer.const is not None:
        stride = align(rows["row_elems"] * 2, cfg.alignment)
        cos, sin = w_slot, w_slot + layer.rope_rows * stride
    else:
        stride, cos, sin = srcs[1].row_stride, ins[1], ins[2]
    return dict(
        rows,
        dtype=common["dtype"],
        in_addr=ins[0],
        in_stride=srcs[0].row_stride,
        cos_addr=cos,
        sin_addr=sin,
        cs_stride=stride,
        cs_rows=layer.rope_rows,
        cs_row0=t.out_r0 % layer.rope_rows,
    )


def vector_footprint(cfg: NPUConfig, cmd: Command) -> tuple[list, list]:
    """(reads, writes) in SRAM of an ELTWISE, UNARY, SOFTMAX or NORM command, as (space, lo, hi) ranges."""
    a = cmd.args

    def span(addr, rows, stride):
        return ("sram", addr, addr + rows * stride)

    if cmd.op in ("GN_STATS", "GN_APPLY"):
        return _gn_footprint(cfg, cmd)
    out = [span(a["out_addr"], a["rows"], a["out_stride"])]
    if cmd.op in ("UNARY", "SOFTMAX"):
        reads = [span(a["in_addr"], a["rows"], a["in_stride"])]
        if a.get("mask_rows", 0):
            reads.append(span(a["mask_addr"], a["mask_rows"], a["mask_stride"]))
        if a.get("table_addr", NO_TABLE) != NO_TABLE:
            reads.append(span(a["table_addr"], 1, align(UNARY_TABLE_BYTES, cfg.alignment)))
        return reads, out
    if cmd.op == "ROPE":  # both whole tables: any row may read any table row
        tables = [span(a[k], a["cs_rows"], a["cs_stride"]) for k in ("cos_addr", "sin_addr")]
        return [span(a["in_addr"], a["rows"], a["in_stride"]), *tables], out
    if cmd.op == "NORM":
        prm = align(a["row_elems"] * 4, cfg.alignment)
        params = [span(a[k], 1, prm) for k in ("gamma_addr", "beta_addr") if a[k] != NO_PARAM]
        return [span(a["in_addr"], a["rows"], a["in_stride"]), *params], out
    b_rows = a["rows"] if a["b_mode"] == B_MODES["same"] else 1  # a broadcast b is one row
    return [span(a["a_addr"], a["rows"], a["a_stride"]), span(a["b_addr"], b_rows, a["b_stride"])], out


def _gn_footprint(cfg: NPUConfig, cmd: Command) -> tuple[list, list]:
    """GN_STATS / GN_APPLY (format 1.7): the tile, the G records (12 bytes each); APPLY also gamma and beta."""
    a = cmd.args

    def span(addr, rows, stride):
        return ("sram", addr, addr + rows * stride)

    pixels = a["rows"] * a["in_stride"]
    stats = [span(a["stats_addr"], 1, 12 * a["groups"])]
    if cmd.op == "GN_STATS":
        return [span(a["in_addr"], 1, pixels), *stats], stats
    prm = align(a["channels"] * 4, cfg.alignment)
    params = [span(a[k], 1, prm) for k in ("gamma_addr", "beta_addr") if a[k] != NO_PARAM]
    return [span(a["in_addr"], 1, pixels), *stats, *params], [span(a["out_addr"], a["rows"], a["out_stride"])]
