"""Validation of the int8 / depthwise / ADD / POOL commands and the I/O descriptors by the runtime's
stream checks (docs/npu.md section 6): bad fields are refused with their codes, mutated streams never crash."""

import random
import struct

import numpy as np

from int8_streams import add_cmd, conv_cmd, conv_int8_stream, pool_cmd, tensor, vector_stream
from npu_stream_pack import (
    ADD,
    ALL_DONE,
    CONV2D,
    DMA0,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    INT32,
    NCHW,
    NHWC,
    NO_BIAS,
    NPU_REF,
    OUTPUT,
    POOL,
    ROWS,
    T,
    align,
    command,
    dma,
    pack_stream,
    raises_code,
    refresh_crc,
)

# ---------------------------------------------------------------------------------------------
# Validation of the new commands and descriptors
# ---------------------------------------------------------------------------------------------


def one(cmd, config=NPU_REF):
    return pack_stream([], [cmd, command(END, [])], b"\0" * 256, 4096, config=config)


OK_ADD = dict(
    dtype=INT8,
    a_addr=0,
    a_stride=128,
    b_addr=128,
    b_stride=128,
    out_addr=256,
    out_stride=128,
    rows=1,
    row_elems=100,
    clip=(-128, 127),
    a_mult=2**30,
    b_mult=2**30,
    shift=31,
)
OK_POOL = dict(
    dtype=INT8,
    kind=1,
    in_addr=0,
    in_h=4,
    in_w=4,
    c=8,
    in_stride=128,
    out_addr=1024,
    out_h=2,
    out_w=2,
    out_stride=128,
    k=(2, 2),
    stride=(2, 2),
    clip=(-128, 127),
    scale=1.0,
)
OK_CONV8 = dict(
    dtype=INT8,
    in_addr=0,
    in_h=4,
    in_w=4,
    in_c=8,
    in_stride=128,
    w_addr=1024,
    w_stride=128,
    kh=3,
    kw=3,
    oc=8,
    bias_addr=2048,
    out_addr=4096,
    out_h=4,
    out_w=4,
    out_stride=128,
    pad=(1, 1),
    clip=(-128, 127),
)


def bad(code, rt, builder, base, **changes):
    raises_code(code, rt["validate"], one(builder(**{**base, **changes})))


def test_new_commands_validate(rt):
    rt["validate"](one(add_cmd(**OK_ADD)))
    rt["validate"](one(pool_cmd(**OK_POOL)))
    rt["validate"](one(conv_cmd(**OK_CONV8)))
    rt["validate"](one(conv_cmd(**{**OK_CONV8, "groups": 8, "w_stride": 128})))
    rt["validate"](one(add_cmd(**{**OK_ADD, "b_addr": 0})))  # a and b may alias
    rt["validate"](one(pool_cmd(**{**OK_POOL, "scale": 1e-45})))  # any finite S > 0
    # Channel slices (1.1): beat-aligned addresses, pixels further apart than their bytes.
    rt["validate"](one(pool_cmd(**{**OK_POOL, "in_addr": 16, "out_addr": 1040, "pstride": (16, 40)})))
    rt["validate"](one(conv_cmd(**{**OK_CONV8, "in_addr": 48, "out_addr": 4112, "pstride": (24, 32)})))
    rt["validate"](one(pool_cmd(**{**OK_POOL, "scale": 3.4e38})))
    rt["validate"](one(pool_cmd(**{**OK_POOL, "dtype": FP16, "clip": (0.0, 0.0), "c": 4, "scale": 0.0})))


def test_bad_conv_commands_are_refused(rt):
    for code, changes in [
        ("ERR_OP_NOT_SUPPORTED", dict(groups=2)),
        ("ERR_OP_NOT_SUPPORTED", dict(groups=8, oc=4)),
        ("ERR_OP_NOT_SUPPORTED", dict(groups=0)),
        ("ERR_BAD_STREAM", dict(bias_addr=NO_BIAS)),  # int8 needs its requant block
        ("ERR_BAD_STREAM", dict(in_zp=128)),
        ("ERR_BAD_STREAM", dict(out_zp=-129)),
        ("ERR_BAD_STREAM", dict(clip=(3, 2))),
        ("ERR_BAD_STREAM", dict(clip=(-129, 0))),
        ("ERR_BAD_STREAM", dict(act=1)),  # int8: act is 0
        ("ERR_BAD_STREAM", dict(dtype=FP16, in_zp=1, w_stride=256, clip=(0.0, 0.0))),
        ("ERR_INVALID_ADDR", dict(bias_addr=2097152 - 128)),  # 2 rows of 128 pass SRAM's end
        ("ERR_INVALID_ADDR", dict(bias_addr=2100)),  # misaligned
        ("ERR_INVALID_ADDR", dict(bias_addr=4096 - 128)),  # row S overlaps the output
        ("ERR_INVALID_ADDR", dict(out_addr=2048 + 128)),  # output on the block's row S
    ]:
        bad(code, rt, conv_cmd, OK_CONV8, **changes)
    # A dense weight row holds KH*KW*C elements (144 bytes for C = 16: more than its 128-byte
    # stride), a depthwise row KH*KW (9 bytes).
    c16 = {**OK_CONV8, "in_c": 16, "oc": 16, "bias_addr": 3072}
    raises_code("ERR_BAD_STREAM", rt["validate"], one(conv_cmd(**c16)))
    rt["validate"](one(conv_cmd(**c16, groups=16)))


