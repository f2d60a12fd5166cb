"""The text form of a command stream that `disasm` writes and `asm` reads (docs/disasm.md): its values.

Every field and operand a listing names, and its width, comes from the contract (contract/spec.py
through contract/layout.py); this module only says how one value is written as text and read back:

- an address operand (a name ending in ``_addr``) as region + offset: ``sram+0x800`` for SRAM, and for
  DDR ``weights+0x1200`` (the weight region ``[0, weights_bytes)``), ``act+0x40`` (the activation
  region ``[weights_bytes, ddr_bytes)``) or ``state+0x40`` (format 1.4's state region after ddr_bytes);
  the sentinel 0xFFFFFFFF (kNoBias, kNoTable, kNoParam) as ``none``;
- an enum operand or field (the spec's "enums" of an opcode, or an enum whose "field" names it, e.g.
  every ``*dtype`` and ``act``) by its value's name, a code outside the enum whose low byte is one as
  ``name|0xHI00`` (CONV2D's ``w_dtype`` int4 | g << 8);
- an operand that holds fp32 bits (spec.FP32_OPERANDS: scales, fp16 clamps, eps) as the number with
  an `f` suffix (`0.0123f`; its bits in hex when it is not finite), which any operand also accepts;
- any other word in decimal, a word within 2^20 of 2^32 as a negative number (zero points, int8
  clamps, two's complement), the rest in hex;
- an fp32 record field (a quantization scale) as Python writes the float, an array as ``1x3x16x16``.

A listing can be wrong in many ways; each is an NPUError(ERR_BAD_STREAM) that names the line.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping

from ..contract import layout, spec
from ..contract.errors import NPUError

U32 = 0xFFFFFFFF
NONE = "none"
_SMALL = 1 << 20
_WIDTH_BITS = {"u32": 32, "u16": 16, "i32": 32, "f32": 32}

# Enums named by a field rather than an opcode's "enums": "`dtype`, `host_dtype`, ..." and "`act`".
_FIELD_ENUMS = {
    name: enum
    for enum, table in spec.ENUMS.items()
    if not re.search(r"`[A-Z_0-9]+`", table["field"])  # "`POOL` `kind`": an opcode's own enum
    for name in re.findall(r"`(\w+)`", table["field"])
}
OP_SPECS = {op["name"]: op for op in spec.OPCODES}


class ListingError(NPUError):
    """A listing that does not assemble: ERR_BAD_STREAM naming the line and what is wrong."""

    def __init__(self, line: int, what: str):
        super().__init__("ERR_BAD_STREAM", f"listing line {line}: {what}")
        self.line = line


def enum_of(op: str | None, name: str) -> str | None:
    """The spec enum an operand (of opcode `op`) or a record field (op None) holds, or None."""
    if op is not None and name in OP_SPECS[op].get("enums", {}):
        return OP_SPECS[op]["enums"][name]
    return _FIELD_ENUMS.get(name)


class Regions:
    """A stream's DDR regions (docs/npu.md section 3), to write and read addresses as region + offset."""

    def __init__(self, weights_bytes: int, ddr_bytes: int, state_bytes: int):
        self.bases = {"weights": 0, "act": weights_bytes, "state": ddr_bytes}
        self.ends = {"weights": weights_bytes, "act": ddr_bytes, "state": ddr_bytes + state_bytes}

    def ddr(self, addr: int) -> str:
        for name in ("weights", "act", "state"):
            if self.bases[name] <= addr < self.ends[name]:
                return f"{name}+{addr - self.bases[name]:#x}"
        return f"{addr:#x}"  # past every region: the verifier says so; the listing keeps the value


def word(value: int) -> str:
    """A plain operand word as text (see the module docstring)."""
    if value < _SMALL:
        return str(value)
    if value > U32 - _SMALL:
        return str(value - (1 << 32))
    return f"{value:#x}"


def fp32_operand(op: str, name: str, args: Mapping) -> bool:
    """Whether operand `name` of a command (`op`, its operands `args`) holds fp32 bits (spec.FP32_OPERANDS)."""
    kinds = spec.FP32_OPERANDS.get(op, {})
    return name in kinds and kinds[name] in (None, layout.names("dtype").get(args.get("dtype", 0)))


def format_value(op: str | None, name: str, value: int, regions: Regions, args: Mapping | None = None) -> str:
    """An operand (of opcode `op`, whose operands are `args`) or integer record field `name` as listing text."""
    if op is not None and args is not None and fp32_operand(op, name, args):
        number = struct.unpack("<f", struct.pack("<I", value))[0]
        text = format_f32(number)
        return text if text.startswith("0x") else text + "f"  # not finite: its bits
    if name.endswith("_addr"):
        if value == U32:
            return NONE
        return regions.ddr(value) if name == "ddr_addr" else f"sram+{value:#x}"
    enum = enum_of(op, name)
    if enum is not None:
        names = layout.names(enum)
        if value in names:
            return names[value]
        if value > 0xFF and value & 0xFF in names:
            return f"{names[value & 0xFF]}|{value & ~0xFF:#x}"
    return word(value)


def format_f32(value: float) -> str:
    """An fp32 field: the shortest decimal that reads back to it, or its bits when not finite."""
    if value != value or value in (float("inf"), float("-inf")):
        return f"{struct.unpack('<I', struct.pack('<f', value))[0]:#x}"
    return repr(value)


def _int(text: str) -> int:
    """An integer, or an fp32 number written with an `f` suffix (`0.5f`) as its bit pattern."""
    try:
        return int(text, 0)
    except ValueError:
        if not text.endswith("f"):
            raise
        try:
            return struct.unpack("<I", struct.pack("<f", float(text[:-1])))[0]
        except (OverflowError, struct.error):
            raise ValueError(text) from None


