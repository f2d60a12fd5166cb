"""A sliding window's band in the resident attention region (format 1.6, SOFTMAX's `window`; docs/npu.md
section 3): the plan's causal SOFTMAX with a window W, run by the reference NPU, equals the numpy model of
docs/npu.md (tests/npu_ref/kv.py, query q keeps cache rows q - W < t <= q) bit for bit, prefill and decode,
the cache in DDR or SRAM, fp16 or int8; the band changes the result; it costs the cycles of the causal
SOFTMAX (the cost model equals the runtime's); the stream declares 1.6 only when it has a window; a window
on a SOFTMAX without the causal mode, or in a stream that says 1.5, is refused at load."""

import dataclasses

import numpy as np
import pytest
import tvm

from kv_streams import kv_stream, run_region_steps
from npu_ref import kv
from npu_stream_pack import raises_code
from tvm_npu import runtime
from tvm_npu.backend.plan.cost_model import estimate
from tvm_npu.backend.plan.kv_plan import plan_kv_attention
from tvm_npu.backend.verify import verify
from tvm_npu.contract import layout, stream
from tvm_npu.contract.config import get_config
from tvm_npu.partition.kv_cache_check import KVLayer

CFG = get_config("npu-ref")
H, H_KV, T, D, SCALE, W = 4, 2, 12, 16, 0.25, 3
ROW = 128  # one cache row of D = 16, aligned
KV_SCALES = ([0.02, 0.03], [0.025, 0.02])


def _t(x):
    return tvm.runtime.tensor(np.ascontiguousarray(x))


def _bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def _layer(S, window=W):
    return KVLayer(0, None, None, None, None, SCALE, H, H_KV, S, T, D, window=window)


@pytest.mark.parametrize("placement, kv_scales", [("ddr", None), ("sram", None), ("ddr", KV_SCALES)])
def test_the_band_plan_matches_the_numpy_model_bit_for_bit(placement, kv_scales):
    """A prefill (S = 2) at 0 and 2, then decodes (S = 1) at 4..10 on one shared state, W = 3: from position 3
    on every query drops rows, and every output equals the numpy model's bit for bit."""
    area = 2 * H_KV * T * ROW if placement == "sram" else 0
    mods = {}
    for S in (2, 1):
        planned = plan_kv_attention(CFG, _layer(S), (0, 1), 3, kv_scales, area)
        verify(planned)
        assert [c.args.get("window") for c in planned.commands if c.op == "SOFTMAX"] == [W] * H_KV
        mods[S] = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
    dt = np.float16 if kv_scales is None else np.int8
    model_k, model_v = np.zeros((H_KV, T, D), dt), np.zeros((H_KV, T, D), dt)
    steps = run_region_steps(mods, H, H_KV, D, np.random.default_rng(2), 2.0, per_head=kv_scales is not None)
    for position, q, k, v, out in steps:
        q16 = q[0].astype(np.float16)
        if kv_scales is None:
            new = (k[0].astype(np.float16), v[0].astype(np.float16))
            want = kv.attention_step(model_k, model_v, q16, *new, position, np.float32(SCALE), W)
        else:
            scales = map(np.float32, KV_SCALES)
            want = kv.attention_step_int8(model_k, model_v, q16, k[0], v[0], position, *scales, np.float32(SCALE), W)
        np.testing.assert_array_equal(_bits(out[0].astype(np.float16)), _bits(want))


def test_the_band_changes_the_result():
    """Past the window the band drops rows the causal mask keeps: the outputs differ, so the test above can
    fail; within the first W rows they are the same."""
    rng = np.random.default_rng(2)
    caches = [np.zeros((H_KV, T, D), np.float16) for _ in range(4)]
    diffs = []
    for position in range(8):
        q = rng.standard_normal((H, 1, D)).astype(np.float16)
        k, v = (rng.standard_normal((H_KV, 1, D)).astype(np.float16) for _ in range(2))
        band = kv.attention_step(caches[0], caches[1], q, k, v, position, np.float32(SCALE), W)
        causal = kv.attention_step(caches[2], caches[3], q, k, v, position, np.float32(SCALE))
        diffs.append(np.abs(band.astype(np.float32) - causal).max())
    assert max(diffs[:W]) == 0 and min(diffs[W:]) > 1e-2


@pytest.mark.parametrize("position", [0, 5, 10])
def test_the_band_costs_what_the_causal_softmax_costs(position):
    """The masked elements pass through the lanes like the others (docs/npu.md section 5): the runtime's
    cycles are the cost model's and those of the same plan without the window."""
    rng = np.random.default_rng(position)
    q = rng.standard_normal((1, H, 2, D)).astype(np.float32)
    k, v = (rng.standard_normal((1, H_KV, 2, D)).astype(np.float32) for _ in range(2))
    cycles = []
    for window in (W, 0):
        planned = plan_kv_attention(CFG, _layer(2, window), (0, 1), 0)
        mod = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
        args = [_t(x) for x in (q, k, v, np.array([position], np.int64))]
        mod["kv"](*args, _t(np.zeros((1, H, 2, D), np.float32)))
        last = runtime.profile_of(mod)["last"]
        assert estimate(CFG, planned.commands, position).total_cycles == last["total_cycles"]
        cycles.append(last["total_cycles"])
    assert cycles[0] == cycles[1]


def test_the_stream_says_format_1_6_only_with_a_window():
    minors = [
        stream.read_header(stream.encode(plan_kv_attention(CFG, _layer(1, w), (0, 1), 0)))["version_minor"]
        for w in (W, 0)
    ]
    assert minors == [6, 4]


def _with_window(parts, window, pos_mode=None):
    at = next(i for i, c in enumerate(parts["cmds"]) if layout.unpack_command(c)[0] == "SOFTMAX")
    op, args, waits = layout.unpack_command(parts["cmds"][at])
    args.update(window=window, **({} if pos_mode is None else {"pos_mode": pos_mode}))
    parts["cmds"][at] = layout.pack_command(op, args, waits)


def test_a_window_is_refused_without_the_causal_mode_or_before_format_1_6(rt):
    def blob(version, **kw):
        return kv_stream(2, T, D, H, H_KV, SCALE, version=version, mutate=lambda p: _with_window(p, W, **kw))

    rt["validate"](blob((1, 6)))  # the hand-packed step with a band loads
    msg = raises_code("ERR_BAD_STREAM", rt["validate"], blob((1, 6), pos_mode=0))
    assert "needs a causal softmax" in msg
    assert "unused operand word 18" in raises_code("ERR_BAD_STREAM", rt["validate"], blob((1, 5)))
