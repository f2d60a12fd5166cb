"""Which CONV2Ds read weights that are the same in every call (runtime/sram_provenance.h).

The fast CONV2D packs a command's weights once and, for those commands only, stops comparing the SRAM bytes
with the packed copy. A wrong "constant" would silently reuse stale weights, so each stream here runs twice
with different inputs and is checked against the numpy model of the fp16 datapath (tests/npu_ref)."""

import numpy as np
import pytest

import tvm_npu
from npu_ref import fp16
from npu_stream_pack import (
    ADD,
    ALL_DONE,
    CONV2D,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    INPUT,
    INT8,
    NO_BIAS,
    OUTPUT,
    ROWS,
    T,
    command,
    dma,
    f32_bits,
    pack_stream,
    tensor,
    u32,
)

C = 8  # channels in and out
PIX = 4  # pixels of the 1 x 4 input
ROW = 128  # DDR / SRAM row stride
X_SRAM, W_SRAM, Y_SRAM = 0, 128, 128 + C * ROW
W_BYTES = C * C * 2  # 8 rows of 8 fp16 weights, packed


def conv_fp16(w_stride):
    """The fp16 1x1 CONV2D of x (X_SRAM) with the 8x8 weight at W_SRAM, its rows `w_stride` bytes apart, into
    y (Y_SRAM): no bias, no activation."""
    return command(
        CONV2D,
        dict(
            dtype=FP16,
            in_addr=X_SRAM,
            in_h=1,
            in_w=PIX,
            in_c=C,
            in_stride=ROW,
            w_addr=W_SRAM,
            w_stride=w_stride,
            kh=1,
            kw=1,
            oc=C,
            bias_addr=NO_BIAS,
            out_addr=Y_SRAM,
            out_h=1,
            out_w=PIX,
            out_stride=ROW,
            stride_h=1,
            stride_w=1,
            dil_h=1,
            dil_w=1,
            clip_lo=f32_bits(0.0),
            clip_hi=f32_bits(0.0),
            groups=1,
        ),
        ALL_DONE,
    )


def add_fp16(a, b, out, n):
    """ADD of one row of n fp16 elements, no activation."""
    return command(
        ADD,
        dict(
            dtype=FP16,
            a_addr=a,
            a_stride=ROW,
            b_addr=b,
            b_stride=ROW,
            out_addr=out,
            out_stride=ROW,
            rows=1,
            row_elems=n,
            clip_lo=f32_bits(0.0),
            clip_hi=f32_bits(0.0),
        ),
        ALL_DONE,
    )


def stream(weights_from: str, overwrite_row0: bool = False, reload: bool = False):
    """x (1x4x8 NHWC) times an 8x8 weight, weights from the blob ("blob") or from input 1 ("input");
    optionally the first weight row overwritten by x[0] + x[0] (an ADD), and optionally loaded again."""
    blob_w = weights_from == "blob"
    base = W_BYTES if blob_w else 0  # the activation arena starts after the weights
    x_ddr, w_ddr, y_ddr = base, base + ROW, base + 2 * ROW + C * ROW
    nhwc = [1, 1, PIX, C]
    tensors = [
        tensor(INPUT, 0, nhwc, x_ddr, ROW, host_shape=nhwc),
        tensor(OUTPUT, 0, nhwc, y_ddr, ROW, host_shape=nhwc),
    ]
    if not blob_w:
        tensors.append(tensor(INPUT, 1, [1, C, 1, C], w_ddr, ROW, layout=ROWS, host_shape=[C, C]))
    # From the blob, packed rows; from the arena, one aligned row each.
    w_stride = C * 2 if blob_w else ROW
    load_w = (
        dma(DMA_LOAD, 1, 0, W_SRAM, 1, W_BYTES, W_BYTES, W_BYTES, wait=ALL_DONE)
        if blob_w
        else dma(DMA_LOAD, 1, w_ddr, W_SRAM, C, C * 2, ROW, ROW, wait=ALL_DONE)
    )
    cmds = [dma(DMA_LOAD, 0, x_ddr, X_SRAM, 1, PIX * C * 2, ROW, ROW), load_w]
    if overwrite_row0:
        cmds.append(add_fp16(X_SRAM, X_SRAM, W_SRAM, C))
    if reload:
        cmds.append(load_w)
    cmds += [
        conv_fp16(w_stride),
        dma(DMA_STORE, 0, Y_SRAM, y_ddr, 1, PIX * C * 2, ROW, ROW, wait=ALL_DONE),
        command(END, [], wait=ALL_DONE),
    ]
    return cmds, tensors, base


