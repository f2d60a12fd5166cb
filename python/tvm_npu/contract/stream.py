"""The versioned binary command stream (docs/npu.md section 6): writer and reader.

The compiler emits a list of `Command` and `TensorDesc` records; `encode` packs them with the weight
region into the blob that the C++ runtime validates and executes. `decode` is the inverse, used by
reports and tests. The layout constants here and in include/tvm_npu/stream_format.h must agree.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from .config import NPUConfig
from .errors import NPUError

MAGIC = 0x5355504E  # b"NPUS"
VERSION_MAJOR = 1
# 1.1: pixel strides of CONV2D and POOL (0: packed, as in 1.0); ELTWISE, UNARY, SOFTMAX.
# 1.2: the int16 dtype; ELTWISE's per-operand dtypes (a_dtype, b_dtype, out_dtype; 0 = dtype).
# 1.3: quantized staging (host fp32 <-> device int8 / int16) and the quantization table (qparams_offset).
VERSION_MINOR = 3
HEADER_BYTES = 64
CONFIG_BYTES = 64
TENSOR_BYTES = 64
COMMAND_BYTES = 128
QPARAMS_BYTES = 8  # a quantization table entry: fp32 scale, int32 zero point
NO_BIAS = 0xFFFFFFFF
SLICE_ALIGNMENT = 16  # CONV2D / POOL input and output addresses: one SRAM beat (channel slices)
NO_IO = 0xFFFFFFFF

# Opcodes and their operand names, in word order (words 1..).
OPCODES = {"END": 0x00, "DMA_LOAD": 0x01, "DMA_STORE": 0x02, "CONV2D": 0x10, "ADD": 0x20, "POOL": 0x21,
           "ELTWISE": 0x22, "UNARY": 0x23, "SOFTMAX": 0x24}
OPERANDS = {
    "END": (),
    "DMA_LOAD": ("channel", "ddr_addr", "sram_addr", "rows", "row_bytes", "ddr_stride", "sram_stride"),
    "DMA_STORE": ("channel", "sram_addr", "ddr_addr", "rows", "row_bytes", "sram_stride", "ddr_stride"),
    "CONV2D": ("dtype", "in_addr", "in_h", "in_w", "in_c", "in_stride", "w_addr", "w_stride", "kh", "kw",
               "oc", "bias_addr", "out_addr", "out_h", "out_w", "out_stride", "stride_h", "stride_w",
               "dil_h", "dil_w", "pad_top", "pad_left", "act", "clip_lo", "clip_hi", "groups", "in_zp",
               "out_zp", "in_pstride", "out_pstride"),
    "ADD": ("dtype", "a_addr", "a_stride", "b_addr", "b_stride", "out_addr", "out_stride", "rows",
            "row_elems", "act", "clip_lo", "clip_hi", "a_zp", "b_zp", "out_zp", "a_mult", "b_mult", "shift"),
    "POOL": ("dtype", "kind", "in_addr", "in_h", "in_w", "c", "in_stride", "out_addr", "out_h", "out_w",
             "out_stride", "kh", "kw", "stride_h", "stride_w", "pad_top", "pad_left", "act", "clip_lo",
             "clip_hi", "in_zp", "out_zp", "scale", "in_pstride", "out_pstride"),
    "ELTWISE": ("dtype", "kind", "b_mode", "a_addr", "a_stride", "b_addr", "b_stride", "out_addr",
                "out_stride", "rows", "row_elems", "channels", "act", "clip_lo", "clip_hi", "a_zp", "b_zp",
                "out_zp", "a_mult", "b_mult", "shift", "a_dtype", "b_dtype", "out_dtype"),
    "UNARY": ("dtype", "func", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems",
              "table_addr", "alpha"),
    "SOFTMAX": ("dtype", "in_addr", "in_stride", "out_addr", "out_stride", "rows", "row_elems"),
}
ENGINE_OF = {"CONV2D": "mac", "ADD": "vector", "POOL": "vector", "ELTWISE": "vector", "UNARY": "vector",
             "SOFTMAX": "vector"}
POOL_KINDS = {"avg": 0, "max": 1}
ELTWISE_KINDS = {"add": 0, "subtract": 1, "multiply": 2, "maximum": 3, "minimum": 4}
B_MODES = {"same": 0, "channel": 1, "scalar": 2}
UNARY_FUNCS = {"sigmoid": 0, "tanh": 1, "hardswish": 2, "gelu": 3, "leaky_relu": 4}
UNARY_TABLE_BYTES = 256
NO_TABLE = 0xFFFFFFFF
OPNAMES = {v: k for k, v in OPCODES.items()}

# Engines, in the order of the wait fields of word 0.
ENGINES = ("dma0", "dma1", "mac", "vector")
NO_WAIT = 15

DTYPES = {"float16": 1, "int8": 2, "int32": 3, "float32": 4, "int16": 5}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DTYPE_BYTES = {"float16": 2, "int8": 1, "int32": 4, "float32": 4, "int16": 2}
ROLES = {"input": 1, "output": 2, "weight": 3, "bias": 4}
ROLE_NAMES = {v: k for k, v in ROLES.items()}
LAYOUTS = {"NHWC": 0, "NCHW": 1, "ROWS": 2}
LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}
ACTIVATIONS = {"none": 0, "relu": 1, "clip": 2}


def operand_dtype(args: dict, which: str) -> str:
    """The dtype name of an ELTWISE operand ("a", "b" or "out"): its own (format 1.2), else the command's."""
    return DTYPE_NAMES.get(args.get(f"{which}_dtype") or args.get("dtype", 0), "")


