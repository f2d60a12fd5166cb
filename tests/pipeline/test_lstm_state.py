"""Recurrent state on the NPU (recurrence.py): an imported LSTM runs as one NPU region whose h and c
between steps are pinned in SRAM — no DMA touches them while they live — and a state too large for the
NPU's SRAM is a compile-time ERR_SRAM_OVERFLOW naming it."""

import numpy as np
import pytest

import tvm_npu
from conftest import npu_modules, run_vm
from lstm_models import feeds_of, lstm_model, ort_run
from tvm_npu.contract import stream


def _sram_span(cmd):
    a = cmd.args
    return a["sram_addr"], a["sram_addr"] + (a["rows"] - 1) * a["sram_stride"] + a["row_bytes"]


@pytest.mark.parametrize("kw", [dict(T=5, B=1, I=16, H=16), dict(T=3, B=2, I=8, H=32, direction="bidirectional")])
def test_lstm_state_stays_in_sram_between_steps(kw):
    model = lstm_model(seed=3, **kw)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report)
    assert len(report.regions) == 1
    rnn = [p for p in report.placements if p.op in ("relax.sigmoid", "relax.tanh", "relax.multiply")]
    assert rnn and all(p.device == "npu" for p in rnn)  # the whole cell, not only its matmuls
    (info,) = report.regions.values()
    directions = 2 if kw.get("direction") == "bidirectional" else 1
    pinned = info["pinned_state"]
    assert len(pinned) == 2 * (kw["T"] - 1) * directions  # h and c at every step boundary
    assert set(pinned) <= set(info["residents"])
    # No DMA command writes or reads a pinned tensor's SRAM bytes from the command that produces it to
    # the last one that reads it: zero DDR traffic for the state between steps.
    (module,) = npu_modules(ex)
    cmds = stream.decode(bytes(module["get_stream"]())).commands
    order = info["command_layers"]  # the layer of every command, in stream order
    for addr, size, first, last in pinned.values():
        start = order.index(first)
        end = len(order) - 1 - order[::-1].index(last)
        for cmd in cmds[start : end + 1]:
            if cmd.op in ("DMA_LOAD", "DMA_STORE"):
                lo, hi = _sram_span(cmd)
                assert hi <= addr or lo >= addr + size, (cmd, addr, size)
    feeds = feeds_of(model)
    for got, want in zip(run_vm(ex, *[feeds[i.name] for i in model.graph.input]), ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


def test_state_too_large_for_sram_is_a_compile_time_error():
    # 640 hidden units for a batch of 256: h and c are 320 KiB each in fp16, alive together at the
    # step boundary — more than npu-small's 512 KiB of SRAM.
    model = lstm_model(T=2, B=256, I=8, H=640, seed=1)
    with pytest.raises(tvm_npu.NPUError, match="ERR_SRAM_OVERFLOW") as info:
        tvm_npu.build(tvm_npu.from_onnx(model), config="npu-small")
    msg = str(info.value)
    assert "recurrent state" in msg and "327680 bytes" in msg and "524288" in msg


def test_recurrent_weights_are_stored_once_and_loaded_once():
    # The unrolled steps read the same R blocks: one DDR copy each, loaded into SRAM and kept there for the
    # steps after when the slot stays free (weights.py): the weight bytes cross the DDR bus well under
    # twice, where a load per step would move them 6 times.
    model = lstm_model(T=6, B=1, I=16, H=32, seed=2)
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    (module,) = npu_modules(ex)
    s = stream.decode(bytes(module["get_stream"]()))
    per_step = 4 * 32 * 32 * 2  # R of the four gates, fp16
    assert len(s.weights) < 2 * per_step  # not one copy per step (6 x 8 KB)
    loaded = sum(
        c.args["rows"] * c.args["row_bytes"]
        for c in s.commands
        if c.op == "DMA_LOAD" and c.args["ddr_addr"] < len(s.weights)
    )
    assert loaded < 2 * len(s.weights), (loaded, len(s.weights))
    feeds = feeds_of(model)
    for got, want in zip(run_vm(ex, *[feeds[i.name] for i in model.graph.input]), ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
