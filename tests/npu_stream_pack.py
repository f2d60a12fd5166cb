"""Packs NPU command streams by hand with `struct`, from the contract (docs/npu.md section 6),
independently of the package's own encoder (tvm_npu.stream) and of the C++ headers, for the
reference-NPU tests; also their shared runtime plumbing (global functions, tensors, error codes)."""

import struct
import zlib

import numpy as np
import pytest
import tvm_ffi

import tvm_npu

# ---------------------------------------------------------------------------------------------
# Runtime plumbing
# ---------------------------------------------------------------------------------------------


def runtime_functions(names):
    """The runtime's global functions (the library as the package installed it), by the short
    names of `names` (short name -> registered name)."""
    tvm_npu.runtime.load_library()
    return {k: tvm_ffi.get_global_func(v) for k, v in names.items()}


def T(a):
    return tvm_ffi.from_dlpack(np.ascontiguousarray(a))


def raises_code(code, fn, *args, **kwargs):
    with pytest.raises(RuntimeError) as info:
        fn(*args, **kwargs)
    assert str(info.value).startswith(code + ":"), str(info.value)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Stream packing per docs/npu.md section 6
# ---------------------------------------------------------------------------------------------

NPU_REF = [1000, 32, 32, 4, 2097152, 16, 16, 128, 64, 2, 64, 128, 32, 4, 2048, 64]
NPU_SMALL = [500, 16, 16, 4, 524288, 8, 8, 128, 64, 2, 32, 128, 32, 4, 2048, 64]
END, DMA_LOAD, DMA_STORE, CONV2D, ADD, POOL = 0x00, 0x01, 0x02, 0x10, 0x20, 0x21
INPUT, OUTPUT, WEIGHT, BIAS = 1, 2, 3, 4
FP16, INT8, INT32, FP32, INT16 = 1, 2, 3, 4, 5
NHWC, NCHW, ROWS = 0, 1, 2
DMA0, DMA1, MAC, VECTOR = 0, 1, 2, 3  # engines, in the order of word 0's wait fields
ALL_DONE = {DMA0: 0, DMA1: 0, MAC: 0, VECTOR: 0}
NO_IO = NO_BIAS = 0xFFFFFFFF


def align(n, a=128):
    return (n + a - 1) // a * a


def u32(v):
    return v & 0xFFFFFFFF


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def tensor(role, io_index, view, ddr_addr, row_stride, dtype=FP16, host_dtype=FP32, layout=NHWC,
           host_shape=()):
    shape = list(host_shape) + [0] * (4 - len(host_shape))
    return struct.pack("<16I", role, io_index, dtype, host_dtype, layout, len(host_shape), *shape,
                       *view, ddr_addr, row_stride)


def command(opcode, operands, wait=None):
    """`wait` maps engine -> k: issue once at most k commands are outstanding there (else 15)."""
    head = opcode
    for engine in range(4):
        head |= (wait or {}).get(engine, 15) << (8 + 4 * engine)
    words = [head] + [u32(v) for v in operands]
    return struct.pack("<32I", *(words + [0] * (32 - len(words))))


def dma(opcode, channel, src, dst, rows, row_bytes, src_stride, dst_stride, wait=None):
    return command(opcode, [channel, src, dst, rows, row_bytes, src_stride, dst_stride], wait)


def pack_stream(tensors, commands, weights=b"", ddr_bytes=None, num_inputs=0, num_outputs=0,
                config=NPU_REF, sram_used=0, version=(1, 0), qparams=None, qparams_offset=None):
    """`qparams` (format 1.3): one (scale, zero point) per tensor, (0.0, 0) for those not staged with
    quantization, written right after the command table (or at `qparams_offset`, in the blob)."""
    tables_end = 128 + 64 * len(tensors) + 128 * len(commands)
    table = b"".join(struct.pack("<fi", s, z) for s, z in qparams) if qparams is not None else b""
    at = (tables_end if qparams_offset is None else qparams_offset) if qparams is not None else 0
    weights_offset = align(max(tables_end, at + len(table)))
    body = bytearray(struct.pack("<16I", *config) + b"".join(tensors) + b"".join(commands))
    body += b"\0" * (weights_offset - 64 - len(body))
    if table and at >= 64:
        body[at - 64:at - 64 + len(table)] = table
    body = bytes(body) + weights
    ddr = len(weights) if ddr_bytes is None else ddr_bytes
    header = struct.pack("<IHH14I", 0x5355504E, *version, 64, 0, len(tensors), len(commands),
                         weights_offset, len(weights), ddr, sram_used, num_inputs, num_outputs,
                         zlib.crc32(body), at, 0, 0)
    return header + body


def refresh_crc(blob):
    blob = bytearray(blob)
    blob[48:52] = struct.pack("<I", zlib.crc32(bytes(blob[64:])))
    return bytes(blob)