def two_byte_lanes(op: str, args: dict) -> bool:
    """Whether a vector command runs at the 2-byte rate (docs/npu.md section 5): fp16, or an ELTWISE with
    an int16 operand or result."""
    if DTYPE_NAMES.get(args.get("dtype", 0)) == "float16":
        return True
    return op == "ELTWISE" and "int16" in (operand_dtype(args, w) for w in ("a", "b", "out"))


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
        head = OPCODES[self.op]
        for i, engine in enumerate(ENGINES):
            head |= self.waits.get(engine, NO_WAIT) << (8 + 4 * i)
        unknown = set(self.args) - set(OPERANDS[self.op])
        if unknown:
            raise ValueError(f"{self.op} has no operands {sorted(unknown)}")
        # Signed operands (zero points, int8 clamps) are stored as two's-complement words.
        body = [int(self.args.get(name, 0)) & 0xFFFFFFFF for name in OPERANDS[self.op]]
        return [head] + body + [0] * (31 - len(body))


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
        return (self.role in ("input", "output") and self.host_dtype == "float32"
                and self.dtype in ("int8", "int16"))

    def words(self) -> list[int]:
        shape = list(self.host_shape) + [0] * (4 - len(self.host_shape))
        io = NO_IO if self.io_index < 0 else self.io_index
        return ([ROLES[self.role], io, DTYPES[self.dtype], DTYPES[self.host_dtype],
                 LAYOUTS[self.host_layout], len(self.host_shape)] + shape + list(self.view)
                + [self.ddr_addr, self.row_stride])


@dataclass
class Stream:
    """A decoded (or to-be-encoded) command stream."""

    config: NPUConfig
    tensors: list
    commands: list
    weights: bytes
    ddr_bytes: int
    sram_bytes_used: int
    version: tuple = (VERSION_MAJOR, VERSION_MINOR)
    info: dict = field(default_factory=dict)  # the planner's statistics for reports; not encoded

    @property
    def num_inputs(self) -> int:
        return sum(t.role == "input" for t in self.tensors)

    @property
    def num_outputs(self) -> int:
        return sum(t.role == "output" for t in self.tensors)


def _align(n: int, a: int = 128) -> int:
    return (n + a - 1) // a * a


