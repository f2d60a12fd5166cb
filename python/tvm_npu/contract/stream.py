"""The versioned binary command stream (docs/npu.md section 6): writer and reader.

The compiler emits a list of `Command` and `TensorDesc` records; `encode` packs them with the weight
region into the blob that the C++ runtime validates and executes. `decode` is the inverse, used by
reports and tests. Every layout, code and constant comes from the contract spec (spec.py, packed by
layout.py), which also generates include/tvm_npu/stream_format.h: the two sides cannot disagree.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import layout, spec
from .config import NPUConfig
from .errors import NPUError

VERSION_MAJOR, VERSION_MINOR = layout.VERSION_MAJOR, layout.VERSION_MINOR
OPCODES, OPNAMES, OPERANDS = layout.OPCODES, layout.OPNAMES, layout.OPERANDS  # operands in word order
ENGINES, NO_WAIT = layout.ENGINES, layout.NO_WAIT  # engines in the order of word 0's wait fields
MAGIC = layout.NAMED_VALUES["MAGIC"]
COMMAND_BYTES = layout.COMMAND_BYTES
HEADER_BYTES = layout.HEADER.size
CONFIG_BYTES = layout.CONFIG.size
TENSOR_BYTES = layout.TENSOR.size
QPARAMS_BYTES = layout.QPARAMS.size  # a quantization table entry: fp32 scale, int32 zero point
NO_BIAS = layout.NAMED_VALUES["NO_BIAS"]
SLICE_ALIGNMENT = layout.NAMED_VALUES["SLICE_ALIGNMENT"]  # CONV2D / POOL input and output addresses
NO_IO = layout.NAMED_VALUES["NO_IO"]
UNARY_TABLE_BYTES = layout.NAMED_VALUES["UNARY_TABLE_BYTES"]
NO_TABLE = layout.NAMED_VALUES["NO_TABLE"]
NO_PARAM = layout.NAMED_VALUES["NO_PARAM"]  # NORM: no gamma / no beta

# The engine of each compute opcode (a DMA command's engine is its channel's).
ENGINE_OF = {op["name"]: op["engine"] for op in spec.OPCODES if op["engine"] in ("mac", "vector")}
POOL_KINDS = layout.codes("pool_kind")
ELTWISE_KINDS = layout.codes("eltwise_kind")
B_MODES = layout.codes("b_mode")
UNARY_FUNCS = layout.codes("unary_func")
NORM_KINDS = layout.codes("norm_kind")
DTYPES = layout.codes("dtype")
DTYPE_NAMES = layout.names("dtype")
DTYPE_BYTES = {v["name"]: v["bytes"] for v in spec.ENUMS["dtype"]["values"]}
ROLES = layout.codes("role")
ROLE_NAMES = layout.names("role")
LAYOUTS = layout.codes("layout")
LAYOUT_NAMES = layout.names("layout")
ACTIVATIONS = layout.codes("activation")


def operand_dtype(args: dict, which: str) -> str:
    """The dtype name of an ELTWISE operand ("a", "b" or "out"): its own (format 1.2), else the command's."""
    return DTYPE_NAMES.get(args.get(f"{which}_dtype") or args.get("dtype", 0), "")


def two_byte_lanes(op: str, args: dict) -> bool:
    """Whether a vector command runs at the 2-byte rate (docs/npu.md section 5): fp16, or an ELTWISE with
    an int16 operand or result."""
    if DTYPE_NAMES.get(args.get("dtype", 0)) == "float16":
        return True
    return op == "ELTWISE" and "int16" in (operand_dtype(args, w) for w in ("a", "b", "out"))


def int4_weights(args: dict) -> str | None:
    """A CONV2D's group-wise int4 weight dtype ("int4" / "uint4", format 1.4), or None."""
    name = DTYPE_NAMES.get(args.get("w_dtype", 0) & 0xFF)
    return name if name in ("int4", "uint4") else None