def build(weights_from, w16, overwrite_row0=False, reload=False):
    cmds, tensors, base = stream(weights_from, overwrite_row0, reload)
    weights = w16.tobytes() if weights_from == "blob" else b""
    blob = pack_stream(tensors, cmds, weights, base + 4 * ROW + C * ROW, 2 if weights_from == "input" else 1, 1)
    return blob, len(cmds) - 3  # the CONV2D's index


CASES = {  # name: (weights from, overwrite row 0, load again, weights constant)
    "blob": ("blob", False, False, True),
    "input": ("input", False, False, False),
    "overwritten by a compute": ("blob", True, False, False),
    "overwritten then loaded again": ("blob", True, True, True),
}


@pytest.mark.parametrize("name", CASES)
def test_constant_weights_are_found_and_others_are_not(name):
    weights_from, overwrite, reload, constant = CASES[name]
    blob, conv_index = build(weights_from, np.zeros((C, C), np.float16), overwrite, reload)
    assert tvm_npu.runtime.constant_weight_commands(blob) == ([conv_index] if constant else [])


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("level", ["ref", tvm_npu.runtime.best_kernel_level()])
def test_every_call_uses_the_weights_it_reads(name, level):
    """Four calls with new inputs (and new input weights): each output equals the numpy model."""
    weights_from, overwrite, reload, _ = CASES[name]
    rng = np.random.default_rng(7)
    w_blob = (rng.standard_normal((C, C)) * 0.5).astype(np.float16)
    blob, _ = build(weights_from, w_blob, overwrite, reload)
    fn = tvm_npu.runtime.create_module("p", blob)["p"]
    before = tvm_npu.runtime.kernel_level()
    tvm_npu.runtime.set_kernel_level(level)
    try:
        for _ in range(4):
            x = rng.standard_normal((1, 1, PIX, C)).astype(np.float32)
            w = w_blob.copy() if weights_from == "blob" else (rng.standard_normal((C, C)) * 0.5).astype(np.float16)
            args = [T(x)] + ([] if weights_from == "blob" else [T(w.astype(np.float32))])
            y = np.zeros((1, 1, PIX, C), np.float32)
            fn(*args, T(y))
            if overwrite and not reload:
                w[0] = fp16.add(x[0, 0, 0], x[0, 0, 0])
            want = fp16.conv2d(x.astype(np.float16), w.reshape(C, 1, 1, C), None, (1, PIX))
            np.testing.assert_array_equal(y.astype(np.float16).view(np.uint16), want.view(np.uint16))
    finally:
        tvm_npu.runtime.set_kernel_level(before)


def test_compiled_models_have_constant_weights():
    """Every CONV2D of a compiled model reads weights from the blob: all of them are found constant."""
    from tvm_npu.models import lstm

    ex = tvm_npu.build(tvm_npu.from_onnx(lstm(T=3, B=1, I=5, H=8)))
    for m in tvm_npu.runtime.npu_modules(ex):
        blob = bytes(m.get_function("get_stream")())
        convs = [i for i, c in enumerate(tvm_npu.contract.stream.decode(blob).commands) if c.op == "CONV2D"]
        assert convs and tvm_npu.runtime.constant_weight_commands(blob) == convs


# --- int8: the requantization block (bias and scale rows) counts too --------------------------------------