def encode(stream: Stream) -> bytes:
    """Pack a stream into its binary form (the last command must be END)."""
    if not stream.commands or stream.commands[-1].op != "END":
        stream.commands = list(stream.commands) + [Command("END")]
    cfg = struct.pack("<16I", *stream.config.block())
    tensors = b"".join(struct.pack("<16I", *t.words()) for t in stream.tensors)
    commands = b"".join(struct.pack("<32I", *c.words()) for c in stream.commands)
    body = cfg + tensors + commands
    qparams_offset = 0
    if any(t.quantized for t in stream.tensors):  # the quantization table follows the commands
        qparams_offset = HEADER_BYTES + len(body)
        body += b"".join(struct.pack("<fi", t.scale, t.zero_point) if t.quantized else bytes(QPARAMS_BYTES)
                         for t in stream.tensors)
    weights_offset = _align(HEADER_BYTES + len(body))
    body += b"\0" * (weights_offset - HEADER_BYTES - len(body)) + bytes(stream.weights)
    version = VERSION_MAJOR | (VERSION_MINOR << 16)
    header = struct.pack("<16I", MAGIC, version, HEADER_BYTES, 0, len(stream.tensors),
                         len(stream.commands), weights_offset, len(stream.weights), stream.ddr_bytes,
                         stream.sram_bytes_used, stream.num_inputs, stream.num_outputs,
                         zlib.crc32(body) & 0xFFFFFFFF, qparams_offset, 0, 0)
    return header + body


def decode(blob: bytes) -> Stream:
    """Parse a blob (structure only; the C++ runtime does the full validation before running it)."""
    blob = bytes(blob)
    if len(blob) < HEADER_BYTES + CONFIG_BYTES:
        raise NPUError("ERR_BAD_STREAM", f"stream of {len(blob)} bytes is shorter than its header")
    h = struct.unpack_from("<16I", blob, 0)
    if h[0] != MAGIC:
        raise NPUError("ERR_BAD_STREAM", "not an NPU command stream (bad magic)")
    major, minor = h[1] & 0xFFFF, h[1] >> 16
    if major != VERSION_MAJOR or minor > VERSION_MINOR:
        raise NPUError("ERR_BAD_STREAM",
                       f"stream format version {major}.{minor}; this tvm_npu reads {VERSION_MAJOR}.0 to "
                       f"{VERSION_MAJOR}.{VERSION_MINOR}: recompile the model with this version")
    num_tensors, num_commands, weights_offset, weights_bytes = h[4], h[5], h[6], h[7]
    need = HEADER_BYTES + CONFIG_BYTES + num_tensors * TENSOR_BYTES + num_commands * COMMAND_BYTES
    if need > weights_offset or weights_offset + weights_bytes != len(blob):
        raise NPUError("ERR_BAD_STREAM", "stream sizes disagree with its length (truncated?)")
    if zlib.crc32(blob[HEADER_BYTES:]) & 0xFFFFFFFF != h[12]:
        raise NPUError("ERR_BAD_STREAM", "stream checksum mismatch (damaged artifact)")
    block = struct.unpack_from("<16I", blob, HEADER_BYTES)
    config = NPUConfig(name="from-stream", **dict(zip(NPUConfig.BLOCK_FIELDS, block)))
    tensors, off = [], HEADER_BYTES + CONFIG_BYTES
    for _ in range(num_tensors):
        w = struct.unpack_from("<16I", blob, off)
        off += TENSOR_BYTES
        rank = w[5]
        tensors.append(TensorDesc(ROLE_NAMES[w[0]], -1 if w[1] == NO_IO else w[1], DTYPE_NAMES[w[2]],
                                  DTYPE_NAMES[w[3]], LAYOUT_NAMES[w[4]], tuple(w[6:6 + rank]),
                                  tuple(w[10:14]), w[14], w[15]))
    if h[13]:  # the quantization table (format 1.3)
        for i, t in enumerate(tensors):
            t.scale, t.zero_point = struct.unpack_from("<fi", blob, h[13] + QPARAMS_BYTES * i)
    commands = []
    for _ in range(num_commands):
        w = struct.unpack_from("<32I", blob, off)
        off += COMMAND_BYTES
        name = OPNAMES[w[0] & 0xFF]
        waits = {e: (w[0] >> (8 + 4 * i)) & 0xF for i, e in enumerate(ENGINES)}
        waits = {e: k for e, k in waits.items() if k != NO_WAIT}
        commands.append(Command(name, dict(zip(OPERANDS[name], w[1:])), waits))
    return Stream(config, tensors, commands, blob[weights_offset:], h[8], h[9], (major, minor))
