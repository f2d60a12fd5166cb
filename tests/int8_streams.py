"""Hand-packed int8 / depthwise / ADD / POOL command streams (docs/npu.md section 6, packed through the
contract's layout by npu_stream_pack.py), for the runtime tests that run or validate them."""

import functools
import struct

import numpy as np

import npu_stream_pack
from conftest import extreme_int8
from npu_ref import int8, out_size
from npu_stream_pack import (
    ADD,
    ALL_DONE,
    BIAS,
    CONV2D,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    INT32,
    MAC,
    NCHW,
    NHWC,
    NO_IO,
    NPU_REF,
    OUTPUT,
    POOL,
    ROWS,
    VECTOR,
    WEIGHT,
    align,
    command,
    dma,
    f32_bits,
    pack_stream,
)

# Tensor descriptors here default to int8 on the NPU and on the host.
tensor = functools.partial(npu_stream_pack.tensor, dtype=INT8, host_dtype=INT8)


def clip_words(dtype, clip):
    fmt = "<2f" if dtype == FP16 else "<2i"
    return list(struct.unpack("<2I", struct.pack(fmt, *clip)))


def conv_cmd(
    dtype,
    in_addr,
    in_h,
    in_w,
    in_c,
    in_stride,
    w_addr,
    w_stride,
    kh,
    kw,
    oc,
    bias_addr,
    out_addr,
    out_h,
    out_w,
    out_stride,
    stride=(1, 1),
    dil=(1, 1),
    pad=(0, 0),
    act=0,
    clip=(0, 0),
    groups=1,
    in_zp=0,
    out_zp=0,
    pstride=(0, 0),
    wait=None,
    w_dtype=0,
):
    lo, hi = clip_words(dtype, clip)
    return command(
        CONV2D,
        dict(
            dtype=dtype,
            in_addr=in_addr,
            in_h=in_h,
            in_w=in_w,
            in_c=in_c,
            in_stride=in_stride,
            w_addr=w_addr,
            w_stride=w_stride,
            kh=kh,
            kw=kw,
            oc=oc,
            bias_addr=bias_addr,
            out_addr=out_addr,
            out_h=out_h,
            out_w=out_w,
            out_stride=out_stride,
            stride_h=stride[0],
            stride_w=stride[1],
            dil_h=dil[0],
            dil_w=dil[1],
            pad_top=pad[0],
            pad_left=pad[1],
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            groups=groups,
            in_zp=in_zp,
            out_zp=out_zp,
            in_pstride=pstride[0],
            out_pstride=pstride[1],
            w_dtype=w_dtype,
        ),
        wait,
    )


def add_cmd(
    dtype,
    a_addr,
    a_stride,
    b_addr,
    b_stride,
    out_addr,
    out_stride,
    rows,
    row_elems,
    act=0,
    clip=(0, 0),
    a_zp=0,
    b_zp=0,
    out_zp=0,
    a_mult=0,
    b_mult=0,
    shift=0,
    wait=None,
):
    lo, hi = clip_words(dtype, clip)
    return command(
        ADD,
        dict(
            dtype=dtype,
            a_addr=a_addr,
            a_stride=a_stride,
            b_addr=b_addr,
            b_stride=b_stride,
            out_addr=out_addr,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            a_zp=a_zp,
            b_zp=b_zp,
            out_zp=out_zp,
            a_mult=a_mult,
            b_mult=b_mult,
            shift=shift,
        ),
        wait,
    )


def pool_cmd(
    dtype,
    kind,
    in_addr,
    in_h,
    in_w,
    c,
    in_stride,
    out_addr,
    out_h,
    out_w,
    out_stride,
    k,
    stride=(1, 1),
    pad=(0, 0),
    act=0,
    clip=(0, 0),
    in_zp=0,
    out_zp=0,
    scale=0.0,
    pstride=(0, 0),
    wait=None,
):
    """`scale` is S as a float (packed as its fp32 bits; 0.0 for fp16)."""
    lo, hi = clip_words(dtype, clip)
    return command(
        POOL,
        dict(
            dtype=dtype,
            kind=kind,
            in_addr=in_addr,
            in_h=in_h,
            in_w=in_w,
            c=c,
            in_stride=in_stride,
            out_addr=out_addr,
            out_h=out_h,
            out_w=out_w,
            out_stride=out_stride,
            kh=k[0],
            kw=k[1],
            stride_h=stride[0],
            stride_w=stride[1],
            pad_top=pad[0],
            pad_left=pad[1],
            act=act,
            clip_lo=lo,
            clip_hi=hi,
            in_zp=in_zp,
            out_zp=out_zp,
            scale=f32_bits(scale),
            in_pstride=pstride[0],
            out_pstride=pstride[1],
        ),
        wait,
    )


def rows_bytes(a2d, stride):
    """A 2-D uint8 view as rows padded to `stride` bytes."""
    return b"".join(r.tobytes().ljust(stride, b"\0") for r in a2d)


