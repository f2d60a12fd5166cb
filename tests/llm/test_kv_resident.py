"""The KV cache resident on the NPU (backend/kv_cache.py): the compiled attention regions against the numpy
model of docs/npu.md section 3 (tests/npu_ref/kv.py), bit for bit; DDR bytes per decode step growing by
exactly the cache rows read; the position limit; what stays on the host-held cache, and why.

(The logits and greedy tokens of the resident steps against onnxruntime are test_generate.py's, which
runs on tvm_npu.llm's default, the resident cache.)"""

import math

import numpy as np
import pytest
import tvm

import tvm_npu
from llm.reference import (
    BUILDERS,
    OrtDecoder,
    S,
    T,
    assert_decode_ddr_grows_by_the_kv_rows,
    assert_logits_close,
    compiled,
    gpt2_mask_minus_50,
)
from npu_ref import kv
from tvm_npu.contract.config import get_config
from tvm_npu.frontend.onnx import from_onnx
from tvm_npu.models.decoder import step_info
from tvm_npu.partition.kv_cache_check import find_layers


def _t(x):
    return tvm.runtime.tensor(np.ascontiguousarray(x))


def _bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


class Region:
    """One compiled attention region of a step (layer 0), called directly through its runtime module."""

    def __init__(self, lm, step):
        self.runner = lm._runners[step]
        self.mod = self.runner.kv_modules[0]
        info = lm.meta["step"]
        self.H_kv, self.D = info["kv_heads"], info["head_dim"]
        self.H = 4  # both test models have 4 query heads
        self.S = 1 if step == "decode" else lm.prefill_len
        self.scale = np.float32(1.0) / np.float32(math.sqrt(self.D))

    def run(self, q, k, v, position):
        out = _t(np.zeros((1, self.H, self.S, self.D), np.float32))
        self.mod[str(self.mod["get_symbol"]())](_t(q), _t(k), _t(v), _t(np.array([position], np.int64)), out)
        return out.numpy()

    def state(self, slot):
        return np.frombuffer(bytes(self.mod["get_state"](slot)), np.float16).reshape(self.H_kv, T, self.D)

    def inputs(self, rng):
        q = rng.standard_normal((1, self.H, self.S, self.D)).astype(np.float32)
        k, v = (rng.standard_normal((1, self.H_kv, self.S, self.D)).astype(np.float32) for _ in range(2))
        return q, k, v


def test_attention_regions_match_the_numpy_model_bit_for_bit(lm):
    """Prefill (S = 8) at 0 and 8, then decode steps at 16..20, on the shared state: outputs and the cache
    (layer 0's keys and values) equal npu_ref.kv.attention_step's, bit for bit."""
    rng = np.random.default_rng(0)
    pre, dec = Region(lm, "prefill"), Region(lm, "decode")
    lm.reset()
    model_k, model_v = np.zeros((pre.H_kv, T, pre.D), np.float16), np.zeros((pre.H_kv, T, pre.D), np.float16)
    for region, position in [(pre, 0), (pre, 8)] + [(dec, p) for p in range(16, 21)]:
        q, k, v = region.inputs(rng)
        got = region.run(q, k, v, position)
        f16 = [x[0].astype(np.float16) for x in (q, k, v)]
        want = kv.attention_step(model_k, model_v, *f16, position, region.scale)
        np.testing.assert_array_equal(_bits(got[0]), _bits(want))
        np.testing.assert_array_equal(_bits(region.state(0)), _bits(model_k))
        np.testing.assert_array_equal(_bits(region.state(1)), _bits(model_v))


