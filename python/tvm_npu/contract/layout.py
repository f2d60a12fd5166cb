"""The contract's records as struct layouts: the one packer and reader of the binary format in Python.

Everything here is derived from `spec.py`: struct formats, sizes, byte offsets, code tables. The
compiler's encoder (`stream.py`) packs its commands with it; the reference-NPU tests pack their
hand-written streams with it, operand by operand, without the compiler. A field added to the spec is
packed, unpacked and checked for by name everywhere at once.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence

from . import spec

VERSION_MAJOR = spec.VERSION_MAJOR
VERSION_MINOR = spec.MINORS[-1]["minor"]
_U32 = 0xFFFFFFFF
_FORMAT_CHARS = {"u32": "I", "u16": "H", "i32": "i", "f32": "f"}


class Record:
    """A fixed-size record of the spec (header, configuration block, tensor descriptor, ...).

    Fields pack in order, little-endian; an absent field packs as its fixed "value" or 0, an array
    field from a shorter sequence padded with zeros.
    """

    def __init__(self, table: dict):
        self.name = table["c"]
        self.fields = list(table["fields"])
        self.format = "<" + "".join(f"{f.get('count', '')}{_FORMAT_CHARS[f.get('type', 'u32')]}" for f in self.fields)
        self.size = struct.calcsize(self.format)
        self.offsets, at = {}, 0
        for f in self.fields:
            self.offsets[f["name"]] = at
            at += struct.calcsize("<" + _FORMAT_CHARS[f.get("type", "u32")]) * f.get("count", 1)

    @property
    def names(self) -> tuple:
        return tuple(f["name"] for f in self.fields)

    def _default(self, f: dict):
        value = f.get("value", 0)
        return NAMED_VALUES[value] if isinstance(value, str) else value

    def pack(self, values: Mapping | None = None, **more) -> bytes:
        values = {**(values or {}), **more}
        unknown = set(values) - set(self.names)
        if unknown:
            raise ValueError(f"{self.name} has no fields {sorted(unknown)}")
        flat = []
        for f in self.fields:
            value = values.get(f["name"], self._default(f))
            if "count" in f:
                items = [value] * f["count"] if isinstance(value, int) else list(value)
                if len(items) > f["count"]:
                    raise ValueError(f"{self.name}.{f['name']} has {f['count']} entries, got {len(items)}")
                flat += items + [0] * (f["count"] - len(items))
            else:
                flat.append(value)
        return struct.pack(self.format, *flat)

    def unpack(self, data: bytes, offset: int = 0) -> dict:
        flat = iter(struct.unpack_from(self.format, data, offset))
        return {
            f["name"]: tuple(next(flat) for _ in range(f["count"])) if "count" in f else next(flat) for f in self.fields
        }


HEADER = Record(spec.HEADER)
CONFIG = Record(spec.CONFIG)
TENSOR = Record(spec.TENSOR)
QPARAMS = Record(spec.QPARAMS)
COMMAND_WORDS = spec.COMMAND_WORDS
COMMAND_BYTES = 4 * COMMAND_WORDS

# The named values of the format (Python names); the generator writes the same into C++.
NAMED_VALUES = {
    "VERSION_MAJOR": VERSION_MAJOR,
    "VERSION_MINOR": VERSION_MINOR,
    "HEADER_BYTES": HEADER.size,
    "CONFIG_BYTES": CONFIG.size,
    "TENSOR_BYTES": TENSOR.size,
    "QPARAMS_BYTES": QPARAMS.size,
    "COMMAND_BYTES": COMMAND_BYTES,
    **{c["py"]: c["value"] for c in spec.CONSTANTS},
}
CONFIG_OFFSET = HEADER.size
TENSOR_TABLE_OFFSET = HEADER.size + CONFIG.size

OPCODES = {op["name"]: op["code"] for op in spec.OPCODES}
OPNAMES = {code: name for name, code in OPCODES.items()}
OPERANDS = {op["name"]: tuple(op["operands"]) for op in spec.OPCODES}
ENGINES = tuple(spec.WAITS["engines"])
NO_WAIT = spec.WAITS["no_wait"]
_WAIT_SHIFT, _WAIT_BITS = spec.WAITS["shift"], spec.WAITS["bits"]


def codes(enum: str) -> dict:
    """An enum of the spec as {name: code}, e.g. ``codes("pool_kind") == {"avg": 0, "max": 1}``."""
    return {v["name"]: v["code"] for v in spec.ENUMS[enum]["values"]}


def names(enum: str) -> dict:
    """An enum of the spec as {code: name}."""
    return {code: name for name, code in codes(enum).items()}


def command_words(op: str | int, operands: Mapping | Sequence = (), waits: Mapping | None = None) -> list:
    """The 32 words of a command.

    `op` is an opcode name or any code (a test's unknown opcode). `operands` maps operand names to
    values (missing ones 0; signed values stored as two's complement), or, for raw words, is a
    sequence. `waits` maps an engine (name or index in ENGINES) to the number of commands that may
    still be outstanding on it when this one issues; absent engines get NO_WAIT.
    """
    code = OPCODES[op] if isinstance(op, str) else op
    if isinstance(operands, Mapping):
        order = OPERANDS[op if isinstance(op, str) else OPNAMES[op]]
        unknown = set(operands) - set(order)
        if unknown:
            raise ValueError(f"{op} has no operands {sorted(unknown)}")
        body = [int(operands.get(name, 0)) & _U32 for name in order]
    else:
        body = [int(v) & _U32 for v in operands]
    if len(body) > COMMAND_WORDS - 1:
        raise ValueError(f"{op}: {len(body)} operand words, a command has {COMMAND_WORDS - 1}")
    head = code
    for i, engine in enumerate(ENGINES):
        k = (waits or {}).get(engine, (waits or {}).get(i, NO_WAIT))
        head |= k << (_WAIT_SHIFT + _WAIT_BITS * i)
    return [head] + body + [0] * (COMMAND_WORDS - 1 - len(body))


def pack_command(op: str | int, operands: Mapping | Sequence = (), waits: Mapping | None = None) -> bytes:
    """A command's bytes (see command_words)."""
    return struct.pack(f"<{COMMAND_WORDS}I", *command_words(op, operands, waits))


def unpack_command(data: bytes, offset: int = 0) -> tuple:
    """(opcode name, {operand: word}, {engine: wait}) of the command at `offset`; waits that are
    NO_WAIT are left out. An unknown opcode raises KeyError."""
    w = struct.unpack_from(f"<{COMMAND_WORDS}I", data, offset)
    name = OPNAMES[w[0] & 0xFF]
    mask = (1 << _WAIT_BITS) - 1
    waits = {e: (w[0] >> (_WAIT_SHIFT + _WAIT_BITS * i)) & mask for i, e in enumerate(ENGINES)}
    return name, dict(zip(OPERANDS[name], w[1:])), {e: k for e, k in waits.items() if k != NO_WAIT}


def crc32(data: bytes | bytearray) -> int:
    """The header's checksum of `data` (every byte after the header)."""
    return zlib.crc32(data) & _U32


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def assemble(
    config: Mapping | Sequence,
    tensors: Sequence[bytes],
    commands: Sequence[bytes],
    weights: bytes = b"",
    *,
    ddr_bytes: int,
    sram_bytes_used: int = 0,
    num_inputs: int = 0,
    num_outputs: int = 0,
    version: tuple = (VERSION_MAJOR, VERSION_MINOR),
    qparams: Sequence[tuple] | None = None,
    qparams_offset: int | None = None,
    state_bytes: int = 0,
    state_space: int = 0,
    sram_state_bytes: int = 0,
) -> bytes:
    """A stream blob from its packed parts (docs/npu.md section 6).

    `config` is the configuration block (a mapping by field, or its words in order); `tensors` and
    `commands` are packed records. `qparams` (format 1.3), one (scale, zero point) per tensor, is
    the quantization table, written right after the command table or, for tests of bad tables, at
    `qparams_offset` (a blob offset; one inside the header is recorded but not written). The weight
    region starts at the next WEIGHTS_ALIGNMENT boundary. `state_bytes` and `state_space` (format 1.4)
    are the header's state-region words, `sram_state_bytes` (format 1.5) its SRAM state area (docs/npu.md
    section 3).
    """
    block = CONFIG.pack(config if isinstance(config, Mapping) else dict(zip(CONFIG.names, config)))
    tables_end = TENSOR_TABLE_OFFSET + TENSOR.size * len(tensors) + COMMAND_BYTES * len(commands)
    table = b"".join(QPARAMS.pack(scale=s, zero_point=z) for s, z in qparams) if qparams is not None else b""
    at = (tables_end if qparams_offset is None else qparams_offset) if qparams is not None else 0
    weights_offset = align(max(tables_end, at + len(table)), NAMED_VALUES["WEIGHTS_ALIGNMENT"])
    body = bytearray(block + b"".join(tensors) + b"".join(commands))
    body += bytes(weights_offset - HEADER.size - len(body))
    if table and at >= HEADER.size:
        body[at - HEADER.size : at - HEADER.size + len(table)] = table
    body += bytes(weights)
    header = HEADER.pack(
        version_major=version[0],
        version_minor=version[1],
        num_tensors=len(tensors),
        num_commands=len(commands),
        weights_offset=weights_offset,
        weights_bytes=len(weights),
        ddr_bytes=ddr_bytes,
        sram_bytes_used=sram_bytes_used,
        num_inputs=num_inputs,
        num_outputs=num_outputs,
        crc32=crc32(body),
        qparams_offset=at,
        state_bytes=state_bytes,
        state_space=state_space,
        sram_state_bytes=sram_state_bytes,
    )
    return header + bytes(body)
