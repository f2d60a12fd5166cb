"""The fast kernels (src/kernels/fast) give the reference kernels' bits at every level, for any operands.

Builder-style testers (as XNNPACK's): `Conv2DTester().input(9, 7, 20).kernel(3, 3).test(level)` builds one
command's operand words and random SRAM buffers, runs the reference (level "ref") and `level` through
tvm_npu.kernels.run_*, and compares the output buffers byte for byte — including the bytes a kernel must
not touch (row padding, the other channels of a slice). Seeded loops draw shapes, strides, dilations,
paddings, pixel strides, zero points, clamps, scales (with exact ties) and biases (near the int32 wrap).
Every level this CPU supports runs, on 1 and 3 threads.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import tvm_npu
from npu_ref import exact
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    INPUT,
    INT8,
    INT16,
    OUTPUT,
    ROWS,
    T,
    align,
    command,
    dma,
    f32_bits,
    pack_stream,
    raises_code,
    runtime_functions,
    tensor,
    u32,
)

F = runtime_functions(
    {
        "conv": "tvm_npu.kernels.run_conv2d",
        "add": "tvm_npu.kernels.run_add",
        "eltwise": "tvm_npu.kernels.run_eltwise",
        "unary": "tvm_npu.kernels.run_unary",
        "create": "runtime.NPUModuleCreate",
    }
)
ORDER = ["portable", "avx2", "avx512vnni"]
LEVELS = ORDER[: ORDER.index(tvm_npu.runtime.best_kernel_level()) + 1]
NO_BIAS = 0xFFFFFFFF


@pytest.fixture(params=[1, 3], ids=["1thread", "3threads"])
def threads(request):
    before = tvm_npu.runtime.threads()
    tvm_npu.runtime.set_threads(request.param)
    yield request.param
    tvm_npu.runtime.set_threads(before)


SPECIALS = np.array(
    [0x7C01, 0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x0001, 0x8000, 0x0000, 0x7BFF], np.uint16
)  # NaNs, infs, ...


def halves(rng, n, scale=1.0) -> bytes:
    """n random fp16 values; one draw in three also holds signalling / quiet NaNs, infinities,
    subnormals and -0 (the fast kernels store NaN lanes through the reference's conversion)."""
    h = (rng.standard_normal(n) * scale).astype(np.float16).view(np.uint16)
    if rng.random() < 0.33:
        at = rng.integers(0, n, max(1, n // 50))
        h[at] = rng.choice(SPECIALS, len(at))
    return h.tobytes()


def assert_same(got, want, dtype, what=""):
    """Byte for byte; on the fp16 datapath a NaN matches any NaN. IEEE leaves open which payload the sum
    of two NaNs carries: x86 returns the first operand's, and which operand comes first is the
    compiler's choice (`acc + p` and `p + acc` are the same C++), so the reference's own NaN payloads
    differ between builds of it (seen: -O2 with sanitizers vs Release). NaN-ness and every other bit
    must match."""
    got, want = bytes(got), bytes(want)
    if dtype == INT8 or got == want:
        assert got == want, what
        return
    g, w = np.frombuffer(got, np.uint16), np.frombuffer(want, np.uint16)
    nan = lambda h: (h & 0x7C00) == 0x7C00 and (h & 0x3FF) != 0  # noqa: E731
    bad = [i for i in np.nonzero(g != w)[0] if not (nan(int(g[i])) and nan(int(w[i])))]
    assert not bad, f"{what}: {len(bad)} elements differ, first at {bad[0]}"


def words(*values) -> bytes:
    return struct.pack(f"<{len(values)}I", *[u32(v) for v in values])


class Conv2DTester:
    """One CONV2D command (docs/npu.md sections 2-4) with random contents, checked against the reference."""

    def __init__(self, dtype=INT8, seed=0):
        self.rng = np.random.default_rng(seed)
        self.dtype, self._in, self._oc, self._k = dtype, (5, 6, 8), 8, (1, 1)
        self._stride, self._dil, self._pad, self._out = (1, 1), (1, 1), (0, 0), None
        self._dw, self._in_px, self._out_px, self._row_pad = False, 0, 0, 0
        self._zp, self._clamp, self._scale, self._bias, self._act = (0, 0), (-128, 127), None, None, 0

    def input(self, h, w, c):
        self._in = (h, w, c)
        return self

    def out_channels(self, oc):
        self._oc = oc
        return self

    def kernel(self, kh, kw):
        self._k = (kh, kw)
        return self

    def stride(self, sh, sw):
        self._stride = (sh, sw)
        return self

    def dilation(self, dh, dw):
        self._dil = (dh, dw)
        return self

    def padding(self, top, left):
        self._pad = (top, left)
        return self

    def output(self, oh, ow):
        self._out = (oh, ow)
        return self

    def depthwise(self, on=True):
        self._dw = on
        return self

    def pixel_gaps(self, in_extra, out_extra):
        """Extra elements between pixels (a channel slice of a wider tensor, section 3)."""
        self._in_px, self._out_px = in_extra, out_extra
        return self

    def row_padding(self, elems):
        self._row_pad = elems
        return self

    def zero_points(self, zx, zy):
        self._zp = (zx, zy)
        return self

    def clamp(self, lo, hi):
        self._clamp = (lo, hi)
        return self

    def scales(self, s):
        self._scale = np.asarray(s, np.float32)
        return self

    def biases(self, b):
        self._bias = np.asarray(b, np.int64)
        return self

    def activation(self, act, lo=0.0, hi=6.0):
        self._act, self._fclamp = act, (lo, hi)
        return self

    def _default_out(self):
        (h, w, _), (kh, kw), (sh, sw), (dh, dw), (pt, pl) = self._in, self._k, self._stride, self._dil, self._pad
        # The bottom / right padding is implicit (rows past the tile read as zero): up to kh - 1 of them.
        oh = max(1, (h + pt + (kh - 1) - dh * (kh - 1) - 1) // sh + 1)
        ow = max(1, (w + pl + (kw - 1) - dw * (kw - 1) - 1) // sw + 1)
        return oh, ow

    def build(self):
        """(operand words, in, w, bias, out) as bytes, for one call of run_conv2d."""
        rng, elem = self.rng, 1 if self.dtype == INT8 else 2
        h, w, c = self._in
        oc = c if self._dw else self._oc
        kh, kw = self._k
        oh, ow = self._out or self._default_out()
        in_px, out_px = (c + self._in_px) * elem, (oc + self._out_px) * elem
        in_stride = (w - 1) * in_px + c * elem + self._row_pad * elem
        out_stride = (ow - 1) * out_px + oc * elem + self._row_pad * elem
        w_tap = 1 if self._dw else c
        w_stride = kh * kw * w_tap * elem + int(rng.integers(0, 3)) * elem  # rows packed or not
        if self.dtype == INT8:
            x = rng.integers(0, 256, h * in_stride, dtype=np.uint8).tobytes()
            wt = rng.integers(0, 256, oc * w_stride, dtype=np.uint8).tobytes()
            k = kh * kw * w_tap
            scale = self._scale if self._scale is not None else rng.uniform(0.3, 3.0, oc) / (k * 128)
            bias = self._bias if self._bias is not None else rng.integers(-(2**16), 2**16, oc)
            row = align(oc * 4)
            block = bytearray(2 * row)
            block[: oc * 4] = np.asarray(bias, np.int64).astype(np.uint32).tobytes()
            block[row : row + oc * 4] = np.broadcast_to(scale, (oc,)).astype(np.float32).tobytes()
            zx, zy = self._zp
            lo, hi = self._clamp
            tail = (0, lo, hi, oc if self._dw else 1, zx, zy)
            bias_bytes = bytes(block)
        else:
            x = halves(rng, h * in_stride // 2)
            wt = halves(rng, oc * w_stride // 2, 0.3)
            bias_bytes = rng.standard_normal(oc).astype(np.float32).tobytes() if self._bias is not False else b""
            lo, hi = getattr(self, "_fclamp", (0.0, 6.0))
            tail = (self._act, f32_bits(lo), f32_bits(hi), oc if self._dw else 1, 0, 0)
        out = rng.integers(0, 256, oh * out_stride, dtype=np.uint8).tobytes()
        op = words(
            self.dtype,
            0,
            h,
            w,
            c,
            in_stride,
            0,
            w_stride,
            kh,
            kw,
            oc,
            NO_BIAS if not bias_bytes else 0,
            0,
            oh,
            ow,
            out_stride,
            *self._stride,
            *self._dil,
            *self._pad,
            *tail,
            in_px if self._in_px else 0,
            out_px if self._out_px else 0,
            0,  # w_dtype: the weights have dtype (int8 weights under fp16 run the reference kernel)
        )
        return op, x, wt, bias_bytes, out

    def test(self, level, cache_key=-1):
        args = self.build()
        want = F["conv"]("ref", *args, 128, -1)
        got = F["conv"](level, *args, 128, cache_key)
        assert_same(got, want, self.dtype, self.describe())
        return self

    def describe(self):
        return (
            f"in {self._in} oc {self._oc} k {self._k} stride {self._stride} dil {self._dil} pad {self._pad} "
            f"out {self._out} dw {self._dw} gaps {self._in_px, self._out_px} zp {self._zp} clamp {self._clamp}"
        )


def random_conv(seed, dtype=INT8):
    rng = np.random.default_rng(seed)
    t = Conv2DTester(dtype, seed=seed + 1000)
    dw = rng.random() < 0.35
    kh, kw = (int(v) for v in rng.choice([1, 1, 2, 3, 3, 5], 2))
    c = int(rng.choice([1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 64, 70]))
    t.input(int(rng.integers(1, 12)), int(rng.integers(1, 12)), c).kernel(kh, kw).depthwise(dw)
    t.out_channels(int(rng.choice([1, 5, 8, 16, 17, 24, 32, 33, 48, 64, 65, 100])))
    t.stride(int(rng.integers(1, 3)), int(rng.integers(1, 3))).dilation(
        int(rng.integers(1, 3)), int(rng.integers(1, 3))
    )
    t.padding(int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    if rng.random() < 0.3:
        t.pixel_gaps(int(rng.integers(0, 20)), int(rng.integers(0, 20)))
    if rng.random() < 0.3:
        t.row_padding(int(rng.integers(1, 40)))
    if rng.random() < 0.2:
        t.output(int(rng.integers(1, 14)), int(rng.integers(1, 14)))
    if dtype == INT8:
        zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
        lo = int(rng.integers(-128, 20))
        t.zero_points(zx, zy).clamp(lo, int(rng.integers(lo, 128)))
        oc = c if dw else t._oc
        if rng.random() < 0.2:  # exact ties of round-half-even: S = 2^-j with small sums
            t.scales(np.float32(2.0 ** -int(rng.integers(1, 4))) * np.ones(oc, np.float32))
        if rng.random() < 0.2:  # accumulators that wrap around int32
            t.biases(rng.choice([2**31 - 1, -(2**31), 2**31 - 5000, -(2**31) + 5000], oc))
    else:
        t.activation(int(rng.integers(0, 3)), float(rng.uniform(-2, 0)), float(rng.uniform(0, 3)))
        if rng.random() < 0.2:
            t._bias = False
    return t


@pytest.mark.parametrize("level", LEVELS)
def test_conv2d_int8_random_operands_match_the_reference(level, threads):
    for seed in range(150):
        random_conv(seed).test(level)


@pytest.mark.parametrize("level", LEVELS)
def test_conv2d_fp16_random_operands_match_the_reference(level, threads):
    for seed in range(60):
        random_conv(seed, FP16).test(level)


@pytest.mark.parametrize("level", LEVELS)
def test_conv2d_fp16_depthwise_mobilenet_shapes(level, threads):
    """fp16 depthwise runs on 16-channel lanes at the AVX-512 level: 3x3 at stride 1 and 2, channel counts
    that are and are not multiples of 16, a relu6 clip and a dilated 5x5."""
    Conv2DTester(FP16, seed=5).input(14, 14, 144).kernel(3, 3).padding(1, 1).depthwise().activation(2, 0.0, 6.0).test(
        level
    )
    Conv2DTester(FP16, seed=6).input(15, 15, 40).kernel(3, 3).stride(2, 2).depthwise().test(level)
    Conv2DTester(FP16, seed=7).input(9, 9, 17).kernel(5, 5).dilation(2, 2).padding(4, 4).depthwise().test(level)


@pytest.mark.parametrize("level", LEVELS)
def test_conv2d_int8_mobilenet_shapes(level, threads):
    """The shapes MobileNetV2 runs (1x1 expand / project, 3x3 depthwise at stride 1 and 2, the 3x3 stem),
    large enough to be split into many tiles over the threads."""
    Conv2DTester(seed=1).input(16, 16, 3).kernel(3, 3).stride(2, 2).padding(1, 1).out_channels(32).test(level)
    Conv2DTester(seed=2).input(14, 14, 24).out_channels(144).zero_points(-3, 7).clamp(7, 127).test(level)
    Conv2DTester(seed=3).input(14, 14, 144).kernel(3, 3).padding(1, 1).depthwise().zero_points(5, -2).test(level)
    Conv2DTester(seed=4).input(15, 15, 96).kernel(3, 3).stride(2, 2).padding(0, 0).depthwise().test(level)
    Conv2DTester(seed=5).input(7, 7, 160).out_channels(960).zero_points(-128, 127).test(level)
    Conv2DTester(seed=6).input(1, 1, 1280).out_channels(1000).test(level)


@pytest.mark.parametrize("level", LEVELS)
def test_conv2d_int8_weight_cache_repacks_changed_weights(level):
    """One cache key, different weights per call: each result is the reference's for its own weights."""
    for seed in range(6):
        Conv2DTester(seed=seed).input(4, 5, 20).out_channels(40).kernel(1, 3).padding(0, 1).test(level, cache_key=7)
        Conv2DTester(seed=seed).input(4, 5, 20).out_channels(40).kernel(1, 3).padding(0, 1).test(level, cache_key=7)


def test_conv2d_bad_scale_is_refused_as_the_reference_does():
    t = Conv2DTester(seed=3).input(3, 3, 8).out_channels(8).scales([1.0] * 7 + [float("nan")])
    args = t.build()
    msgs = []
    for level in ["ref"] + LEVELS:
        with pytest.raises(RuntimeError) as info:
            F["conv"](level, *args, 128, -1)
        msgs.append(str(info.value).split("\n")[0])
    assert len(set(msgs)) == 1 and msgs[0].startswith("ERR_BAD_STREAM"), msgs


class AddTester:
    """One ADD command (section 2's int8 rule, or fp16), random contents, checked against the reference."""

    def __init__(self, seed=0, dtype=INT8):
        self.rng, self.dtype = np.random.default_rng(seed), dtype

    def test(self, level):
        rng, elem = self.rng, 1 if self.dtype == INT8 else 2
        rows, n = int(rng.integers(1, 6)), int(rng.integers(1, 70))
        strides = [n * elem + int(rng.integers(0, 9)) * elem for _ in range(3)]
        bufs = [rng.integers(0, 256, rows * s, dtype=np.uint8).tobytes() for s in strides]
        if self.dtype == INT8:
            shift = int(rng.integers(1, 63))
            top = min(2**31 - 1, 2**shift * 4)
            ma, mb = (int(v) for v in rng.integers(0, top, 2))
            lo = int(rng.integers(-128, 0))
            za, zb, zy = (int(v) for v in rng.integers(-128, 128, 3))
            tail = (0, lo, int(rng.integers(lo, 128)), za, zb, zy, ma, mb, shift)
        else:
            bufs[:2] = [halves(rng, len(b) // 2) for b in bufs[:2]]
            tail = (int(rng.integers(0, 3)), f32_bits(-1.0), f32_bits(2.0), 0, 0, 0, 0, 0, 0)
        op = words(self.dtype, 0, strides[0], 0, strides[1], 0, strides[2], rows, n, *tail)
        want = F["add"]("ref", op, *bufs)
        assert_same(F["add"](level, op, *bufs), want, self.dtype)


@pytest.mark.parametrize("level", LEVELS)
def test_add_random_operands_match_the_reference(level):
    for seed in range(300):
        AddTester(seed, INT8 if seed % 4 else FP16).test(level)


ADD_, SUB, MUL, MAX, MIN = range(5)  # ELTWISE kinds
SAME, CHANNEL, SCALAR = range(3)  # b modes
SIGMOID, TANH, HARDSWISH, GELU, LEAKY, SILU, GELU_TANH = range(7)
NO_TABLE = 0xFFFFFFFF


class EltwiseTester:
    """One ELTWISE command (section 2: fp16, or int8 with int8 / int16 operands per format 1.2), random contents
    and row padding, checked against the reference. `dtypes(a, b, out)` takes INT8 / INT16 for an int8 command."""

    def __init__(self, seed=0, dtype=INT8):
        self.rng, self.dtype = np.random.default_rng(seed), dtype
        self._kind, self._b_mode, self._dtypes, self._shape = ADD_, SAME, (INT8, INT8, INT8), (3, 40)
        self._channels = 0

    def kind(self, k):
        self._kind = k
        return self

    def b_mode(self, m, channels=0):
        self._b_mode, self._channels = m, channels
        return self

    def dtypes(self, a, b, out):
        self._dtypes = (a, b, out)
        return self

    def shape(self, rows, row_elems):
        self._shape = (rows, row_elems)
        return self

    def _int_tail(self):
        rng, kinds = self.rng, [1 if d == INT8 else 2 for d in self._dtypes]
        bits = [8 * k for k in kinds]
        shift = int(rng.integers(1, 63))
        log_top = np.log2(min(2**31 - 1, 2**shift * 4))
        ma, mb = (int(2 ** rng.uniform(0, log_top)) for _ in range(2))  # scales over every magnitude
        if self._kind == MUL:
            ma, mb = min(ma, 2 ** (62 - bits[0] - bits[1]) - 1), 0
        zps = [int(rng.integers(-(2 ** (b - 1)), 2 ** (b - 1))) for b in bits]
        top = 2 ** (bits[2] - 1)
        lo = int(rng.integers(-top, top))
        hi = int(rng.integers(lo, top))
        if rng.random() < 0.5:
            lo, hi = -top, top - 1
        wire = [0 if d == INT8 and rng.random() < 0.5 else d for d in self._dtypes]  # 0 = the command's dtype
        return (0, lo, hi, *zps, ma, mb, shift, *wire)

    def build(self):
        """(operand words, a, b, out) as bytes, for one call of run_eltwise."""
        rng = self.rng
        rows, n = self._shape
        elems = [2] * 3 if self.dtype == FP16 else [1 if d == INT8 else 2 for d in self._dtypes]
        b_row = {SAME: n, CHANNEL: self._channels, SCALAR: 1}[self._b_mode]
        a_stride, out_stride = (k * (n + int(rng.integers(0, 5))) for k in (elems[0], elems[2]))
        b_stride = elems[1] * (b_row + int(rng.integers(0, 5)))
        b_rows = rows if self._b_mode == SAME else 1
        a, b, out = (
            rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            for size in (rows * a_stride, b_rows * b_stride, rows * out_stride)
        )
        if self.dtype == FP16:
            a, b = halves(rng, len(a) // 2), halves(rng, len(b) // 2)
            if rng.random() < 0.25:  # ties of max / min: +-0, equal values, NaN against NaN
                few = np.array([0x0000, 0x8000, 0x3C00, 0xBC00, 0x7E00, 0x7C01, 0xFC00], np.uint16)
                a, b = (rng.choice(few, len(v) // 2).tobytes() for v in (a, b))
            lo, hi = float(rng.uniform(-2, 0)), float(rng.uniform(0, 3))
            tail = (int(rng.integers(0, 3)), f32_bits(lo), f32_bits(hi), 0, 0, 0, 0, 0, 0, 0, 0, 0)
        else:
            tail = self._int_tail()
        channels = self._channels if self._b_mode == CHANNEL else 0
        op = words(
            self.dtype, self._kind, self._b_mode, 0, a_stride, 0, b_stride, 0, out_stride, rows, n, channels, *tail
        )
        return op, a, b, out

    def test(self, level):
        args = self.build()
        want = F["eltwise"]("ref", *args)
        assert_same(
            F["eltwise"](level, *args),
            want,
            self.dtype,
            f"kind {self._kind} b {self._b_mode} dtypes {self._dtypes} shape {self._shape}",
        )
        return self


def random_eltwise(seed, dtype):
    rng = np.random.default_rng(seed)
    t = EltwiseTester(seed + 5000, dtype).kind(seed % 5)
    mode = int(rng.integers(0, 3))
    channels = int(rng.choice([1, 2, 3, 4, 5, 8, 16, 17, 24, 33]))
    t.b_mode(mode, channels)
    per_row = channels * int(rng.integers(1, 5)) if mode == CHANNEL else int(rng.integers(1, 80))
    t.shape(int(rng.integers(1, 5)), per_row)
    if dtype == INT8:
        t.dtypes(*(INT16 if rng.random() < 0.4 else INT8 for _ in range(3)))
    return t


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [INT8, FP16], ids=["int", "fp16"])
def test_eltwise_random_operands_match_the_reference(level, dtype):
    for seed in range(300):
        random_eltwise(seed, dtype).test(level)


@pytest.mark.parametrize("level", LEVELS)
def test_eltwise_every_kind_mode_and_dtype(level):
    """Every kind x b mode x int8 / int16 operand combination once (the random test draws them unevenly)."""
    combos = [(d0, d1, d2) for d0 in (INT8, INT16) for d1 in (INT8, INT16) for d2 in (INT8, INT16)]
    for kind in range(5):
        for mode, channels in [(SAME, 0), (CHANNEL, 4), (CHANNEL, 7), (SCALAR, 0)]:
            shape = (3, channels * 9) if mode == CHANNEL else (3, 70)
            EltwiseTester(kind * 10 + mode, FP16).kind(kind).b_mode(mode, channels).shape(*shape).test(level)
            for i, dts in enumerate(combos):
                EltwiseTester(kind * 100 + i).kind(kind).b_mode(mode, channels).shape(*shape).dtypes(*dts).test(level)


def test_eltwise_checks_operands_and_b_footprint():
    """run_eltwise refuses what a stream would, and b's footprint follows its mode."""
    for mode, channels, b_bytes in [(SAME, 0, 2 * 16 + 10), (CHANNEL, 5, 5), (SCALAR, 0, 1)]:
        t = EltwiseTester(1).b_mode(mode, channels).shape(3, 10)
        op, a, b, out = t.build()
        op = op[:24] + words(16) + op[28:]  # b_stride 16: b's rows are 16 bytes apart
        F["eltwise"]("ref", op, a, bytes(b_bytes), out)
        raises_code("ERR_INVALID_ADDR", F["eltwise"], LEVELS[-1], op, a, bytes(b_bytes - 1), out)
    op = EltwiseTester(2).kind(MUL).build()[0]
    bad = op[: 19 * 4] + words(1) + op[20 * 4 :]  # a multiply's b_mult must be 0
    raises_code("ERR_BAD_STREAM", F["eltwise"], LEVELS[-1], bad, bytes(200), bytes(200), bytes(200))


def all_halves(rows=256, pad=8):
    """Every fp16 bit pattern once: `rows` rows of 65536 / rows elements, rows `pad` elements apart."""
    n = 65536 // rows
    x = np.zeros((rows, n + pad), np.uint16)
    x[:, :n] = np.arange(65536, dtype=np.uint16).reshape(rows, n)
    return x.tobytes(), rows, n, (n + pad) * 2


def run_unary_both(level, func, x, rows, n, stride, alpha=0.0, dtype=FP16, table=b""):
    out = bytes(range(256)) * (rows * (stride + 6) // 256 + 1)
    op = words(
        dtype,
        func,
        0,
        stride,
        0,
        stride + 6,
        rows,
        n,
        0 if table else NO_TABLE,
        f32_bits(alpha) if func == LEAKY else 0,
    )
    return F["unary"](level, op, x, table, out), F["unary"]("ref", op, x, table, out)


@pytest.mark.parametrize("level", LEVELS)
def test_unary_fp16_every_input_matches_the_reference(level):
    """sigmoid, tanh, hardswish, gelu, silu, gelu tanh are tables of the reference's results: all 65,536
    inputs."""
    x, rows, n, stride = all_halves()
    for func in (SIGMOID, TANH, HARDSWISH, GELU, SILU, GELU_TANH):
        got, want = run_unary_both(level, func, x, rows, n, stride)
        assert_same(got, want, FP16, f"func {func}")


@pytest.mark.parametrize("func,name", [(SILU, "silu"), (GELU_TANH, "gelu_tanh")])
def test_reference_silu_and_gelu_tanh_within_1_ulp_of_exact_for_every_input(func, name):
    """The C++ reference's fp16 silu and gelu tanh (format 1.4) against the float64 functions of docs/npu.md
    section 2 (tests/npu_ref/exact.py), every fp16 input: within 1 fp16 ulp of the exact value rounded."""
    x, rows, n, stride = all_halves()
    _, out = run_unary_both("ref", func, x, rows, n, stride)
    step = stride // 2
    halves = np.frombuffer(x, np.uint16).reshape(rows, step)[:, :n].view(np.float16)
    got = np.frombuffer(bytes(out), np.uint16)[: rows * (stride + 6) // 2]
    got = np.stack([got[r * (stride + 6) // 2 : r * (stride + 6) // 2 + n] for r in range(rows)]).view(np.float16)
    ulps = exact.fp16_ulps(got, exact.unary(name, halves))
    assert ulps.max() <= 1, (ulps.max(), halves.reshape(-1)[np.argmax(ulps)])
    # silu(-inf) and gelu tanh(-inf) are NaN (-inf / inf, as x * sigmoid(x) in IEEE); +inf is +inf
    assert np.isnan(got[halves == -np.inf]).all() and (got[halves == np.inf] == np.inf).all()


@pytest.mark.parametrize("level", LEVELS)
def test_unary_leaky_relu_and_int8(level):
    rng = np.random.default_rng(7)
    x, rows, n, stride = all_halves(1024, 3)
    for alpha in [0.0, -0.0, 0.1, -3.5, 1e-40, 7e30, float(rng.standard_normal())]:
        got, want = run_unary_both(level, LEAKY, x, rows, n, stride, alpha)
        assert_same(got, want, FP16, f"alpha {alpha}")
    table = rng.integers(0, 256, 256, dtype=np.uint8).tobytes()
    codes = rng.integers(0, 256, 5 * 37, dtype=np.uint8).tobytes()
    got, want = run_unary_both(level, SIGMOID, codes, 5, 30, 37, dtype=INT8, table=table)
    assert_same(got, want, INT8)
    # Every code, in rows of whole 64-lane chunks and a tail (the VBMI lookup's two table halves).
    codes = np.resize(rng.permutation(256).astype(np.uint8), 3 * 203).tobytes()
    got, want = run_unary_both(level, TANH, codes, 3, 200, 203, dtype=INT8, table=table)
    assert_same(got, want, INT8)


def test_unary_and_eltwise_follow_a_non_default_rounding_mode():
    """The fp16 UNARY tables hold round-to-nearest results; with another rounding mode set in this thread
    (MXCSR, through C's fesetround) the fast kernels must give what the reference gives in that mode."""
    import ctypes
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the FE_* values below are x86's")
    libm = ctypes.CDLL("libm.so.6")
    fe_tonearest, fe_upward = 0, 0x800
    x, rows, n, stride = all_halves()
    level = LEVELS[-1]
    nearest = {f: run_unary_both(level, f, x, rows, n, stride)[1] for f in (SIGMOID, HARDSWISH)}  # builds tables
    elt = [random_eltwise(seed, FP16).build() for seed in range(40)]
    assert libm.fesetround(fe_upward) == 0
    try:
        for func in (SIGMOID, HARDSWISH):
            got, want = run_unary_both(level, func, x, rows, n, stride)
            assert want != nearest[func], "the rounding mode did not reach the reference"
            assert_same(got, want, FP16, f"func {func}")
        got, want = run_unary_both(level, LEAKY, x, rows, n, stride, 0.3)
        assert_same(got, want, FP16, "leaky relu")
        for args in elt:
            assert_same(F["eltwise"](level, *args), F["eltwise"]("ref", *args), FP16)
    finally:
        libm.fesetround(fe_tonearest)


def test_levels_and_threads_are_options():
    best = tvm_npu.runtime.best_kernel_level()
    assert tvm_npu.runtime.set_kernel_level("ref") == "ref"
    assert tvm_npu.runtime.set_kernel_level("avx512vnni") == best  # lowered to what the CPU has
    assert tvm_npu.runtime.kernel_level() == best
    before = tvm_npu.runtime.threads()
    for n in [2, 1, 3, 3, 4, 2, 1, 2]:  # resizing the pool between jobs must not lose a worker
        assert tvm_npu.runtime.set_threads(n) == n
        Conv2DTester(seed=n).input(12, 12, 16).out_channels(64).kernel(3, 3).padding(1, 1).test(best)
    tvm_npu.runtime.set_threads(before)
    with pytest.raises(RuntimeError, match="ERR_OP_NOT_SUPPORTED"):
        tvm_npu.runtime.set_kernel_level("sse9")


def test_reused_buffers_start_every_call_zeroed():
    """A module reuses its SRAM and DDR arena between calls and clears only what its stream can write.
    This stream first reads SRAM and an arena region it writes only later, so every call must still
    see zeros there — also after an earlier call left the input in both."""
    rows, k = 3, 40
    stride = align(k * 2)
    size = rows * stride
    view, shape = [1, rows, 1, k], [rows, k]
    tensors = [
        tensor(INPUT, 0, view, 0, stride, layout=ROWS, host_shape=shape),
        tensor(OUTPUT, 0, view, size, stride, layout=ROWS, host_shape=shape),
        tensor(OUTPUT, 1, view, 2 * size, stride, layout=ROWS, host_shape=shape),
    ]
    sram_x, sram_y, arena = 0, align(size), 3 * size
    after = {DMA0: 0, DMA1: 0}
    commands = [
        dma(DMA_LOAD, 0, arena, sram_y, rows, k * 2, stride, stride),  # arena, not yet written
        dma(DMA_STORE, 1, sram_y, 2 * size, rows, k * 2, stride, stride, wait=after),
        dma(DMA_STORE, 0, sram_x, size, rows, k * 2, stride, stride),  # SRAM, not yet written
        dma(DMA_LOAD, 1, 0, sram_x, rows, k * 2, stride, stride, wait=after),
        dma(DMA_STORE, 0, sram_x, arena, rows, k * 2, stride, stride, wait=after),
        command(END, [], wait=ALL_DONE),
    ]
    fn = F["create"]("z", pack_stream(tensors, commands, b"", 4 * size, 1, 2))["z"]
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        outs = [np.full(shape, 7.0, np.float32) for _ in range(2)]
        fn(T(x), T(outs[0]), T(outs[1]))
        assert not outs[0].any() and not outs[1].any()


def test_compiled_models_give_the_same_bits_at_every_level(tmp_path):
    """End to end: an int8 MobileNetV2-shaped model (onnxruntime QDQ) and its float version (fp16 on the
    NPU), each run at the reference kernels and at every fast level, on 1 and 2 threads, twice (the second
    call on reused buffers and cached packed weights): one set of output bits."""
    import tvm
    from tvm import relax

    from qdq_models import mobilenet_v2_shaped, quantize_with_ort

    model = mobilenet_v2_shaped(seed=3, size=32, width=0.35)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    q = quantize_with_ort(model, xs, tmp_path / "m.onnx")
    before_level, before_threads = tvm_npu.runtime.kernel_level(), tvm_npu.runtime.threads()
    try:
        for ex in (tvm_npu.build(tvm_npu.from_onnx(q)), tvm_npu.build(tvm_npu.from_onnx(model))):
            main = relax.VirtualMachine(ex, tvm.cpu())["main"]  # one VM: its modules keep their caches
            run_vm = lambda ex, x: main(tvm.runtime.tensor(x)).numpy()  # noqa: E731
            tvm_npu.runtime.set_kernel_level("ref")
            want = [run_vm(ex, x) for x in xs[:2]]
            for level in LEVELS:
                for threads in (1, 2):
                    tvm_npu.runtime.set_kernel_level(level)
                    tvm_npu.runtime.set_threads(threads)
                    got = [run_vm(ex, x) for x in xs[:2]]
                    for g, w in zip(got, want):
                        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32), err_msg=level)
    finally:
        tvm_npu.runtime.set_kernel_level(before_level)
        tvm_npu.runtime.set_threads(before_threads)