def test_bad_vector_commands_are_refused(rt):
    for code, changes in [
        ("ERR_BAD_STREAM", dict(dtype=INT32)),
        ("ERR_BAD_STREAM", dict(rows=0)),
        ("ERR_BAD_STREAM", dict(shift=0)),
        ("ERR_BAD_STREAM", dict(shift=63)),
        ("ERR_BAD_STREAM", dict(a_mult=2**31)),
        ("ERR_BAD_STREAM", dict(b_zp=200)),
        ("ERR_BAD_STREAM", dict(clip=(0, 128))),
        ("ERR_BAD_STREAM", dict(act=2)),
        ("ERR_BAD_STREAM", dict(dtype=FP16, clip=(0.0, 0.0))),  # fp16 with int8 quant fields
        ("ERR_BAD_STREAM", dict(row_elems=129)),  # a row longer than its stride
        ("ERR_INVALID_ADDR", dict(out_addr=128)),  # output on b
        ("ERR_INVALID_ADDR", dict(a_stride=64)),
        ("ERR_INVALID_ADDR", dict(out_addr=2097152)),
    ]:
        bad(code, rt, add_cmd, OK_ADD, **changes)
    for code, changes in [
        ("ERR_BAD_STREAM", dict(kind=2)),
        ("ERR_OP_NOT_SUPPORTED", dict(stride=(3, 2))),
        ("ERR_BAD_STREAM", dict(k=(0, 2))),
        ("ERR_BAD_STREAM", dict(c=0)),
        ("ERR_BAD_STREAM", dict(scale=0.0)),
        ("ERR_BAD_STREAM", dict(scale=-0.0)),
        ("ERR_BAD_STREAM", dict(scale=-1.0)),
        ("ERR_BAD_STREAM", dict(scale=float("inf"))),
        ("ERR_BAD_STREAM", dict(scale=float("nan"))),
        ("ERR_BAD_STREAM", dict(dtype=FP16, clip=(0.0, 0.0), c=4, scale=1.0)),  # fp16: S is 0
        ("ERR_BAD_STREAM", dict(in_zp=-200)),
        ("ERR_BAD_STREAM", dict(pad=(2, 0))),  # a max window all padding
        ("ERR_BAD_STREAM", dict(out_h=4, stride=(2, 2))),  # last window past the tile
        ("ERR_INVALID_ADDR", dict(out_addr=256)),  # output on the input
        ("ERR_INVALID_ADDR", dict(in_addr=8)),  # not on a 16-byte beat
        ("ERR_BAD_STREAM", dict(pstride=(4, 0))),  # pixels of 8 bytes, 4 apart
        ("ERR_BAD_STREAM", dict(pstride=(0, 7))),
        ("ERR_BAD_STREAM", dict(pstride=(48, 0))),  # 3 * 48 + 8 > the row stride 128
    ]:
        bad(code, rt, pool_cmd, OK_POOL, **changes)
    # The average of a window in the padding is defined (0 + bias-free): accepted.
    rt["validate"](one(pool_cmd(**{**OK_POOL, "kind": 0, "pad": (2, 0)})))
    # fp16 vector ops need vector_lanes / 2 >= 1.
    tiny = NPU_REF[:10] + [1] + NPU_REF[11:]
    raises_code("ERR_BAD_STREAM", rt["validate"], one(add_cmd(**OK_ADD), tiny))
    # Unused operand words after the last operand stay zero.
    raises_code("ERR_BAD_STREAM", rt["validate"], one(add_cmd(**OK_ADD)[:-4] + b"\1\0\0\0"))


def test_io_descriptors(rt):
    view, host = [1, 1, 1, 64], [64]
    # int8 on the device, fp32 on the host is quantized staging: format 1.3 and a quantization table
    # (tests/runtime/test_quantized_staging.py), so in this 1.0 stream it is refused as too old a format.
    for dtype, host_dtype, code in [
        (INT8, INT8, None),
        (FP16, FP32, None),
        (INT8, FP32, "ERR_BAD_STREAM"),
        (FP16, INT8, "ERR_OP_NOT_SUPPORTED"),
        (INT32, INT32, "ERR_OP_NOT_SUPPORTED"),
    ]:
        t = [tensor(INPUT, 0, view, 0, 128, dtype=dtype, host_dtype=host_dtype, layout=ROWS, host_shape=host)]
        blob = pack_stream(t, [command(END, [])], b"", 256, 1, 0)
        if code is None:
            rt["validate"](blob)
        else:
            raises_code(code, rt["validate"], blob)


