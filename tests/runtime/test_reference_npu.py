"""Tests of the C++ reference NPU: fp16 conversion, the reference CONV2D kernel, the stream parser's
validation, the executor and the cycle model, each against an independent numpy/struct model of
docs/npu.md."""

import functools
import json
import random
import struct
import threading

import numpy as np
import pytest

from int8_streams import conv_cmd
from npu_ref import fp16, out_size
from npu_stream_pack import (
    ALL_DONE,
    BIAS,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    MAC,
    NCHW,
    NO_BIAS,
    NO_IO,
    NPU_REF,
    NPU_SMALL,
    OUTPUT,
    ROWS,
    WEIGHT,
    T,
    align,
    command,
    dma,
    pack_stream,
    raises_code,
    refresh_crc,
    tensor,
)
from tvm_npu.contract import layout

# ---------------------------------------------------------------------------------------------
# Stream packing per docs/npu.md section 6 (npu_stream_pack.py): the fp16 CONV2D command.
# ---------------------------------------------------------------------------------------------


# The fp16 form of int8_streams' CONV2D builder (clip bounds as fp32, zero points 0).
conv = functools.partial(conv_cmd, FP16)


# ---------------------------------------------------------------------------------------------
# fp16 conversion
# ---------------------------------------------------------------------------------------------


def fp16_bits(rt, x):
    out = np.empty(x.shape, np.float16)
    rt["fp16_round"](T(x), T(out))
    return out.view(np.uint16)


def test_fp16_round_edge_cases(rt):
    bits = [
        0,
        0x80000000,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0x7F800001,
        0x7F801FFF,
        0x7F802000,
        0xFFFFFFFF,
        0x00000001,
        0x007FFFFF,
        0x33000000,
        0x33000001,
        0x337FFFFF,
        0x33800000,
        0x38800000,
        0x387FC000,
        0x387FE000,
        0x387FF000,
        0x477FE000,
        0x477FEFFF,
        0x477FF000,
        0x47800000,
        0x3F801000,
        0x3F803000,
        0x3F800FFF,
        0x3F801001,
        0x7F7FFFFF,
    ]
    x = np.array(bits, np.uint32).view(np.float32)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(fp16_bits(rt, x), ref)


def test_fp16_round_random_bits(rt):
    # Every fp32 bit pattern agrees with numpy (checked exhaustively once); here a sample.
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(fp16_bits(rt, x), ref)
    y = rng.standard_normal(1 << 18) * np.float32(2.0) ** rng.integers(-30, 20, 1 << 18)
    y = y.astype(np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(fp16_bits(rt, y), y.astype(np.float16).view(np.uint16))


# ---------------------------------------------------------------------------------------------
# Reference CONV2D kernel alone
# ---------------------------------------------------------------------------------------------

CONV_CASES = [
    # n, h, w, ic, oc, k, stride, dil, pad (top, left, bottom, right), bias, act, clip
    (1, 5, 5, 3, 4, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), False, 0, (0, 0)),
    (2, 7, 6, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True, 0, (0, 0)),
    (1, 9, 8, 4, 3, (3, 2), (2, 2), (1, 1), (1, 0, 1, 1), True, 1, (0, 0)),
    (1, 9, 9, 2, 5, (3, 3), (1, 2), (2, 2), (2, 2, 2, 2), True, 2, (-0.5, 0.75)),
    (1, 1, 6, 40, 33, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), True, 2, (0.0, 6.0)),
    (1, 6, 6, 8, 8, (5, 5), (2, 1), (1, 1), (3, 1, 0, 2), False, 1, (0, 0)),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_ref_conv2d_matches_numpy(rt, case):
    n, h, w, ic, oc, k, stride, dil, pad, with_bias, act, clip = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = rng.standard_normal((n, h, w, ic)).astype(np.float16)
    wt = (rng.standard_normal((oc, *k, ic)) / 3).astype(np.float16)
    bias = rng.standard_normal(oc).astype(np.float32) if with_bias else None
    oh = out_size(h, k[0], stride[0], dil[0], pad[0], pad[2])
    ow = out_size(w, k[1], stride[1], dil[1], pad[1], pad[3])
    out = np.empty((n, oh, ow, oc), np.float16)
    rt["conv16"](T(x), T(wt), None if bias is None else T(bias), T(out), *stride, *dil, pad[0], pad[1], act, *clip)
    ref = fp16.conv2d(x, wt, bias, (oh, ow), stride, dil, pad[:2], act, clip)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