@pytest.mark.parametrize("step", ["prefill", "decode"])
def test_a_position_past_the_cache_is_refused_and_changes_nothing(lm, step):
    """The position limit is T - S; T - S + 1 (and -1) is ERR_POSITION_RANGE before any command, the
    cache as it was."""
    region = Region(lm, step)
    lm.prefill(np.arange(5))
    assert int(region.mod["position_limit"]()) == T - region.S
    before = region.state(0).copy(), region.state(1).copy()
    for position in (T - region.S + 1, -1):
        with pytest.raises(RuntimeError) as err:
            region.run(*region.inputs(np.random.default_rng(1)), position)
        assert str(err.value).startswith("ERR_POSITION_RANGE:") and f"position {position} " in str(err.value)
        np.testing.assert_array_equal(_bits(region.state(0)), _bits(before[0]))
        np.testing.assert_array_equal(_bits(region.state(1)), _bits(before[1]))


def test_decode_ddr_bytes_grow_by_the_kv_rows_read(arch):
    lm = compiled(arch, "ddr")
    lm.reset()
    assert_decode_ddr_grows_by_the_kv_rows(lm)


def test_attention_ran_on_the_npu(lm):
    """Both steps: the cache writes, both attention matmuls, the scale, the mask add and the softmax of
    every layer in the resident regions; nothing of the cache on the CPU; the model's cache_out gone."""
    assert lm.resident
    for step, report in lm.reports.items():
        assert report.kv_cache["resident"] and len(report.kv_cache["regions"]) == lm.layers
        on_npu = [p for p in report.placements if p.composite == "npu.kv_attention"]
        ops = sorted(p.op for p in on_npu)
        assert all(p.device == "npu" for p in on_npu)
        for op in ("relax.scatter_nd", "relax.matmul", "relax.nn.softmax", "relax.divide", "relax.add"):
            assert ops.count(op) == lm.layers * (2 if op in ("relax.scatter_nd", "relax.matmul") else 1), (step, op)
        assert not [
            p for p in report.placements if p.op in ("relax.scatter_nd", "relax.nn.softmax") and p.device == "cpu"
        ]


def _layers(builder, cfg="npu-ref", **step):
    model = builder(seq_len=1, max_context=T)
    info = dict(step_info(model), **step)
    log = []
    return find_layers(from_onnx(model)["main"], info, get_config(cfg), log), log


@pytest.mark.parametrize(
    "change, code",
    [
        (dict(kv_heads=3), "NPU_E_KV_CACHE"),  # a cache not [1, H_kv, T, D] as the metadata says
        (dict(max_context=2048), "NPU_E_SRAM"),  # the K / V of a head over SRAM (T rows)
    ],
)
def test_a_cache_the_pattern_cannot_take_is_refused_with_a_reason(arch, change, code):
    builder = BUILDERS[arch]
    if "max_context" in change:  # a cache of T = 2048 rows: the model of that T on a 64 KiB SRAM
        model = builder(seq_len=1, max_context=2048)
        log = []
        found = find_layers(
            from_onnx(model)["main"], step_info(model), get_config("npu-ref").replace(sram_bytes=64 * 1024), log
        )
    else:
        found, log = _layers(builder, **change)
    assert found is None and log[0].code == code and log[0].reason, log


def test_another_mask_keeps_the_host_cache_and_stays_right():
    """A mask value the causal SOFTMAX does not reproduce (-50: its exp is not 0) refuses the resident form
    with NPU_E_MASK; tvm_npu.llm then keeps the cache on the host and still matches onnxruntime."""
    builder = gpt2_mask_minus_50

    lm = tvm_npu.llm.compile(builder, max_context=T, prefill_len=S)
    assert not lm.resident and lm.meta["kv_cache"] == "host"
    for report in lm.reports.values():
        refused = report.kv_cache["refused"]
        assert [r["code"] for r in refused] == ["NPU_E_MASK"] and "-50" in refused[0]["detail"], refused
    ids = np.arange(3, 9)
    want_logits, want_tokens = OrtDecoder(builder).run(ids, 4)
    got = [lm.prefill(ids)] + [lm.decode(t) for t in want_tokens[:-1]]
    for g, w in zip(got, want_logits):
        assert_logits_close(g, w)
    assert [int(np.argmax(g)) for g in got] == want_tokens
