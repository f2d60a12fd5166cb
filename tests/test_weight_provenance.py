"""Which CONV2Ds read weights that are the same in every call (runtime/sram_provenance.h).

The fast CONV2D packs a command's weights once and, for those commands only, stops comparing the SRAM bytes
with the packed copy. A wrong "constant" would silently reuse stale weights, so each stream here runs twice
with different inputs and is checked against the numpy model of the fp16 datapath (test_reference_npu)."""

import numpy as np
import pytest

import tvm_npu
from npu_stream_pack import (ADD, ALL_DONE, DMA0, DMA1, DMA_LOAD, DMA_STORE, END, FP16, INPUT, NO_BIAS, OUTPUT,
                             ROWS, T, command, dma, f32_bits, pack_stream, tensor)
from test_reference_npu import conv, conv_ref

C = 8                # channels in and out
PIX = 4              # pixels of the 1 x 4 input
ROW = 128            # DDR / SRAM row stride
X_SRAM, W_SRAM, Y_SRAM = 0, 128, 128 + C * ROW
W_BYTES = C * C * 2  # 8 rows of 8 fp16 weights, packed


def add_fp16(a, b, out, n):
    """ADD of one row of n fp16 elements, no activation."""
    return command(ADD, [FP16, a, ROW, b, ROW, out, ROW, 1, n, 0, f32_bits(0.0), f32_bits(0.0),
                         0, 0, 0, 0, 0, 0], ALL_DONE)


def stream(weights_from: str, overwrite_row0: bool = False, reload: bool = False):
    """x (1x4x8 NHWC) times an 8x8 weight, weights from the blob ("blob") or from input 1 ("input");
    optionally the first weight row overwritten by x[0] + x[0] (an ADD), and optionally loaded again."""
    blob_w = weights_from == "blob"
    base = W_BYTES if blob_w else 0  # the activation arena starts after the weights
    x_ddr, w_ddr, y_ddr = base, base + ROW, base + 2 * ROW + C * ROW
    nhwc = [1, 1, PIX, C]
    tensors = [tensor(INPUT, 0, nhwc, x_ddr, ROW, host_shape=nhwc), tensor(OUTPUT, 0, nhwc, y_ddr, ROW, host_shape=nhwc)]
    if not blob_w:
        tensors.append(tensor(INPUT, 1, [1, C, 1, C], w_ddr, ROW, layout=ROWS, host_shape=[C, C]))
    # From the blob, packed rows; from the arena, one aligned row each.
    w_stride = C * 2 if blob_w else ROW
    load_w = (dma(DMA_LOAD, 1, 0, W_SRAM, 1, W_BYTES, W_BYTES, W_BYTES, wait=ALL_DONE) if blob_w
              else dma(DMA_LOAD, 1, w_ddr, W_SRAM, C, C * 2, ROW, ROW, wait=ALL_DONE))
    cmds = [dma(DMA_LOAD, 0, x_ddr, X_SRAM, 1, PIX * C * 2, ROW, ROW), load_w]
    if overwrite_row0:
        cmds.append(add_fp16(X_SRAM, X_SRAM, W_SRAM, C))
    if reload:
        cmds.append(load_w)
    cmds += [conv(X_SRAM, 1, PIX, C, ROW, W_SRAM, w_stride, 1, 1, C, NO_BIAS, Y_SRAM, 1, PIX, ROW, wait=ALL_DONE),
             dma(DMA_STORE, 0, Y_SRAM, y_ddr, 1, PIX * C * 2, ROW, ROW, wait=ALL_DONE),
             command(END, [], wait=ALL_DONE)]
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
                w[0] = (x[0, 0, 0].astype(np.float16).astype(np.float32) * 2).astype(np.float16)
            want = conv_ref(x.astype(np.float16), w.reshape(C, 1, 1, C), None, (1, PIX))
            np.testing.assert_array_equal(y.astype(np.float16).view(np.uint16), want.view(np.uint16))
    finally:
        tvm_npu.runtime.set_kernel_level(before)


def test_compiled_models_have_constant_weights():
    """Every CONV2D of a compiled model reads weights from the blob: all of them are found constant."""
    from tvm_npu.models import lstm

    ex = tvm_npu.build(tvm_npu.from_onnx(lstm(T=3, B=1, I=5, H=8)))
    for m in tvm_npu.runtime.npu_modules(ex):
        blob = bytes(m.get_function("get_stream")())
        convs = [i for i, c in enumerate(tvm_npu.stream.decode(blob).commands) if c.op == "CONV2D"]
        assert convs and tvm_npu.runtime.constant_weight_commands(blob) == convs