def test_ref_conv2d_rejects_bad_arguments(rt):
    x = np.zeros((1, 4, 4, 2), np.float16)
    wt = np.zeros((3, 1, 1, 2), np.float16)
    out = np.zeros((1, 4, 4, 3), np.float16)
    raises_code("ERR_OP_NOT_SUPPORTED", rt["conv16"], T(x), T(wt), None, T(out), 3, 1, 1, 1, 0, 0, 0, 0.0, 0.0)
    raises_code("ERR_SHAPE_MISMATCH", rt["conv16"], T(x), T(wt), None, T(out[..., :2]), 1, 1, 1, 1, 0, 0, 0, 0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# A hand-built stream: DMA_LOAD x3 -> CONV2D -> DMA_STORE -> END
# ---------------------------------------------------------------------------------------------

C, H, W, OC = 8, 6, 7, 16


def conv_stream(config=NPU_REF):
    """Input NCHW [1, 8, 6, 7], 3x3 conv pad 1 + bias + relu, output NCHW [1, 16, 6, 7]."""
    rng = np.random.default_rng(7)
    wt = (rng.standard_normal((OC, 3, 3, C)) / 4).astype(np.float16)
    bias = rng.standard_normal(OC).astype(np.float32)
    w_row, w_stride = 9 * C * 2, 256
    weights = b"".join(r.tobytes().ljust(w_stride, b"\0") for r in wt.reshape(OC, -1))
    bias_addr = len(weights)
    weights += bias.tobytes().ljust(128, b"\0")
    in_addr, in_stride = len(weights), align(W * C * 2)
    out_addr, out_stride = in_addr + H * in_stride, align(W * OC * 2)
    ddr_bytes = out_addr + H * out_stride
    s_in, s_w, s_b, s_out = 0, 1024, 5120, 5248
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], in_addr, in_stride, layout=NCHW, host_shape=[1, C, H, W]),
        tensor(OUTPUT, 0, [1, H, W, OC], out_addr, out_stride, layout=NCHW, host_shape=[1, OC, H, W]),
        tensor(WEIGHT, NO_IO, [1, OC, 1, 9 * C], 0, w_stride),  # one row per OC
        tensor(BIAS, NO_IO, [1, 1, 1, OC], bias_addr, 128, dtype=FP32),
    ]
    commands = [
        dma(DMA_LOAD, 0, in_addr, s_in, H, W * C * 2, in_stride, in_stride),
        dma(DMA_LOAD, 1, 0, s_w, OC, w_row, w_stride, w_stride),
        dma(DMA_LOAD, 0, bias_addr, s_b, 1, OC * 4, 128, 128),
        conv(
            s_in,
            H,
            W,
            C,
            in_stride,
            s_w,
            w_stride,
            3,
            3,
            OC,
            s_b,
            s_out,
            H,
            W,
            out_stride,
            pad=(1, 1),
            act=1,
            wait={DMA0: 0, DMA1: 0},
        ),
        dma(DMA_STORE, 0, s_out, out_addr, H, W * OC * 2, out_stride, out_stride, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, commands, weights, ddr_bytes, 1, 1, config, sram_used=s_out + H * out_stride)
    return blob, wt, bias


def run_conv_stream(fn, x):
    out = np.full((1, OC, H, W), np.nan, np.float32)
    fn(T(x), T(out))
    return out


def expected_conv(x, wt, bias):
    x16 = x.astype(np.float16).transpose(0, 2, 3, 1)
    ref = fp16.conv2d(x16, wt, bias, (H, W), pad=(1, 1), act=1)
    return ref.astype(np.float32).transpose(0, 3, 1, 2)


def test_stream_conv_matches_numpy(rt):
    blob, wt, bias = conv_stream()
    mod = rt["create"]("npu_conv_0", blob)
    assert mod.kind == "npu"
    x = np.random.default_rng(1).standard_normal((1, C, H, W)).astype(np.float32)
    out = run_conv_stream(mod["npu_conv_0"], x)
    np.testing.assert_array_equal(out, expected_conv(x, wt, bias))

    prof = json.loads(mod["get_profile"]())
    assert prof["calls"] == 1
    last = prof["last"]
    assert [r["opcode"] for r in last["records"]] == ["DMA_LOAD", "DMA_LOAD", "DMA_LOAD", "CONV2D", "DMA_STORE", "END"]
    assert last["macs"] == H * W * OC * 9 * C
    assert last["ddr_read_bytes"] == H * 128 + OC * 256 + 128
    assert last["ddr_write_bytes"] == H * 256
    conv_rec, store_rec = last["records"][3], last["records"][4]
    loads_done = max(r["end"] for r in last["records"][:3])
    assert conv_rec["issue"] == conv_rec["start"] == loads_done  # waits on both DMA channels
    assert conv_rec["end"] - conv_rec["start"] == 32 + H * W * 9 * 1 * 1 * 4
    assert [r["engine"] for r in last["records"]] == ["dma0", "dma1", "dma0", "mac", "dma0", None]
    assert store_rec["issue"] == conv_rec["end"]
    assert last["total_cycles"] == store_rec["end"]


def test_module_interface(rt):
    blob, _, _ = conv_stream()
    mod = rt["create"]("npu_conv_0", blob)
    assert mod["get_symbol"]() == "npu_conv_0"
    assert list(mod["get_const_vars"]()) == []
    assert mod["__init_npu_conv_0"]([]) == 0
    assert bytes(mod["get_stream"]()) == blob
    assert mod.is_binary_serializable() and mod.is_runnable()
    summary = json.loads(rt["validate"](blob))
    assert summary["version"] == "1.0" and summary["num_commands"] == 6
    assert summary["config"]["mac_rows"] == 32
    mod["reset_profile"]()
    assert json.loads(mod["get_profile"]())["calls"] == 0


def test_load_from_bytes(rt):
    blob, wt, bias = conv_stream()
    sym = b"npu_conv_1"
    saved = struct.pack("<Q", len(sym)) + sym + struct.pack("<Q", len(blob)) + blob
    mod = rt["load"](saved)
    x = np.random.default_rng(2).standard_normal((1, C, H, W)).astype(np.float32)
    np.testing.assert_array_equal(run_conv_stream(mod["npu_conv_1"], x), expected_conv(x, wt, bias))
    raises_code("ERR_BAD_STREAM", rt["load"], saved[:-1])


def _pool_hash(data: bytes) -> int:
    """The weight pool's key of a region (src/runtime/weight_pool.cc), computed again here."""
    mask, h, n8 = (1 << 64) - 1, 0x9E3779B97F4A7C15 ^ len(data), len(data) // 8 * 8
    for i in range(0, n8, 8):
        h = ((h ^ int.from_bytes(data[i : i + 8], "little")) * 0xFF51AFD7ED558CCD) & mask
        h ^= h >> 32
    for b in data[n8:]:
        h = ((h ^ b) * 0x100000001B3) & mask
    return h ^ (h >> 29)


def _by_reference(symbol: bytes, blob: bytes, key_weights: bytes) -> bytes:
    """A module saved with its weights by reference: the flag bit in the symbol size, the stream up to
    weights_offset, then the size and hash of `key_weights`."""
    offset = struct.unpack_from("<I", blob, layout.HEADER.offsets["weights_offset"])[0]
    return (
        struct.pack("<Q", len(symbol) | 1 << 63)
        + symbol
        + struct.pack("<Q", offset)
        + blob[:offset]
        + struct.pack("<QQ", len(key_weights), _pool_hash(key_weights))
    )


def test_load_with_the_weights_by_reference(rt):
    """A module saved with its weights by reference finds them at first use in a module alive with those
    bytes; no such module is ERR_BAD_ARTIFACT, other bytes under the key fail the stream's CRC."""
    blob, wt, bias = conv_stream()
    offset = struct.unpack_from("<I", blob, layout.HEADER.offsets["weights_offset"])[0]
    weights = blob[offset:]
    x = np.random.default_rng(5).standard_normal((1, C, H, W)).astype(np.float32)
    holder = rt["create"]("npu_conv_h", blob)
    mod = rt["load"](_by_reference(b"npu_conv_r", blob, weights))
    np.testing.assert_array_equal(run_conv_stream(mod["npu_conv_r"], x), expected_conv(x, wt, bias))
    assert bytes(mod["get_stream"]()) == blob
    missing = rt["load"](_by_reference(b"npu_conv_m", blob, weights[:-1] + bytes([weights[-1] ^ 1])))
    raises_code("ERR_BAD_ARTIFACT", missing.__getitem__, "npu_conv_m")
    other = bytearray(blob)
    other[-1] ^= 1  # one weight byte apart: a region of its own, under its own key
    holder2 = rt["create"]("npu_conv_o", refresh_crc(bytes(other)))
    wrong = rt["load"](_by_reference(b"npu_conv_w", blob, bytes(other[offset:])))
    raises_code("ERR_BAD_STREAM", wrong.__getitem__, "npu_conv_w")  # the CRC covers the weights
    del holder, holder2


def test_concurrent_calls(rt):
    blob, wt, bias = conv_stream()
    fn = rt["create"]("npu_conv_0", blob)["npu_conv_0"]
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(5):
            x = rng.standard_normal((1, C, H, W)).astype(np.float32)
            if not np.array_equal(run_conv_stream(fn, x), expected_conv(x, wt, bias)):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_shape_mismatch(rt):
    blob, _, _ = conv_stream()
    fn = rt["create"]("npu_conv_0", blob)["npu_conv_0"]
    out = np.zeros((1, OC, H, W), np.float32)
    raises_code("ERR_SHAPE_MISMATCH", fn, T(np.zeros((1, C, H, W + 1), np.float32)), T(out))
    raises_code("ERR_SHAPE_MISMATCH", fn, T(np.zeros((1, C, H, W), np.float16)), T(out))
    raises_code("ERR_SHAPE_MISMATCH", fn, T(np.zeros((1, C, H, W), np.float32)))


def copy_stream(shape, config=NPU_REF, split=1):
    """ROWS [..., K] host in -> DMA_LOAD -> DMA_STORE -> out, in `split` chunks per direction."""
    k = shape[-1]
    rows = int(np.prod(shape[:-1]))
    stride = align(k * 2)
    size = rows * stride
    view = [1, rows, 1, k]
    tensors = [
        tensor(INPUT, 0, view, 0, stride, layout=ROWS, host_shape=shape),
        tensor(OUTPUT, 0, view, size, stride, layout=ROWS, host_shape=shape),
    ]
    chunk = rows // split
    commands = []
    for c in range(split):
        off = c * chunk * stride
        commands.append(dma(DMA_LOAD, c % 2, off, off, chunk, k * 2, stride, stride))
    for c in range(split):
        off = c * chunk * stride
        commands.append(dma(DMA_STORE, c % 2, off, size + off, chunk, k * 2, stride, stride, wait={DMA0: 0, DMA1: 0}))
    commands.append(command(END, [], wait=ALL_DONE))
    return pack_stream(tensors, commands, b"", 2 * size, 1, 1, config)


def test_half_to_float_is_exact(rt):
    # Every fp16 bit pattern, as fp32 host values, survives fp32 -> fp16 -> fp32 unchanged.
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = h.astype(np.float32).reshape(4, 64, 256)
    fn = rt["create"]("copy", copy_stream([4, 64, 256]))["copy"]
    out = np.zeros_like(x)
    fn(T(x), T(out))
    np.testing.assert_array_equal(out.view(np.uint32), x.view(np.uint32))


# ---------------------------------------------------------------------------------------------
# Validation at load
# ---------------------------------------------------------------------------------------------


def test_damaged_streams_are_refused(rt):
    blob, _, _ = conv_stream()
    rt["validate"](blob)
    flipped = bytearray(blob)
    flipped[300] ^= 0x10
    assert "crc" in raises_code("ERR_BAD_STREAM", rt["validate"], bytes(flipped))
    raises_code("ERR_BAD_STREAM", rt["validate"], blob[:-1])
    raises_code("ERR_BAD_STREAM", rt["validate"], blob + b"\0")
    raises_code("ERR_BAD_STREAM", rt["validate"], blob[:100])
    raises_code("ERR_BAD_STREAM", rt["validate"], b"")
    raises_code("ERR_BAD_STREAM", rt["validate"], b"XPUS" + blob[4:])
    raises_code("ERR_BAD_STREAM", rt["validate"], blob[:4] + struct.pack("<H", 2) + blob[6:])
    raises_code("ERR_BAD_STREAM", rt["create"], "x", blob[:-5])
    # Minor versions append operands whose 0 keeps the older meaning: older minors read; a newer one
    # is refused.
    for minor in range(layout.VERSION_MINOR + 1):
        summary = json.loads(rt["validate"](blob[:6] + struct.pack("<H", minor) + blob[8:]))
        assert summary["version"] == f"1.{minor}"
    newer = struct.pack("<H", layout.VERSION_MINOR + 1)
    raises_code("ERR_BAD_STREAM", rt["validate"], blob[:6] + newer + blob[8:])


@pytest.mark.parametrize(
    "field, index, value, message",
    [
        ("header_bytes", 0, 72, "header_bytes is 72, must be 64"),
        # Word 3, `flags` (always 0) before format 1.5 made it the SRAM state area; this stream says 1.0.
        ("sram_state_bytes", 0, 5, "header word 3 (sram_state_bytes, formerly flags) is 5, must be 0"),
        # Words 14-15, reserved before format 1.4 (state_bytes, state_space); this stream says 1.0.
        ("state_bytes", 0, 7, "reserved header word 14 is 7, must be 0"),
        ("state_space", 0, 9, "reserved header word 15 is 9, must be 0"),
    ],
)
def test_each_header_word_check_names_its_own_field(rt, field, index, value, message):
    """One combined check used to say "header_bytes must be 64 ... (got 64, flags 0)" for a non-zero
    reserved word: each field now reports itself and its value."""
    blob = bytearray(conv_stream()[0])
    at = layout.HEADER.offsets[field] + 4 * index
    blob[at : at + 4] = struct.pack("<I", value)
    assert message in raises_code("ERR_BAD_STREAM", rt["validate"], bytes(blob))


def single_command_stream(cmd, config=NPU_REF, weights=b"\0" * 256, ddr_bytes=4096):
    return pack_stream([], [cmd, command(END, [])], weights, ddr_bytes, config=config)


def test_invalid_addresses_are_refused(rt):
    v = rt["validate"]
    ok = dma(DMA_LOAD, 0, 0, 0, 4, 256, 256, 256)
    v(single_command_stream(ok))
    bad = [
        dma(DMA_LOAD, 0, 0, 2097152 - 512, 4, 256, 256, 256),  # past the end of SRAM
        dma(DMA_LOAD, 0, 3840, 0, 4, 256, 256, 256),  # past ddr_bytes
        dma(DMA_LOAD, 0, 64, 0, 1, 64, 128, 128),  # misaligned DDR address
        dma(DMA_LOAD, 0, 0, 0, 2, 64, 192, 128),  # misaligned stride
        dma(DMA_STORE, 0, 0, 128, 1, 128, 128, 128),  # writes the weight region
        dma(DMA_STORE, 0, 0, 0xFFFFFF80, 0xFFFFFFFF, 128, 128, 0xFFFFFF80),  # huge, no wrap
        conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 2097152 - 256, 4, 4, 256),
        conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 256, 4, 4, 256),  # out on input
        conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, 100, 4096, 4, 4, 256),  # misaligned bias
    ]
    for cmd in bad:
        raises_code("ERR_INVALID_ADDR", v, single_command_stream(cmd))
    v(single_command_stream(conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 4096, 4, 4, 256)))


