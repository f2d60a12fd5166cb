"""A layer's constants lie in DDR in one layout whatever output-channel blocks the planner splits it into
(constants.layer_blocks): a dense layer planned for one row (a classifier: its weights load in blocks of an
eighth of SRAM) and for 64 rows (one block) carries the same weight region, byte for byte, so an LLM's
prefill and decode steps share it (docs/llm.md, "The artifact"); each block's loads of its weight rows and
of its part of the bias / scale rows compute the numpy model of docs/npu.md bit for bit."""

import numpy as np
import pytest

import tvm_npu
from builders import chain, chain_reference, dense_layer
from conftest import npu_modules, run_vm
from npu_ref import fp16
from tvm_npu.contract import stream
from tvm_npu.quantization import quantize_weights_int8
from tvm_npu.quantization.weight_only import int8_columns

K, N = 256, 2048  # npu-ref: 1 MB of fp16 weights (512 KB int8), an eighth of SRAM is 256 KB


def _reference(x, layers, w8):
    if not w8:
        return chain_reference(x, layers)
    y = x
    for layer in layers:  # each dense a 1x1 CONV2D over [1, M, 1, K] with its int8 codes, column scales
        codes, scales = int8_columns(layer["w"].T.copy())
        n, k = layer["w"].shape
        x4, w4 = fp16.stage(y).reshape(-1, 1, 1, k), codes.T.reshape(n, 1, 1, k)
        y = fp16.conv2d_w8(x4, w4, scales, layer["b"], (1, 1), act=layer["act"]).reshape(-1, n)
    return y.astype(np.float32)


@pytest.mark.parametrize("w8", [False, True], ids=["fp16", "w8a16"])
def test_the_weight_region_does_not_depend_on_the_rows(rng, w8):
    # A dense before the classifier: the streamer loads the classifier's blocks behind it.
    layers = [dense_layer(rng, K, K, act="relu"), dense_layer(rng, K, N)]
    regions, blocks = [], []
    for m in (1, 64):
        mod = chain((m, K), layers)
        ex = tvm_npu.build(quantize_weights_int8(mod) if w8 else mod, config="npu-ref")
        (s,) = [stream.decode(bytes(mm["get_stream"]())) for mm in npu_modules(ex)]
        regions.append(s.weights)
        blocks.append(sorted({c.args["oc"] for c in s.commands if c.op == "CONV2D"}))
        x = (rng.standard_normal((m, K)) * 2).astype(np.float32)
        np.testing.assert_array_equal(run_vm(ex, x), _reference(x, layers, w8))
    assert N in blocks[1] and N not in blocks[0], blocks  # one row: the classifier in smaller blocks
    # The region is each layer's weights [N][K], then its bias (and W8A16's scale) row, nothing else.
    assert len(regions[0]) == (K + N) * (K * (1 if w8 else 2) + 4 * (2 if w8 else 1))
    assert regions[0] == regions[1]
