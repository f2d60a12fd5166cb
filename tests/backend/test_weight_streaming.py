"""Weight streaming (weights.py): a layer's weights load into SRAM that is free during the layers
before it, chunk by chunk behind their compute, and the results stay those of the numpy reference."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tvm_npu
from builders import chain, chain_reference, conv_layer, dense_layer
from conftest import run_vm


def head_model(rng, cin=8, hw=16, c=(32, 64, 64, 256), hidden=1000, classes=600):
    """Stride-2 convolutions down to 1x1, flattened (a view), then two weight-heavy dense layers."""
    layers = [conv_layer(rng, cin, c[0], 3, stride=2)]
    for a, b in zip(c[:-2], c[1:-1]):
        layers.append(conv_layer(rng, a, b, 3, stride=2))
    side = hw // 2 ** (len(c) - 1)
    layers.append(conv_layer(rng, c[-2], c[-1], side, pad=0))
    layers += [
        {"op": "cpu", "fn": "reshape", "shape": (1, c[-1])},
        dense_layer(rng, c[-1], hidden, act="relu"),
        dense_layer(rng, hidden, classes),
    ]
    return layers, rng.standard_normal((1, cin, hw, hw)).astype(np.float32)


def test_dense_weights_load_during_earlier_layers_and_match_the_reference():
    layers, x = head_model(np.random.default_rng(0), cin=16, hw=32, c=(64, 64, 64, 256))
    report = tvm_npu.BuildReport()
    prof = tvm_npu.profile(chain(x.shape, layers), inputs=[x], config="npu-small", report=report)
    ((sym, info),) = report.regions.items()
    order = list(info["layer_sram"])
    first_dense = order[-2]
    blocks = info["weight_slots"][first_dense]
    # Several blocks of the 1000x256 layer wait in SRAM from an earlier layer on (the streamer's
    # choice), and the layer's first weight load starts before the layer before it has finished.
    assert sum(1 for k, _, _ in blocks if k is not None and k < order.index(first_dense)) >= 2
    spans = {lay["name"]: lay for lay in prof["layers"]}
    assert spans[first_dense]["start"] < spans[order[-3]]["end"]
    # Slots of streamed blocks waiting at the same time never overlap (a block loaded by its own
    # layer reuses the previous block's slot after that block's computes).
    live = [
        (k, order.index(name), slot, slot + n)
        for name, bl in info["weight_slots"].items()
        for k, slot, n in bl
        if k is not None
    ]
    for i, a in enumerate(live):
        for b in live[i + 1 :]:
            if a[0] <= b[1] and b[0] <= a[1]:
                assert a[3] <= b[2] or b[3] <= a[2], (a, b)
    ex = tvm_npu.build(chain(x.shape, layers), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, x), chain_reference(x, layers))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cin=st.integers(1, 16),
    c1=st.integers(1, 96),
    c2=st.integers(8, 300),
    hidden=st.integers(1, 1200),
    classes=st.integers(1, 700),
    config=st.sampled_from(["npu-small", "npu-ref"]),
    seed=st.integers(0, 999),
)
def test_weight_heavy_heads_match_the_reference(cin, c1, c2, hidden, classes, config, seed):
    layers, x = head_model(np.random.default_rng(seed), cin=cin, hw=8, c=(c1, c1, c2), hidden=hidden, classes=classes)
    ex = tvm_npu.build(chain(x.shape, layers), config=config)
    np.testing.assert_array_equal(run_vm(ex, x), chain_reference(x, layers))


@pytest.mark.parametrize("config", ["npu-small", "npu-ref"])
def test_streaming_beats_loading_each_layers_weights_in_turn(config):
    # Against the same stream with every block loaded by its own layer (no streaming): fewer cycles.
    from tvm_npu.backend.plan import planner as plan_mod

    layers, x = head_model(np.random.default_rng(1))
    mod = chain(x.shape, layers)
    streamed = tvm_npu.profile(mod, inputs=[x], config=config)["total_cycles"]
    original = plan_mod.place_weight_slots

    def in_turn(cfg, plans, residents):
        top = original(cfg, plans, residents)
        for lp in plans:
            for b in range(len(lp.blocks)):
                lp.load_after[b] = None
                lp.w_slots[b] = lp.w_slot
        return max(top, max(lp.top + max((blk.nbytes for blk in lp.blocks), default=0) for lp in plans))

    plan_mod.place_weight_slots = in_turn
    try:
        serial = tvm_npu.profile(mod, inputs=[x], config=config)["total_cycles"]
    finally:
        plan_mod.place_weight_slots = original
    assert streamed < serial


def _dense_chain(ws, bias):
    """x [1, K0] through the dense layers `ws` (one decode step's row), `bias` added after the first."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, ws[0].shape[0]), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for i, w in enumerate(ws):
                y = bb.emit(relax.op.matmul(y, relax.const(w)))
                if i == 0:
                    y = bb.emit(relax.op.add(y, relax.const(bias)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_int4_decode_weights_load_one_transfer_per_block_at_the_ddr_roofline():
    """A weight-bound region (one row through int4 dense layers, as a decode step): the streamer's lead mode
    loads each layer's block -- its K * N / 2 code bytes, the fp32 bias row and the [K / g][N] fp16 scales
    (docs/npu.md section 6) -- in one transfer, alternating the two DMA channels, and the region runs within
    6% of its DDR roofline (4.3%; the paced 32 KiB chunks: 7.5% over it); bit-equal to the numpy model."""
    from conftest import npu_modules
    from npu_ref import int4
    from tvm_npu.contract import stream
    from tvm_npu.quantization.weight_int4 import quantize_rtn

    rng = np.random.default_rng(21)
    dims, g = (256, 512, 384, 256), 128
    ws = [rng.standard_normal((k, n)).astype(np.float32) for k, n in zip(dims, dims[1:])]
    bias = rng.standard_normal(dims[1]).astype(np.float32)
    qmod, _ = tvm_npu.quantize(_dense_chain(ws, bias), weight_bits=4, group_size=g, symmetric=True)
    cfg = tvm_npu.get_config("npu-ref")
    ex = tvm_npu.build(qmod, config="npu-ref")
    (s,) = [stream.decode(bytes(m["get_stream"]())) for m in npu_modules(ex)]
    convs = [c for c in s.commands if c.op == "CONV2D"]
    loads = [c for c in s.commands if c.op == "DMA_LOAD" and c.args["ddr_addr"] < len(s.weights)]
    al = cfg.alignment

    def block(k, n):  # codes, then the bias row, then the scales (docs/npu.md section 6)
        return -(-k * n // 2 // al) * al + -(-n * 4 // al) * al + k // g * n * 2

    want = sorted(block(c.args["in_c"], c.args["oc"]) for c in convs)
    assert sum(c.args["oc"] for c in convs) == sum(dims[1:])
    assert sorted(c.args["rows"] * c.args["row_bytes"] for c in loads) == want
    assert {c.args["channel"] for c in loads} == {0, 1}
    x = rng.standard_normal((1, dims[0])).astype(np.float32)
    prof = tvm_npu.profile(qmod, inputs=[x], config="npu-ref")
    roofline = prof["ddr_bytes"] / cfg.ddr_bytes_per_cycle
    assert prof["total_cycles"] <= 1.06 * roofline, (prof["total_cycles"], roofline)
    y = x.astype(np.float16)
    for i, w in enumerate(ws):
        codes, scales, _ = quantize_rtn(w.T, g, True)
        b = bias if i == 0 else np.zeros(w.shape[1], np.float32)
        y = int4.w4a16(y, codes.astype(np.int64), scales.T.astype(np.float16), None, b)
    np.testing.assert_array_equal(run_vm(ex, x), y.astype(np.float32))