BLOCK = 2 * ROW  # bias row then scale row (docs/npu.md section 2), one aligned row each for 8 channels
B_SRAM = Y_SRAM + ROW


def int8_stream(block_from: str, w8: np.ndarray, block: bytes):
    """x (1x4x8 int8) through an int8 1x1 CONV2D; weights from the blob, the requantization block from
    the blob ("blob") or from input 1 ("input")."""
    blob_block = block_from == "blob"
    weights = w8.tobytes().ljust(2 * ROW, b"\0") + (block if blob_block else b"")  # block at 2 * ROW
    base = len(weights)
    x_ddr, b_ddr, y_ddr = base, base + ROW, base + ROW + BLOCK
    nhwc = [1, 1, PIX, C]
    tensors = [
        tensor(INPUT, 0, nhwc, x_ddr, ROW, dtype=INT8, host_dtype=INT8, host_shape=nhwc),
        tensor(OUTPUT, 0, nhwc, y_ddr, ROW, dtype=INT8, host_dtype=INT8, host_shape=nhwc),
    ]
    if not blob_block:
        tensors.append(
            tensor(INPUT, 1, [1, 2, 1, ROW], b_ddr, ROW, dtype=INT8, host_dtype=INT8, layout=ROWS, host_shape=[2, ROW])
        )
    src = 2 * ROW if blob_block else b_ddr
    conv8 = command(
        CONV2D,
        dict(
            dtype=INT8,
            in_addr=X_SRAM,
            in_h=1,
            in_w=PIX,
            in_c=C,
            in_stride=ROW,
            w_addr=W_SRAM,
            w_stride=C,
            kh=1,
            kw=1,
            oc=C,
            bias_addr=B_SRAM,
            out_addr=Y_SRAM,
            out_h=1,
            out_w=PIX,
            out_stride=ROW,
            stride_h=1,
            stride_w=1,
            dil_h=1,
            dil_w=1,
            clip_lo=u32(-128),
            clip_hi=127,
            groups=1,
            in_zp=u32(-3),
            out_zp=5,
        ),
        ALL_DONE,
    )
    cmds = [
        dma(DMA_LOAD, 0, x_ddr, X_SRAM, 1, PIX * C, ROW, ROW),
        dma(DMA_LOAD, 1, 0, W_SRAM, 1, C * C, ROW, ROW, wait=ALL_DONE),
        dma(DMA_LOAD, 1, src, B_SRAM, 2, ROW, ROW, ROW, wait=ALL_DONE),
        conv8,
        dma(DMA_STORE, 0, Y_SRAM, y_ddr, 1, PIX * C, ROW, ROW, wait=ALL_DONE),
        command(END, [], wait=ALL_DONE),
    ]
    blob = pack_stream(tensors, cmds, weights, y_ddr + ROW, 1 if blob_block else 2, 1)
    return blob, 3


def requant_block(rng) -> bytes:
    bias = rng.integers(-2000, 2000, C).astype(np.int32).tobytes().ljust(ROW, b"\0")
    scale = rng.uniform(0.002, 0.02, C).astype(np.float32).tobytes().ljust(ROW, b"\0")
    return bias + scale


@pytest.mark.parametrize("block_from", ["blob", "input"])
def test_int8_requantization_block_from_an_input_is_read_every_call(block_from):
    """The fast int8 CONV2D keeps a constant command's bias and scales with its packed weights; a block
    that comes from an input must be read again each call. Four calls, new x (and block) each: the fast
    kernels equal the reference kernels, which cache nothing."""
    rng = np.random.default_rng(11)
    w8 = rng.integers(-128, 128, (C, C)).astype(np.int8)
    blob, conv_index = int8_stream(block_from, w8, requant_block(rng))
    assert tvm_npu.runtime.constant_weight_commands(blob) == ([conv_index] if block_from == "blob" else [])
    fn = tvm_npu.runtime.create_module("q", blob)["q"]
    before = tvm_npu.runtime.kernel_level()
    try:
        for _ in range(4):
            x = rng.integers(-128, 128, (1, 1, PIX, C)).astype(np.int8)
            block = np.frombuffer(requant_block(rng), np.int8).reshape(2, ROW)
            args = [T(x)] + ([] if block_from == "blob" else [T(block.copy())])
            got = {}
            for level in ("ref", tvm_npu.runtime.best_kernel_level()):
                tvm_npu.runtime.set_kernel_level(level)
                y = np.zeros((1, 1, PIX, C), np.int8)
                fn(*args, T(y))
                got[level] = y
            assert len(np.unique(got["ref"])) > 4  # not all clamped: the block matters
            np.testing.assert_array_equal(*got.values())
    finally:
        tvm_npu.runtime.set_kernel_level(before)