def test_bad_commands_are_refused(rt):
    v = rt["validate"]
    ok_conv = conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 4096, 4, 4, 256)
    raises_code(
        "ERR_OP_NOT_SUPPORTED",
        v,
        single_command_stream(conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 4096, 2, 2, 256, stride=(3, 3))),
    )
    raises_code("ERR_BAD_STREAM", v, single_command_stream(dma(DMA_LOAD, 2, 0, 0, 1, 128, 128, 128)))
    raises_code("ERR_BAD_STREAM", v, single_command_stream(command(0x33, [])))
    raises_code("ERR_BAD_STREAM", v, pack_stream([], [command(END, []), ok_conv]))
    raises_code("ERR_BAD_STREAM", v, pack_stream([], [ok_conv]))
    raises_code("ERR_BAD_STREAM", v, single_command_stream(ok_conv[:-4] + b"\1\0\0\0"))
    too_many = [tensor(WEIGHT, NO_IO, [1, 1, 1, 64], 0, 128)] * 65
    raises_code("ERR_TASK_TOO_COMPLEX", v, pack_stream(too_many, [command(END, [])], b"\0" * 128))
    raises_code("ERR_SRAM_OVERFLOW", v, pack_stream([], [command(END, [])], sram_used=2097153))
    dup_io = [tensor(INPUT, 0, [1, 1, 1, 64], 0, 128, layout=ROWS, host_shape=[64])] * 2
    raises_code("ERR_BAD_STREAM", v, pack_stream(dup_io, [command(END, [])], b"", 256, 2, 0))
    wrong_view = [tensor(INPUT, 0, [1, 4, 4, 3], 0, 128, layout=NCHW, host_shape=[1, 4, 4, 3])]
    raises_code("ERR_BAD_STREAM", v, pack_stream(wrong_view, [command(END, [])], b"", 512, 1, 0))


