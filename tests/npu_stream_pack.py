"""Stream packing for the reference-NPU tests, and their shared runtime plumbing.

The packing is the contract's spec-driven packer (tvm_npu.contract.layout: the struct layouts of
tvm_npu/contract/spec.py, operands by name), never the compiler's encoder or lowering: a test states
every operand of every command itself. The helpers below only add the tests' defaults."""

import json
import struct

import numpy as np
import pytest
import tvm_ffi

import tvm_npu
from tvm_npu.contract import layout, spec

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


def bits_equal(out, ref):
    """fp16 results bit for bit (host fp32 `out` against the model's fp16 `ref`); NaN against NaN passes
    whatever its payload."""
    got = out.astype(np.float16).view(np.uint16)
    want = np.asarray(ref, np.float16).view(np.uint16)
    nan = np.isnan(out) & np.isnan(np.asarray(ref, np.float32))
    bad = (got != want) & ~nan
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ, first at {np.argwhere(bad)[0]}"


def raises_code(code, fn, *args, **kwargs):
    with pytest.raises(RuntimeError) as info:
        fn(*args, **kwargs)
    assert str(info.value).startswith(code + ":"), str(info.value)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Codes and constants, by the names the tests use (values from the spec)
# ---------------------------------------------------------------------------------------------

END, DMA_LOAD, DMA_STORE, CONV2D, ADD, POOL, ELTWISE, UNARY, SOFTMAX, NORM = (
    layout.OPCODES[n]
    for n in ("END", "DMA_LOAD", "DMA_STORE", "CONV2D", "ADD", "POOL", "ELTWISE", "UNARY", "SOFTMAX", "NORM")
)
INPUT, OUTPUT, WEIGHT, BIAS = (layout.codes("role")[n] for n in ("input", "output", "weight", "bias"))
FP16, INT8, INT32, FP32, INT16 = (layout.codes("dtype")[n] for n in ("float16", "int8", "int32", "float32", "int16"))
NHWC, NCHW, ROWS = (layout.codes("layout")[n] for n in ("NHWC", "NCHW", "ROWS"))
DMA0, DMA1, MAC, VECTOR = (layout.ENGINES.index(e) for e in ("dma0", "dma1", "mac", "vector"))
ALL_DONE = {DMA0: 0, DMA1: 0, MAC: 0, VECTOR: 0}
NO_IO, NO_BIAS, NO_TABLE = (layout.NAMED_VALUES[n] for n in ("NO_IO", "NO_BIAS", "NO_TABLE"))
# The presets' configuration blocks, as words (config[i] is field i of the block).
NPU_REF, NPU_SMALL = ([p["values"][f] for f in layout.CONFIG.names] for p in spec.PRESETS[:2])


def align(n, a=128):
    return layout.align(n, a)


def u32(v):
    return v & 0xFFFFFFFF


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


# ---------------------------------------------------------------------------------------------
# Records (docs/npu.md section 6)
# ---------------------------------------------------------------------------------------------


_TENSOR = layout.TENSOR


def tensor(role, io_index, view, ddr_addr, row_stride, dtype=FP16, host_dtype=FP32, layout=NHWC, host_shape=()):
    return _TENSOR.pack(
        role=role,
        io_index=io_index,
        dtype=dtype,
        host_dtype=host_dtype,
        host_layout=layout,
        host_rank=len(host_shape),
        host_shape=list(host_shape),
        view=list(view),
        ddr_addr=ddr_addr,
        row_stride=row_stride,
    )


def command(opcode, operands=(), wait=None):
    """A command: `operands` by name (a dict; the rest 0), or raw words (a list, e.g. for an unknown
    opcode). `wait` maps engine -> k: issue once at most k commands are outstanding there."""
    return layout.pack_command(opcode, operands, wait)