# --- resident loads: weights a call leaves in SRAM for the next call of its stream --------------------------


def resident_stream(case: str):
    """x (1x4x8) times the blob's 8x8 weight W (loaded to W_SRAM), out y. "plain": nothing else touches W;
    "read before": an ADD of W_SRAM's first row with itself runs before the load (it must read zeros every
    call) into a second output; "written after": after the CONV2D an ADD writes x + x over W's first row."""
    base = W_BYTES
    x_ddr, y_ddr, z_ddr = base, base + ROW, base + 2 * ROW
    nhwc = [1, 1, PIX, C]
    tensors = [
        tensor(INPUT, 0, nhwc, x_ddr, ROW, host_shape=nhwc),
        tensor(OUTPUT, 0, nhwc, y_ddr, ROW, host_shape=nhwc),
    ]
    load_w = dma(DMA_LOAD, 1, 0, W_SRAM, 1, W_BYTES, W_BYTES, W_BYTES, wait=ALL_DONE)
    cmds = [dma(DMA_LOAD, 0, x_ddr, X_SRAM, 1, PIX * C * 2, ROW, ROW)]
    if case == "read before":
        tensors.append(tensor(OUTPUT, 1, [1, 1, 1, C], z_ddr, ROW, host_shape=[1, 1, 1, C]))
        cmds += [
            add_fp16(W_SRAM, W_SRAM, B_SRAM, C),
            dma(DMA_STORE, 0, B_SRAM, z_ddr, 1, C * 2, ROW, ROW, wait=ALL_DONE),
        ]
    cmds += [load_w, conv_fp16(C * 2)]
    if case == "written after":
        cmds.append(add_fp16(X_SRAM, X_SRAM, W_SRAM, C))
    cmds += [dma(DMA_STORE, 0, Y_SRAM, y_ddr, 1, PIX * C * 2, ROW, ROW, wait=ALL_DONE), command(END, [], wait=ALL_DONE)]
    return cmds, tensors, cmds.index(load_w)


@pytest.mark.parametrize("case", ["plain", "read before", "written after"])
@pytest.mark.parametrize("level", ["ref", tvm_npu.runtime.best_kernel_level()])
def test_resident_loads_are_skipped_only_where_nothing_can_tell(case, level):
    """Four calls on one module (each after the first finds its buffers warm): every output equals the numpy
    model, and only the plain load is resident (a skipped "read before" load would show the weights in the
    second output; a skipped "written after" load would give the reference CONV2D the ADD's row -- the
    fast one trusts its packed copy of these constant weights)."""
    before = tvm_npu.runtime.kernel_level()
    tvm_npu.runtime.set_kernel_level(level)
    try:
        check_resident_case(case)
    finally:
        tvm_npu.runtime.set_kernel_level(before)