def test_int8_conv_needs_requantization_block(rt):
    # int8 CONV2D is specified now (tests/runtime/test_reference_npu_int8.py); without its
    # requantization block at bias_addr it is refused at load.
    cmd = bytearray(conv(0, 4, 4, 8, 128, 1024, 256, 3, 3, 8, NO_BIAS, 4096, 4, 4, 256))
    cmd[4:8] = struct.pack("<I", 2)  # dtype int8
    raises_code("ERR_BAD_STREAM", rt["create"], "int8", single_command_stream(bytes(cmd)))


def test_mutated_streams_never_crash(rt):
    """Random word mutations with a fixed-up CRC reach every check; each must pass or raise a
    coded error, never crash (a light version of the fuzzing to come)."""
    blob, _, _ = conv_stream()
    rng = random.Random(0)
    interesting = [0, 1, 2, 127, 128, 129, 0x7FFFFFFF, 0x80000000, 0xFFFFFF80, 0xFFFFFFFF]
    for _ in range(20000):
        b = bytearray(blob)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(16, 128 + 64 * 4 + 128 * 6, 4)  # header words, config, tables
            value = rng.choice(interesting + [rng.getrandbits(32)])
            b[pos : pos + 4] = struct.pack("<I", value)
        try:
            rt["validate"](refresh_crc(bytes(b)))
        except RuntimeError as e:
            assert str(e).startswith("ERR_"), str(e)


