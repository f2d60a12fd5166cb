"""Hand-packed streams of one dense layer with group-wise int4 weights (CONV2D's w_dtype int4 / uint4 | g << 8,
format 1.4; docs/npu.md sections 2 and 6), for the stream tests (tests/runtime/test_reference_npu_w4.py) and the
stream fuzzer's seeds (benchmarks/fuzz_streams.py): the compiler does not emit them yet."""

import numpy as np

from int8_streams import conv_cmd
from npu_ref import int4
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    MAC,
    NHWC,
    OUTPUT,
    align,
    command,
    dma,
    pack_stream,
    tensor,
)

V14 = (1, 4)


class Dense:
    """One dense layer with int4 weights: x [M, K] -> [M, N], its operands and the numpy model's output."""

    def __init__(self, rng, M, K, N, group, signed, int8=False):
        self.M, self.K, self.N, self.group, self.signed, self.int8 = M, K, N, group, signed, int8
        G = K // group
        self.codes = rng.integers(-8, 8, (N, K)) if signed else rng.integers(0, 16, (N, K))
        self.zp = None if signed else rng.integers(0, 16, (G, N))
        # fp16 scales over wide exponents (subnormal ones included) so every multiply rounds.
        self.scales = (rng.uniform(0.5, 1.0, (G, N)) * 2.0 ** rng.integers(-16, 2, (G, N))).astype(np.float16)
        self.scales[self.scales == 0] = np.float16(2.0**-24)
        self.bias = (rng.standard_normal(N) * 4).astype(np.float32)
        if int8:
            self.x = rng.integers(-128, 128, (M, K)).astype(np.int8)
            self.z_x, self.z_y = int(rng.integers(-20, 21)), int(rng.integers(-10, 11))
            self.S = (rng.uniform(0.5, 1.0, N) * 2.0 ** rng.integers(-12, -4, N)).astype(np.float32)
            self.bias = (self.bias * 200).astype(np.float32)
        else:
            self.x = (rng.standard_normal((M, K)) * 2.0 ** rng.integers(-10, 4, (M, K))).astype(np.float16)
            self.z_x = self.z_y = 0
            self.S = None

    def block(self):
        return int4.block(self.bias, self.scales, self.zp, 128, self.S)

    def expect(self, act=0, clip=(0.0, 0.0), lo=-128, hi=127):
        if self.int8:
            return int4.w4a8(self.x, self.z_x, self.codes, self.scales, self.zp, self.bias, self.S, self.z_y, lo, hi)
        return int4.w4a16(self.x, self.codes, self.scales, self.zp, self.bias, act, clip).astype(np.float32)


def w4_stream(d, act=0, clip=None, block=None, **ops):
    """Host rows -> DMA (input; packed weights as one row; the block as one row) -> CONV2D -> DMA -> host. `ops`
    override CONV2D operands (for the bad-stream tests)."""
    M, K, N = d.M, d.K, d.N
    clip = clip or ((-128, 127) if d.int8 else (0.0, 0.0))
    dt, host, elem = (INT8, INT8, 1) if d.int8 else (FP16, FP32, 2)
    packed = int4.pack_weights(d.codes).tobytes()
    block = d.block() if block is None else block
    in_stride, out_stride = align(M * K * elem), align(M * N * elem)
    s_w = in_stride
    s_q = align(s_w + len(packed))
    s_out = align(s_q + len(block))
    weights = packed.ljust(align(len(packed)), b"\0")
    q_ddr = len(weights)
    weights += block.ljust(align(len(block)), b"\0")
    in_ddr = len(weights)
    out_ddr = in_ddr + in_stride
    tensors = [
        tensor(INPUT, 0, [1, 1, M, K], in_ddr, in_stride, dt, host, NHWC, [1, 1, M, K]),
        tensor(OUTPUT, 0, [1, 1, M, N], out_ddr, out_stride, dt, host, NHWC, [1, 1, M, N]),
    ]
    args = dict(stride=(1, 1), pad=(0, 0), act=act, clip=clip, in_zp=d.z_x, out_zp=d.z_y, wait={DMA0: 0, DMA1: 0})
    args["w_dtype"] = int4.w_dtype(d.signed, d.group)
    conv = conv_cmd(dt, 0, 1, M, K, in_stride, s_w, K // 2, 1, 1, N, s_q, s_out, 1, M, out_stride, **args)
    if ops:
        words = dict(zip(_CONV_FIELDS, np.frombuffer(conv[4:], np.uint32).tolist(), strict=False))
        words.update(ops)
        conv = command(0x10, words, wait={DMA0: 0, DMA1: 0})
    cmds = [
        dma(DMA_LOAD, 0, in_ddr, 0, 1, M * K * elem, in_stride, in_stride),
        dma(DMA_LOAD, 1, 0, s_w, 1, len(packed), align(len(packed)), align(len(packed))),
        dma(DMA_LOAD, 1, q_ddr, s_q, 1, len(block), align(len(block)), align(len(block))),
        conv,
        dma(DMA_STORE, 0, s_out, out_ddr, 1, M * N * elem, out_stride, out_stride, wait={MAC: 0}),
        command(END, [], wait=ALL_DONE),
    ]
    ddr = out_ddr + out_stride
    return pack_stream(tensors, cmds, weights, ddr, 1, 1, version=V14, sram_used=s_out + out_stride)


_CONV_FIELDS = [
    "dtype", "in_addr", "in_h", "in_w", "in_c", "in_stride", "w_addr", "w_stride", "kh", "kw", "oc", "bias_addr",
    "out_addr", "out_h", "out_w", "out_stride", "stride_h", "stride_w", "dil_h", "dil_w", "pad_top", "pad_left",
    "act", "clip_lo", "clip_hi", "groups", "in_zp", "out_zp", "in_pstride", "out_pstride", "w_dtype",
]  # fmt: skip
