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
from npu_stream_pack import (ALL_DONE, DMA0, DMA1, DMA_LOAD, DMA_STORE, END, FP16, INPUT, INT8, OUTPUT, ROWS, T,
                             align, command, dma, f32_bits, pack_stream, runtime_functions, tensor, u32)

F = runtime_functions({"conv": "tvm_npu.kernels.run_conv2d", "add": "tvm_npu.kernels.run_add",
                       "create": "runtime.NPUModuleCreate"})
ORDER = ["portable", "avx2", "avx512vnni"]
LEVELS = ORDER[:ORDER.index(tvm_npu.runtime.best_kernel_level()) + 1]
NO_BIAS = 0xFFFFFFFF


@pytest.fixture(params=[1, 3], ids=["1thread", "3threads"])
def threads(request):
    before = tvm_npu.runtime.threads()
    tvm_npu.runtime.set_threads(request.param)
    yield request.param
    tvm_npu.runtime.set_threads(before)


SPECIALS = np.array([0x7C01, 0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x0001, 0x8000, 0x7BFF], np.uint16)  # NaNs, infs, ...


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
            bias = self._bias if self._bias is not None else rng.integers(-2 ** 16, 2 ** 16, oc)
            row = align(oc * 4)
            block = bytearray(2 * row)
            block[:oc * 4] = np.asarray(bias, np.int64).astype(np.uint32).tobytes()
            block[row:row + oc * 4] = np.broadcast_to(scale, (oc,)).astype(np.float32).tobytes()
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
        op = words(self.dtype, 0, h, w, c, in_stride, 0, w_stride, kh, kw, oc, NO_BIAS if not bias_bytes else 0,
                   0, oh, ow, out_stride, *self._stride, *self._dil, *self._pad, *tail,
                   in_px if self._in_px else 0, out_px if self._out_px else 0)
        return op, x, wt, bias_bytes, out

    def test(self, level, cache_key=-1):
        args = self.build()
        want = F["conv"]("ref", *args, 128, -1)
        got = F["conv"](level, *args, 128, cache_key)
        assert_same(got, want, self.dtype, self.describe())
        return self

    def describe(self):
        return (f"in {self._in} oc {self._oc} k {self._k} stride {self._stride} dil {self._dil} pad {self._pad} "
                f"out {self._out} dw {self._dw} gaps {self._in_px, self._out_px} zp {self._zp} clamp {self._clamp}")


def random_conv(seed, dtype=INT8):
    rng = np.random.default_rng(seed)
    t = Conv2DTester(dtype, seed=seed + 1000)
    dw = rng.random() < 0.35
    kh, kw = (int(v) for v in rng.choice([1, 1, 2, 3, 3, 5], 2))
    c = int(rng.choice([1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 64, 70]))
    t.input(int(rng.integers(1, 12)), int(rng.integers(1, 12)), c).kernel(kh, kw).depthwise(dw)
    t.out_channels(int(rng.choice([1, 5, 8, 16, 17, 24, 32, 33, 48, 64, 65, 100])))
    t.stride(int(rng.integers(1, 3)), int(rng.integers(1, 3))).dilation(int(rng.integers(1, 3)), int(rng.integers(1, 3)))
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
            t.biases(rng.choice([2 ** 31 - 1, -2 ** 31, 2 ** 31 - 5000, -2 ** 31 + 5000], oc))
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
            top = min(2 ** 31 - 1, 2 ** shift * 4)
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
    tensors = [tensor(INPUT, 0, view, 0, stride, layout=ROWS, host_shape=shape),
               tensor(OUTPUT, 0, view, size, stride, layout=ROWS, host_shape=shape),
               tensor(OUTPUT, 1, view, 2 * size, stride, layout=ROWS, host_shape=shape)]
    sram_x, sram_y, arena = 0, align(size), 3 * size
    after = {DMA0: 0, DMA1: 0}
    commands = [dma(DMA_LOAD, 0, arena, sram_y, rows, k * 2, stride, stride),     # arena, not yet written
                dma(DMA_STORE, 1, sram_y, 2 * size, rows, k * 2, stride, stride, wait=after),
                dma(DMA_STORE, 0, sram_x, size, rows, k * 2, stride, stride),     # SRAM, not yet written
                dma(DMA_LOAD, 1, 0, sram_x, rows, k * 2, stride, stride, wait=after),
                dma(DMA_STORE, 0, sram_x, arena, rows, k * 2, stride, stride, wait=after),
                command(END, [], wait=ALL_DONE)]
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