def conv_int8_stream(
    groups, C=8, OC=8, H=6, W=7, k=3, stride=1, pad=1, zx=-5, zy=4, clamp=(-128, 127), seed=3, config=NPU_REF
):
    """NCHW int8 input -> DMA x3 -> int8 CONV2D (dense or depthwise) -> DMA -> NHWC int8 output.
    Every address and row stride, the requantization rows included, is a multiple of the
    configuration's alignment."""
    a = config[11]
    rng = np.random.default_rng(seed)
    wc = C // groups
    wt = extreme_int8(rng, (OC, k, k, wc))
    bias = rng.integers(-5000, 5000, OC).astype(np.int32)
    S = int8.conv_scale(0.02, rng.uniform(0.0005, 0.004, OC) * 0.1 / 0.02, 0.1)
    OH = out_size(H, k, stride, 1, pad, pad)
    OW = out_size(W, k, stride, 1, pad, pad)
    w_row, w_stride, q_stride = k * k * wc, align(k * k * wc, a), align(OC * 4, a)
    weights = rows_bytes(wt.reshape(OC, -1).view(np.uint8), w_stride)
    q_addr = len(weights)
    weights += rows_bytes(np.stack([bias, S.view(np.int32)]).view(np.uint8), q_stride)
    in_addr, in_stride = len(weights), align(W * C, a)
    out_addr, out_stride = in_addr + H * in_stride, align(OW * OC, a)
    ddr = out_addr + OH * out_stride
    s_in, s_w = 0, align(H * in_stride, a)
    s_q = s_w + OC * w_stride
    s_out = s_q + 2 * q_stride
    tensors = [
        tensor(INPUT, 0, [1, H, W, C], in_addr, in_stride, layout=NCHW, host_shape=[1, C, H, W]),
        tensor(OUTPUT, 0, [1, OH, OW, OC], out_addr, out_stride, host_shape=[1, OH, OW, OC]),
        tensor(WEIGHT, NO_IO, [1, OC, 1, w_row], 0, w_stride),
        tensor(BIAS, NO_IO, [1, 2, 1, OC], q_addr, q_stride, dtype=INT32, host_dtype=INT32),
    ]
    commands = [
        dma(DMA_LOAD, 0, in_addr, s_in, H, W * C, in_stride, in_stride),
        dma(DMA_LOAD, 1, 0, s_w, OC, w_row, w_stride, w_stride),
        dma(DMA_LOAD, 0, q_addr, s_q, 2, OC * 4, q_stride, q_stride),
        conv_cmd(
            INT8,
            s_in,
            H,
            W,
            C,
            in_stride,
            s_w,
            w_stride,
            k,
            k,
            OC,
            s_q,
            s_out,
            OH,
            OW,
            out_stride,
            stride=(stride, stride),
            pad=(pad, pad),
            clip=clamp,
            groups=groups,
            in_zp=zx,
            out_zp=zy,
            wait={DMA0: 0, DMA1: 0},
        ),
        dma(DMA_STORE, 0, s_out, out_addr, OH, OW * OC, out_stride, out_stride, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, commands, weights, ddr, 1, 1, config, s_out + OH * out_stride)

    def expected(x_nchw):
        return int8.conv2d(
            x_nchw.transpose(0, 2, 3, 1),
            wt,
            bias,
            S,
            (OH, OW),
            (stride, stride),
            (1, 1),
            (pad, pad),
            groups,
            zx,
            zy,
            *clamp,
        )

    return blob, expected, (OH, OW)


def vector_stream(op, dtype, shape, config=NPU_REF, **kw):
    """ADD: two ROWS inputs [R, K] -> out. POOL: NHWC input -> out. Host int8, or fp32 for fp16."""
    elem = 1 if dtype == INT8 else 2
    host = INT8 if dtype == INT8 else FP32
    if op == ADD:
        R, K = shape
        stride = align(K * elem)
        size = R * stride
        view = [1, R, 1, K]
        tensors = [
            tensor(INPUT, i, view, i * size, stride, dtype=dtype, host_dtype=host, layout=ROWS, host_shape=[R, K])
            for i in range(2)
        ]
        tensors.append(
            tensor(OUTPUT, 0, view, 2 * size, stride, dtype=dtype, host_dtype=host, layout=ROWS, host_shape=[R, K])
        )
        commands = [
            dma(DMA_LOAD, 0, 0, 0, R, K * elem, stride, stride),
            dma(DMA_LOAD, 1, size, size, R, K * elem, stride, stride),
            add_cmd(dtype, 0, stride, size, stride, 2 * size, stride, R, K, wait={DMA0: 0, DMA1: 0}, **kw),
            dma(DMA_STORE, 0, 2 * size, 2 * size, R, K * elem, stride, stride, wait={VECTOR: 0}),
            command(END, [], wait=ALL_DONE),
        ]
        return pack_stream(tensors, commands, b"", 3 * size, 2, 1, config)
    (N, H, W, C), (OH, OW) = shape
    in_stride, out_stride = align(W * C * elem), align(OW * C * elem)
    in_size = H * in_stride
    tensors = [
        tensor(
            INPUT, 0, [1, H, W, C], 0, in_stride, dtype=dtype, host_dtype=host, layout=NHWC, host_shape=[1, H, W, C]
        ),
        tensor(
            OUTPUT,
            0,
            [1, OH, OW, C],
            in_size,
            out_stride,
            dtype=dtype,
            host_dtype=host,
            layout=NHWC,
            host_shape=[1, OH, OW, C],
        ),
    ]
    commands = [
        dma(DMA_LOAD, 1, 0, 0, H, W * C * elem, in_stride, in_stride),
        pool_cmd(dtype, kw.pop("kind"), 0, H, W, C, in_stride, in_size, OH, OW, out_stride, wait={DMA1: 0}, **kw),
        dma(DMA_STORE, 0, in_size, in_size, OH, OW * C * elem, out_stride, out_stride, wait={VECTOR: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    return pack_stream(tensors, commands, b"", in_size + OH * out_stride, 1, 1, config)


def vector_cycles(config, dtype, steps):
    lanes = config[10] if dtype == INT8 else config[10] // 2
    return config[12] + -(-steps // lanes)