def test_int8_io_relayout_only(rt):
    """int8 host I/O: NCHW in, ROWS out, bytes moved unchanged (no conversion)."""
    C, H, W = 3, 4, 5
    stride = 128
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], 0, stride, layout=NCHW, host_shape=[1, C, H, W]),
        tensor(OUTPUT, 0, [1, H, W, C], H * stride, stride, layout=NHWC, host_shape=[1, H, W, C]),
    ]
    cmds = [
        dma(DMA_LOAD, 0, 0, 0, H, W * C, stride, stride),
        dma(DMA_STORE, 0, 0, H * stride, H, W * C, stride, stride, wait={DMA0: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    mod = rt["create"]("r", pack_stream(tensors, cmds, b"", 2 * H * stride, 1, 1))
    x = np.arange(-60, 60, 2, dtype=np.int8).reshape(1, C, H, W)
    out = np.zeros((1, H, W, C), np.int8)
    mod["r"](T(x), T(out))
    np.testing.assert_array_equal(out, x.transpose(0, 2, 3, 1))


def test_mutated_int8_streams_never_crash(rt):
    """Random word mutations (CRC fixed up) of int8 CONV2D / ADD / POOL streams: each validates or
    raises a coded error. Mutations of the quantization operands, which leave the sizes alone,
    are also run: they must compute or fail with a code, never crash."""
    conv_blob = conv_int8_stream(1)[0]
    dw_blob = conv_int8_stream(8)[0]
    add_blob = vector_stream(ADD, INT8, (3, 100), clip=(-128, 127), a_mult=2**30, b_mult=2**30, shift=30)
    pool_blob = vector_stream(
        POOL, INT8, ((1, 6, 6, 8), (3, 3)), kind=1, k=(3, 3), stride=(2, 2), pad=(1, 1), clip=(-128, 127), scale=1.0
    )
    rng = random.Random(1)
    interesting = [
        0,
        1,
        2,
        30,
        31,
        62,
        63,
        127,
        128,
        129,
        2**30,
        2**31 - 1,
        0x7FFFFFFF,
        0x80000000,
        0xFFFFFF80,
        0xFFFFFF81,
        0xFFFFFFFF,
        # fp32 scales: 1.0, -1.0, FLT_MAX, the smallest subnormal, inf, -inf, NaN
        0x3F800000,
        0xBF800000,
        0x7F7FFFFF,
        0x00000001,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
    ]
    for blob in [conv_blob, dw_blob, add_blob, pool_blob]:
        n_tensors, n_cmds = struct.unpack_from("<2I", blob, 16)
        end = 128 + 64 * n_tensors + 128 * n_cmds
        for _ in range(4000):
            b = bytearray(blob)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(16, end, 4)
                b[pos : pos + 4] = struct.pack("<I", rng.choice(interesting + [rng.getrandbits(32)]))
            try:
                rt["validate"](refresh_crc(bytes(b)))
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)

    # Run mutations of the quantization words only (act .. end of the operands; for POOL also
    # the first unused word 24, which held the old shift and must now be 0), and of the conv's
    # requantization block (bias and S rows: data, checked by the kernel when it runs).
    def operand_positions(blob, opcode, words):
        n_tensors, n_cmds = struct.unpack_from("<2I", blob, 16)
        cmd_base = 128 + 64 * n_tensors
        idx = next(i for i in range(n_cmds) if blob[cmd_base + 128 * i] == opcode)
        return [cmd_base + 128 * idx + 4 * w for w in words]

    q_base = struct.unpack_from("<I", conv_blob, 24)[0] + 8 * align(9 * 8)  # OC = 8, C = 8
    block = [q_base + row * 128 + 4 * o for row in range(2) for o in range(8)]
    cases = [
        (add_blob, operand_positions(add_blob, ADD, range(10, 19))),
        (pool_blob, operand_positions(pool_blob, POOL, range(18, 25))),
        (conv_blob, operand_positions(conv_blob, CONV2D, range(23, 29))),
        (conv_blob, block),
    ]
    for blob, positions in cases:
        n_tensors = struct.unpack_from("<I", blob, 16)[0]
        for trial in range(300):
            b = bytearray(blob)
            for _ in range(rng.randint(1, 2)):
                pos = rng.choice(positions)
                b[pos : pos + 4] = struct.pack("<I", rng.choice(interesting + [rng.getrandbits(32)]))
            try:
                mod = rt["create"]("m", refresh_crc(bytes(b)))
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)
                continue
            args = []
            for t in range(n_tensors):
                role, _, _, _, _, rank, *shape = struct.unpack_from("<10I", blob, 128 + 64 * t)
                if role in (INPUT, OUTPUT):
                    args.append(T(np.full(shape[:rank], trial % 256 - 128, np.int8)))
            try:
                mod["m"](*args)
            except RuntimeError as e:
                assert str(e).startswith("ERR_"), str(e)