def int4_block_bytes(args: dict, alignment: int) -> int:
    """The bytes of a CONV2D's int4 dequantization block (docs/npu.md section 6): the bias row (and the S
    row under int8), the fp16 scales [in_c / g][oc], then for uint4 the zero points [in_c / g][ceil(oc / 2)]
    from an aligned offset."""
    groups, oc = args["in_c"] // max(1, args["w_dtype"] >> 8 & 0xFF), args["oc"]
    vec = -(-oc * 4 // alignment) * alignment
    head = (2 if args["dtype"] == DTYPES["int8"] else 1) * vec
    if int4_weights(args) == "int4":
        return head + groups * oc * 2
    return head + -(-groups * oc * 2 // alignment) * alignment + groups * -(-oc // 2)


def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


@dataclass
class Command:
    """One command: an opcode, operands by name, and per-engine waits (engine -> max outstanding)."""

    op: str
    args: dict = field(default_factory=dict)
    waits: dict = field(default_factory=dict)
    note: str = ""  # which graph op this command belongs to; reports only, not encoded

    @property
    def engine(self) -> str | None:
        if self.op in ("DMA_LOAD", "DMA_STORE"):
            return f"dma{self.args['channel']}"
        return ENGINE_OF.get(self.op)

    def words(self) -> list[int]:
        # Signed operands (zero points, int8 clamps) are stored as two's-complement words.
        return layout.command_words(self.op, self.args, self.waits)


@dataclass
class TensorDesc:
    """An I/O, weight or bias tensor of the stream (the runtime stages I/O from host form)."""

    role: str
    io_index: int
    dtype: str
    host_dtype: str
    host_layout: str
    host_shape: tuple
    view: tuple  # device [N, H, W, C]
    ddr_addr: int
    row_stride: int
    # Quantized staging (format 1.3): host fp32 <-> device int8 / int16 with this scale and zero point.
    scale: float = 0.0
    zero_point: int = 0

    @property
    def quantized(self) -> bool:
        return self.role in ("input", "output") and self.host_dtype == "float32" and self.dtype in ("int8", "int16")

    def fields(self) -> dict:
        """The descriptor's fields by name (docs/npu.md section 6)."""
        return dict(
            role=ROLES[self.role],
            io_index=NO_IO if self.io_index < 0 else self.io_index,
            dtype=DTYPES[self.dtype],
            host_dtype=DTYPES[self.host_dtype],
            host_layout=LAYOUTS[self.host_layout],
            host_rank=len(self.host_shape),
            host_shape=list(self.host_shape),
            view=list(self.view),
            ddr_addr=self.ddr_addr,
            row_stride=self.row_stride,
        )


@dataclass
class Stream:
    """A decoded (or to-be-encoded) command stream."""

    config: NPUConfig
    tensors: list
    commands: list
    weights: bytes
    ddr_bytes: int
    sram_bytes_used: int
    version: tuple | None = None  # None: the lowest the commands allow (written_minor)
    info: dict = field(default_factory=dict)  # the planner's statistics for reports; not encoded
    state_bytes: int = 0  # format 1.4: the state region after ddr_bytes (docs/npu.md section 3)
    state_space: int = 0  # format 1.4: 0 = the module's own state; k = shared with streams saying k
    sram_state_bytes: int = 0  # format 1.5: the SRAM state area, the top of SRAM kept across calls

    @property
    def num_inputs(self) -> int:
        return sum(t.role in ("input", "position") for t in self.tensors)  # a position is an input (1.4)

    @property
    def num_outputs(self) -> int:
        return sum(t.role == "output" for t in self.tensors)


# The minor the compiler wrote before format 1.4: a stream that uses nothing newer still says 1.3, so a
# deployed 1.3 runtime keeps running it and its bytes stay what they were.
_FLOOR_MINOR = 3
_SINCE = {op["name"]: (op.get("since", 0), op.get("operands_since", {})) for op in spec.OPCODES}
# Enum values newer than their operand (UNARY's silu and gelu_tanh, 1.4): opcode -> operand -> code -> minor.
_VALUE_SINCE = {
    op["name"]: {
        operand: {v["code"]: v["since"] for v in spec.ENUMS[enum]["values"] if "since" in v}
        for operand, enum in op.get("enums", {}).items()
    }
    for op in spec.OPCODES
}


def written_minor(commands) -> int:
    """The stream format minor the compiler writes: 1.3, or the newest minor whose opcode, non-zero
    appended operand or enum value a command uses (a 1.4 operand left 0 keeps the older meaning, so it
    needs no 1.4)."""
    minor = _FLOOR_MINOR
    for cmd in commands:
        since, operands = _SINCE[cmd.op]
        used = [m for name, m in operands.items() if cmd.args.get(name, 0)]
        values = [codes.get(cmd.args.get(name), 0) for name, codes in _VALUE_SINCE[cmd.op].items()]
        minor = max([minor, since, *used, *values])
    return minor


# Format 1.4's state region and position register (docs/npu.md section 3).
_STATE_MINOR = 4
_ADDRESS_SPACE = 1 << 32  # DDR addresses are 32 bits


# Format 1.5's SRAM state area: the header word, the role sram_state, a DMA's pos_mode bit 2.
_SRAM_STATE_MINOR = 5


# Format 1.8's head slices: a MATMUL operand address or batch stride off the alignment (16 bytes is enough),
# or batches that interleave within each row (a batch stride below one batch's rows x row stride). Heads of
# 64 fp16 (128 bytes) are aligned, and their batches still interleave: a 1.7 runtime would refuse them.
_HEAD_SLICES_MINOR = 8
_HEAD_SLICE_OPERANDS = ("a_addr", "b_addr", "out_addr", "a_bstride", "b_bstride", "out_bstride")


def _interleaved(a: dict) -> bool:
    """Whether a MATMUL's batches of some operand are not apart (docs/npu.md section 3, head slices)."""
    b_batches = (a["batch"] - 1) // max(a.get("b_group", 1), 1) + 1
    b_rows = a["n"] if a.get("b_transposed", 0) else a["k"]
    return (a["batch"] > 1 and (a["a_bstride"] < a["m"] * a["a_stride"] or a["out_bstride"] < a["m"] * a["out_stride"])
            or b_batches > 1 and a["b_bstride"] < b_rows * a["b_stride"])  # fmt: skip


def _head_slices(stream: Stream) -> bool:
    align = stream.config.alignment
    return any(
        c.op == "MATMUL" and (any(c.args.get(k, 0) % align for k in _HEAD_SLICE_OPERANDS) or _interleaved(c.args))
        for c in stream.commands
    )


def _stream_minor(stream: Stream) -> int:
    stateful = stream.state_bytes or stream.state_space or any(t.role in ("state", "position") for t in stream.tensors)
    sram_state = (
        stream.sram_state_bytes
        or any(t.role == "sram_state" for t in stream.tensors)
        or any(c.op in ("DMA_LOAD", "DMA_STORE") and c.args.get("pos_mode", 0) & 4 for c in stream.commands)
    )
    return max(
        written_minor(stream.commands),
        _STATE_MINOR if stateful else 0,
        _SRAM_STATE_MINOR if sram_state else 0,
        _HEAD_SLICES_MINOR if _head_slices(stream) else 0,
    )


def at_position(cmd: Command, p: int) -> Command:
    """The command a `pos_mode` command runs as at position `p` (its effective operands, docs/npu.md
    section 3); a command with pos_mode 0 is returned as it is."""
    mode = cmd.args.get("pos_mode", 0)
    if not mode or not p:
        return cmd
    a = dict(cmd.args)
    if cmd.op in ("DMA_LOAD", "DMA_STORE"):
        if mode & 1:
            a["ddr_addr"] += p * a["ddr_stride"]
        if mode & 2:
            a["rows"] += p
        if mode & 4:  # format 1.5: a row of an SRAM state tensor
            a["sram_addr"] += p * a["sram_stride"]
    elif cmd.op == "SOFTMAX":
        a["row_elems"] += p
    elif cmd.op == "MATMUL":
        a["n"] += p if mode & 1 else 0
        a["k"] += p if mode & 2 else 0
    return Command(cmd.op, a, cmd.waits, cmd.note)


def check_state_fits(ddr_bytes: int, state_bytes: int, what: str = "the KV cache") -> None:
    """ERR_MEMORY_OVERFLOW unless a stream's DDR (weights and activations, `ddr_bytes`) and its state region
    (`state_bytes`, reserved at compile time) fit the 2^32 bytes its 32-bit DDR addresses reach."""
    if ddr_bytes + state_bytes > _ADDRESS_SPACE:
        raise NPUError(
            "ERR_MEMORY_OVERFLOW",
            f"{what} needs {state_bytes} bytes of state next to the stream's {ddr_bytes} bytes of DDR: "
            f"{ddr_bytes + state_bytes} bytes needed, {_ADDRESS_SPACE} available (32-bit DDR addresses); "
            f"lower max_context",
        )


def encode(stream: Stream) -> bytes:
    """Pack a stream into its binary form (the last command must be END)."""
    if not stream.commands or stream.commands[-1].op != "END":
        stream.commands = list(stream.commands) + [Command("END")]
    qparams = None
    if any(t.quantized for t in stream.tensors):  # the quantization table follows the commands
        qparams = [(t.scale, t.zero_point) if t.quantized else (0.0, 0) for t in stream.tensors]
    return layout.assemble(
        stream.config.block(),
        [layout.TENSOR.pack(t.fields()) for t in stream.tensors],
        [layout.pack_command(c.op, c.args, c.waits) for c in stream.commands],
        bytes(stream.weights),
        ddr_bytes=stream.ddr_bytes,
        sram_bytes_used=stream.sram_bytes_used,
        num_inputs=stream.num_inputs,
        num_outputs=stream.num_outputs,
        version=stream.version or (VERSION_MAJOR, _stream_minor(stream)),
        qparams=qparams,
        state_bytes=stream.state_bytes,
        state_space=stream.state_space,
        sram_state_bytes=stream.sram_state_bytes,
    )


def read_header(blob: bytes) -> dict:
    """The header of a blob whose structure checks out (magic, version, sizes against its length, CRC);
    NPUError(ERR_BAD_STREAM) otherwise. Its tables may still hold anything (an unknown opcode, ...)."""
    if len(blob) < HEADER_BYTES + CONFIG_BYTES:
        raise NPUError("ERR_BAD_STREAM", f"stream of {len(blob)} bytes is shorter than its header")
    h = layout.HEADER.unpack(blob)
    if h["magic"] != MAGIC:
        raise NPUError("ERR_BAD_STREAM", "not an NPU command stream (bad magic)")
    major, minor = h["version_major"], h["version_minor"]
    if major != VERSION_MAJOR or minor > VERSION_MINOR:
        raise NPUError(
            "ERR_BAD_STREAM",
            f"stream format version {major}.{minor}; this tvm_npu reads {VERSION_MAJOR}.0 to "
            f"{VERSION_MAJOR}.{VERSION_MINOR}: recompile the model with this version",
        )
    num_tensors, num_commands = h["num_tensors"], h["num_commands"]
    weights_offset, weights_bytes = h["weights_offset"], h["weights_bytes"]
    need = HEADER_BYTES + CONFIG_BYTES + num_tensors * TENSOR_BYTES + num_commands * COMMAND_BYTES
    if need > weights_offset or weights_offset + weights_bytes != len(blob):
        raise NPUError("ERR_BAD_STREAM", "stream sizes disagree with its length (truncated?)")
    if layout.crc32(blob[HEADER_BYTES:]) != h["crc32"]:
        raise NPUError("ERR_BAD_STREAM", "stream checksum mismatch (damaged artifact)")
    return h


def decode(blob: bytes) -> Stream:
    """Parse a blob (structure only; the C++ runtime does the full validation before running it)."""
    blob = bytes(blob)
    h = read_header(blob)
    major, minor = h["version_major"], h["version_minor"]
    num_tensors, num_commands, weights_offset = h["num_tensors"], h["num_commands"], h["weights_offset"]
    config = NPUConfig(name="from-stream", **layout.CONFIG.unpack(blob, layout.CONFIG_OFFSET))
    tensors, off = [], layout.TENSOR_TABLE_OFFSET
    for _ in range(num_tensors):
        w = layout.TENSOR.unpack(blob, off)
        off += TENSOR_BYTES
        tensors.append(
            TensorDesc(
                ROLE_NAMES[w["role"]],
                -1 if w["io_index"] == NO_IO else w["io_index"],
                DTYPE_NAMES[w["dtype"]],
                DTYPE_NAMES[w["host_dtype"]],
                LAYOUT_NAMES[w["host_layout"]],
                w["host_shape"][: w["host_rank"]],
                w["view"],
                w["ddr_addr"],
                w["row_stride"],
            )
        )
    if h["qparams_offset"]:  # the quantization table (format 1.3)
        for i, t in enumerate(tensors):
            q = layout.QPARAMS.unpack(blob, h["qparams_offset"] + QPARAMS_BYTES * i)
            t.scale, t.zero_point = q["scale"], q["zero_point"]
    commands = []
    for _ in range(num_commands):
        commands.append(Command(*layout.unpack_command(blob, off)))
        off += COMMAND_BYTES
    stream = Stream(
        config, tensors, commands, blob[weights_offset:], h["ddr_bytes"], h["sram_bytes_used"], (major, minor)
    )
    stream.state_bytes, stream.state_space = h["state_bytes"], h["state_space"]
    stream.sram_state_bytes = h["sram_state_bytes"]
    return stream