# ---------------------------------------------------------------------------------------------
# Cycle model (docs/npu.md section 5)
# ---------------------------------------------------------------------------------------------


def test_dma_only_stream_approaches_bandwidth(rt):
    shape = [1024, 1024]  # 2 MiB of fp16 each way: the whole SRAM of npu-ref
    mod = rt["create"]("copy", copy_stream(shape, split=8))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    out = np.zeros_like(x)
    mod["copy"](T(x), T(out))
    np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))
    last = json.loads(mod["get_profile"]())["last"]
    moved = last["ddr_read_bytes"] + last["ddr_write_bytes"]
    assert moved == 2 * 1024 * 2048
    ideal = moved / 16
    assert ideal <= last["total_cycles"] <= 1.1 * ideal
    # Data phases of both channels are serialised on the bus, in program order.
    dmas = [r for r in last["records"] if r["opcode"] != "END"]
    for a, b in zip(dmas, dmas[1:]):
        assert b["end"] - a["end"] >= b["bus_bytes"] // 16
    assert last["total_cycles"] == dmas[-1]["end"]


@pytest.mark.parametrize("config", [NPU_REF, NPU_SMALL])
def test_compute_only_conv_cycles_equal_formula(rt, config):
    in_c, oc, oh, ow = 40, 48, 5, 6
    in_stride, w_stride, out_stride = align(8 * in_c * 2), align(9 * in_c * 2), align(ow * oc * 2)
    w_addr = 7 * in_stride
    out_addr = w_addr + oc * w_stride
    cmd = conv(0, 7, 8, in_c, in_stride, w_addr, w_stride, 3, 3, oc, NO_BIAS, out_addr, oh, ow, out_stride)
    mod = rt["create"]("c", pack_stream([], [cmd, command(END, [])], config=config))
    mod["c"]()
    last = json.loads(mod["get_profile"]())["last"]
    rows, cols, rate, overhead = config[1], config[2], config[3], config[12]
    passes = oh * ow * 9 * -(-in_c // rows) * -(-oc // cols)
    assert last["total_cycles"] == overhead + passes * rate
    assert last["mac_cycles"] == last["total_cycles"]
    assert last["macs"] == oh * ow * oc * 9 * in_c
    assert last["records"][0]["issue"] == 0 and last["records"][1]["issue"] == 1


def test_waits_count_outstanding_commands(rt):
    """A wait k on an engine holds a command until at most k of its commands are outstanding."""
    load = dma(DMA_LOAD, 0, 0, 0, 1, 128, 128, 128)  # 8 data cycles after 64 of latency
    small_conv = conv(0, 1, 1, 8, 128, 1024, 128, 1, 1, 8, NO_BIAS, 2048, 1, 1, 128, wait={DMA0: 1})
    cmds = [load, load, load, small_conv, command(END, [], wait=ALL_DONE)]
    mod = rt["create"]("w", pack_stream([], cmds, b"\0" * 128))
    mod["w"]()
    recs = json.loads(mod["get_profile"]())["last"]["records"]
    timing = [(r["issue"], r["start"], r["end"]) for r in recs]
    # Loads queue on channel 0; each data phase follows the previous one on the bus.
    assert timing[:3] == [(0, 0, 72), (1, 72, 144), (2, 144, 216)]
    assert timing[3] == (144, 144, 144 + 32 + 4)  # one load (the third) still outstanding
    assert timing[4] == (216, 216, 216)