def parse_value(
    text: str, op: str | None, name: str, regions: Regions, line: int, bits: int = 32, enum: str | None = None
) -> int:
    """The integer a listing's `text` gives operand or field `name` (of enum `enum`, by default the one
    `enum_of` finds), checked against its width."""
    try:
        if text == NONE and name.endswith("_addr"):
            return U32
        if "+" in text and name.endswith("_addr"):
            region, offset = text.split("+", 1)
            space = "sram" if name != "ddr_addr" else None
            if region == "sram" and space == "sram":
                value = _int(offset)
            elif region in regions.bases and space is None:
                value = regions.bases[region] + _int(offset)
            else:
                where = "sram" if space else "weights, act or state"
                raise ListingError(line, f"{name}={text}: {region!r} is not its address space (give {where}+OFFSET)")
        else:
            value = _enum_value(text, enum or enum_of(op, name), name, line)
    except ValueError:
        raise ListingError(line, f"{name}={text!r} is not a number, a name of its enum or region+offset") from None
    low, high = -(1 << (bits - 1)), (1 << bits) - 1
    if not low <= value <= high:
        raise ListingError(line, f"{name}={text} is out of range for its {bits}-bit field ({low}..{high})")
    return value & high


def _enum_value(text: str, enum: str | None, name: str, line: int) -> int:
    head, _, rest = text.partition("|")
    if enum is not None and not head.lstrip("-").isdigit() and not head.startswith("0x"):
        codes = layout.codes(enum)
        if head not in codes:
            raise ListingError(line, f"{name}={text}: {head!r} is not a value of {enum} ({', '.join(codes)})")
        return codes[head] | (_int(rest) if rest else 0)
    return _int(text)


def parse_f32(text: str, name: str, line: int) -> float:
    """An fp32 field from a listing: a decimal number, or its bit pattern in hex."""
    try:
        if text.lower().startswith("0x"):
            return struct.unpack("<f", struct.pack("<I", int(text, 16)))[0]
        value = float(text)
        struct.pack("<f", value)  # an fp32's range: OverflowError otherwise
        return value
    except (ValueError, OverflowError, struct.error):
        raise ListingError(line, f"{name}={text!r} is not an fp32 number (a decimal or its bits as 0x...)") from None


def field_bits(record_field: dict) -> int:
    """The width of a record field of the spec (u32 unless it says u16, i32, f32)."""
    return _WIDTH_BITS[record_field.get("type", "u32")]


class Region:
    """One NPU region's stream as its parts: what a listing shows and what `layout.assemble` packs.

    `header` holds the header words a listing states (the version and what `layout.assemble` takes);
    the rest (sizes, offsets, the CRC) follow from the parts. `config` and each of `tensors` are the
    spec records' fields by name, `qparams` the quantization table or None, `commands` 32 words each.
    """

    # The header words `layout.assemble` takes (the rest follow from the parts).
    SETTABLE = (
        *("version_major", "version_minor", "ddr_bytes", "sram_bytes_used"),
        *("num_inputs", "num_outputs", "state_bytes", "state_space", "sram_state_bytes"),
    )

    def __init__(self, symbol: str, header: dict, config: dict, tensors: list, qparams, commands: list, weights):
        self.symbol, self.header, self.config, self.tensors = symbol, header, config, tensors
        self.qparams, self.commands, self.weights = qparams, commands, bytes(weights)

    @classmethod
    def from_bytes(cls, symbol: str, blob: bytes) -> Region:
        from ..contract.stream import read_header

        h = read_header(blob)  # the structure and CRC checks: ERR_BAD_STREAM on a damaged blob
        tensors, at = [], layout.TENSOR_TABLE_OFFSET
        for _ in range(h["num_tensors"]):
            tensors.append(layout.TENSOR.unpack(blob, at))
            at += layout.TENSOR.size
        commands = []
        for _ in range(h["num_commands"]):
            commands.append(list(struct.unpack_from(f"<{layout.COMMAND_WORDS}I", blob, at)))
            at += layout.COMMAND_BYTES
        qparams = None
        if h["qparams_offset"]:
            size = layout.QPARAMS.size
            qparams = [layout.QPARAMS.unpack(blob, h["qparams_offset"] + size * i) for i in range(len(tensors))]
        config = layout.CONFIG.unpack(blob, layout.CONFIG_OFFSET)
        header = {k: h[k] for k in cls.SETTABLE}
        return cls(symbol, header, config, tensors, qparams, commands, blob[h["weights_offset"] :])

    def to_bytes(self) -> bytes:
        h = self.header
        return layout.assemble(
            self.config,
            [layout.TENSOR.pack(t) for t in self.tensors],
            [struct.pack(f"<{layout.COMMAND_WORDS}I", *w) for w in self.commands],
            self.weights,
            ddr_bytes=h["ddr_bytes"],
            sram_bytes_used=h["sram_bytes_used"],
            num_inputs=h["num_inputs"],
            num_outputs=h["num_outputs"],
            version=(h["version_major"], h["version_minor"]),
            qparams=None if self.qparams is None else [(q["scale"], q["zero_point"]) for q in self.qparams],
            state_bytes=h["state_bytes"],
            state_space=h["state_space"],
            sram_state_bytes=h["sram_state_bytes"],
        )

    def ddr_regions(self) -> Regions:
        return Regions(len(self.weights), self.header["ddr_bytes"], self.header["state_bytes"])