def check_resident_case(case):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((C, C)) * 0.5).astype(np.float16)
    cmds, tensors, load_index = resident_stream(case)
    outs = 2 if case == "read before" else 1
    blob = pack_stream(tensors, cmds, w.tobytes(), W_BYTES + 4 * ROW, 1, outs)
    assert tvm_npu.runtime.resident_loads(blob) == ([load_index] if case == "plain" else [])
    fn = tvm_npu.runtime.create_module("r", blob)["r"]
    for _ in range(4):
        x = rng.standard_normal((1, 1, PIX, C)).astype(np.float32)
        ys = [np.full((1, 1, PIX, C), 7.0, np.float32)] + (
            [np.full((1, 1, 1, C), 7.0, np.float32)] if outs == 2 else []
        )
        fn(T(x), *[T(y) for y in ys])
        want = fp16.conv2d(x.astype(np.float16), w.reshape(C, 1, 1, C), None, (1, PIX))
        np.testing.assert_array_equal(ys[0].astype(np.float16).view(np.uint16), want.view(np.uint16))
        if outs == 2:
            assert not ys[1].any()  # W_SRAM read before the load: zeros, every call


def test_compiled_lstm_calls_on_warm_buffers_give_the_same_bits():
    """A compiled LSTM keeps its recurrent weights resident; a call after others (warm buffers, loads skipped)
    gives the bits of the same call made first (cold)."""
    import tvm
    from tvm import relax

    from tvm_npu.models import lstm

    model = lstm(T=4, B=1, I=6, H=16, seed=2)
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    (blob,) = [bytes(m["get_stream"]()) for m in tvm_npu.runtime.npu_modules(ex)]
    resident = tvm_npu.runtime.resident_loads(blob)
    commands = tvm_npu.contract.stream.decode(blob).commands
    assert resident and all(commands[i].op == "DMA_LOAD" for i in resident)
    main = relax.VirtualMachine(ex, tvm.cpu())["main"]
    rng = np.random.default_rng(9)
    feeds = [
        [
            rng.standard_normal(tuple(d.dim_value for d in i.type.tensor_type.shape.dim)).astype(np.float32)
            for i in model.graph.input
        ]
        for _ in range(3)
    ]
    run = lambda f: [o.numpy() for o in main(*[tvm.runtime.tensor(a) for a in f])]  # noqa: E731
    first = run(feeds[0])
    run(feeds[1]), run(feeds[2])
    for a, b in zip(first, run(feeds[0])):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_modules_with_the_same_weight_region_hold_one_copy():
    """The weight pool (runtime/weight_pool.h): equal weight regions share one copy, other bytes never do;
    the stream reads back whole, and each module computes with its own weights (the numpy model)."""
    rng = np.random.default_rng(3)
    w_a = (rng.standard_normal((C, C)) * 0.5).astype(np.float16)
    w_b = w_a.copy()
    w_b[C - 1, C - 1] = -w_b[C - 1, C - 1]  # one weight apart: same size, other bytes
    blob_a, _ = build("blob", w_a)
    blob_b, _ = build("blob", w_b)
    mods = [tvm_npu.runtime.create_module(s, b) for s, b in (("a", blob_a), ("a2", blob_a), ("b", blob_b))]
    ids = [tvm_npu.runtime.weights_memory(m)["id"] for m in mods]
    assert ids[0] == ids[1] != ids[2]
    assert [tvm_npu.runtime.weights_memory(m)["bytes"] for m in mods] == [W_BYTES] * 3
    assert bytes(mods[1]["get_stream"]()) == blob_a and bytes(mods[2]["get_stream"]()) == blob_b
    x = rng.standard_normal((1, 1, PIX, C)).astype(np.float32)
    for m, symbol, w in zip(mods, ("a", "a2", "b"), (w_a, w_a, w_b)):
        y = np.zeros((1, 1, PIX, C), np.float32)
        m[symbol](T(x), T(y))
        want = fp16.conv2d(x.astype(np.float16), w.reshape(C, 1, 1, C), None, (1, PIX))
        np.testing.assert_array_equal(y.astype(np.float16).view(np.uint16), want.view(np.uint16))
    tvm_npu.runtime.set_weight_sharing(False)
    try:
        own = tvm_npu.runtime.create_module("a3", blob_a)
    finally:
        tvm_npu.runtime.set_weight_sharing(True)
    assert tvm_npu.runtime.weights_memory(own)["id"] != ids[0]