def dma(opcode, channel, src, dst, rows, row_bytes, src_stride, dst_stride, wait=None):
    """DMA_LOAD (DDR -> SRAM) or DMA_STORE (SRAM -> DDR) of `rows` rows of `row_bytes` bytes."""
    ddr, sram = ("src", "dst") if opcode == DMA_LOAD else ("dst", "src")
    ends = {"src": (src, src_stride), "dst": (dst, dst_stride)}
    return command(
        opcode,
        dict(
            channel=channel,
            ddr_addr=ends[ddr][0],
            ddr_stride=ends[ddr][1],
            sram_addr=ends[sram][0],
            sram_stride=ends[sram][1],
            rows=rows,
            row_bytes=row_bytes,
        ),
        wait,
    )


def pack_stream(
    tensors,
    commands,
    weights=b"",
    ddr_bytes=None,
    num_inputs=0,
    num_outputs=0,
    config=NPU_REF,
    sram_used=0,
    version=(1, 0),
    qparams=None,
    qparams_offset=None,
    state_bytes=0,
    state_space=0,
):
    """`qparams` (format 1.3): one (scale, zero point) per tensor, (0.0, 0) for those not staged with
    quantization, written right after the command table (or at `qparams_offset`, in the blob)."""
    return layout.assemble(
        config,
        tensors,
        commands,
        weights,
        ddr_bytes=len(weights) if ddr_bytes is None else ddr_bytes,
        sram_bytes_used=sram_used,
        num_inputs=num_inputs,
        num_outputs=num_outputs,
        version=version,
        qparams=qparams,
        qparams_offset=qparams_offset,
        state_bytes=state_bytes,
        state_space=state_space,
    )


def refresh_crc(blob):
    at = layout.HEADER.offsets["crc32"]
    blob = bytearray(blob)
    blob[at : at + 4] = struct.pack("<I", layout.crc32(bytes(blob[layout.HEADER.size :])))
    return bytes(blob)


def run_row_op(rt, name, x, weights, op_command, version, int8=False):
    """x [rows, E] (fp16 rows in DDR; int8 codes, host and device, with `int8`) through DMA_LOAD -> one
    vector command -> DMA_STORE, with `weights` loaded into SRAM at 0 first; `op_command(in_sram, out_sram,
    stride)` makes the command (waiting on both DMA channels). Returns the float32 (int8) output and the
    command's profile record."""
    rows, e = x.shape
    el, dtype, host = (1, INT8, INT8) if int8 else (2, FP16, FP32)
    stride = align(el * e)
    weights = weights or b"\0" * 128
    in_sram = in_ddr = align(len(weights))
    out_sram = out_ddr = in_sram + rows * stride
    cmds = [
        dma(DMA_LOAD, 1, 0, 0, 1, len(weights), len(weights), len(weights)),
        dma(DMA_LOAD, 0, in_ddr, in_sram, rows, el * e, stride, stride),
        op_command(in_sram, out_sram, stride),
        dma(DMA_STORE, 0, out_sram, out_ddr, rows, el * e, stride, stride, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    view = [1, rows, 1, e]
    tensors = [
        tensor(INPUT, 0, view, in_ddr, stride, dtype, host, layout=ROWS, host_shape=(rows, e)),
        tensor(OUTPUT, 0, view, out_ddr, stride, dtype, host, layout=ROWS, host_shape=(rows, e)),
    ]
    end = out_ddr + rows * stride
    blob = pack_stream(tensors, cmds, weights, end, 1, 1, version=version, sram_used=end)
    mod = rt["create"](name, blob)
    np_host = np.int8 if int8 else np.float32
    out = np.zeros((rows, e), np_host)
    mod[name](T(np.ascontiguousarray(x, np_host)), T(out))
    return out, json.loads(mod["get_profile"]())["last"]["records"][2]


def one_command(cmd, version):
    """A stream of `cmd` and END alone, 256 bytes of weights, 4 KiB of DDR: for operand validation."""
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, version=version)
