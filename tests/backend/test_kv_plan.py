"""The resident attention's plan (backend/plan/kv_plan.py) under the compiler's own checks: verify at the
position limit, the cost model at a position against the runtime's cycle model, the compile-time refusal
of a cache past the 32-bit DDR addresses."""

import dataclasses

import numpy as np
import pytest
import tvm

from tvm_npu import runtime
from tvm_npu.backend import kv_cache
from tvm_npu.backend.plan.cost_model import estimate
from tvm_npu.backend.plan.kv_plan import plan_kv_attention
from tvm_npu.backend.verify import verify
from tvm_npu.contract import stream
from tvm_npu.contract.config import get_config
from tvm_npu.contract.errors import NPUError
from tvm_npu.frontend.onnx import from_onnx
from tvm_npu.models.decoder import gpt2_step, step_info
from tvm_npu.partition.kv_cache_check import KVLayer

CFG = get_config("npu-ref")


def _layer(H=4, H_kv=2, S=2, T=12, D=16):
    return KVLayer(0, None, None, None, None, 0.25, H, H_kv, S, T, D)


def test_verify_checks_the_widest_footprints_at_the_position_limit():
    """The plan verifies at its limit T - S; one past it, the last head's value rows [0, T + 1) leave the
    state region, and verify says so (ERR_BAD_STREAM) at compile time."""
    planned = plan_kv_attention(CFG, _layer(), (0, 1), 5)
    assert planned.info["position_limit"] == 10
    verify(planned)
    planned.info["position_limit"] = 11
    with pytest.raises(NPUError) as err:
        verify(planned)
    assert err.value.code == "ERR_BAD_STREAM" and "lies outside DDR" in str(err.value)


@pytest.mark.parametrize("position", [0, 4, 10])
def test_the_cost_model_at_a_position_is_the_runtime_cycle_model(position):
    """estimate(position=p): cycles and DDR bytes of the call the runtime times at p (docs/npu.md section 5)."""
    planned = plan_kv_attention(CFG, _layer(), (0, 1), 0)
    mod = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
    rng = np.random.default_rng(position)
    q = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 2, 16)).astype(np.float32) for _ in range(2))
    out = tvm.runtime.tensor(np.zeros((1, 4, 2, 16), np.float32))
    args = [tvm.runtime.tensor(x) for x in (q, k, v, np.array([position], np.int64))]
    mod["kv"](*args, out)
    last = runtime.profile_of(mod)["last"]
    est = estimate(CFG, planned.commands, position)
    assert last["total_cycles"] == est.total_cycles
    assert last["ddr_read_bytes"] + last["ddr_write_bytes"] == est.ddr_read_bytes + est.ddr_write_bytes
    assert estimate(CFG, planned.commands, position + 1).ddr_read_bytes > est.ddr_read_bytes


def test_a_cache_past_the_32_bit_addresses_is_a_compile_time_error():
    model = gpt2_step(layers=1, d=32, heads=2, ffn=64, vocab=64, max_context=16)
    step = dict(step_info(model), max_context=1 << 22, head_dim=512)  # 2 x 2 x 2^22 x 1 KiB = 16 GiB
    with pytest.raises(NPUError) as err:
        kv_cache.make_resident(from_onnx(model), CFG, step, 1, [])
    assert err.value.code == "ERR_MEMORY_OVERFLOW" and str(1 << 34) in str(err.value)


def _scales(H_kv=2):
    return ([0.5 + 0.25 * h for h in range(H_kv)], [0.125 * (h + 1) for h in range(H_kv)])


@pytest.mark.parametrize("position", [0, 7, 10])
def test_the_int8_plan_verifies_and_costs_as_the_runtime_times_it(position):
    """An int8 cache's plan (one quantized input per KV head and K / V, MATMULs with an int8 B): verify at its
    limit, and the cost model at a position equals the runtime's cycles and DDR bytes there."""
    planned = plan_kv_attention(CFG, _layer(), (0, 1), 0, _scales())
    verify(planned)
    assert [c.args.get("b_dtype") for c in planned.commands if c.op == "MATMUL"] == [2] * 4
    mod = runtime.create_module("kv", stream.encode(dataclasses.replace(planned)))
    rng = np.random.default_rng(position)
    q = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    heads = [rng.standard_normal((1, 1, 2, 16)).astype(np.float32) for _ in range(4)]
    out = tvm.runtime.tensor(np.zeros((1, 4, 2, 16), np.float32))
    mod["kv"](*[tvm.runtime.tensor(x) for x in (q, *heads, np.array([position], np.int64))], out)
    last = runtime.profile_of(mod)["last"]
    est = estimate(CFG, planned.commands, position)
    assert last["total_cycles"] == est.total_cycles
    assert last["ddr_read_bytes"] + last["ddr_write_bytes"] == est.ddr_read_bytes + est.ddr_write_bytes


def test_the_int8_state_is_half_the_fp16_one_at_d_128():
    """2 x H_kv x T rows of align(D) bytes instead of align(2 D): half at D 128, the same at D 16 (one aligned
    row either way)."""
    for D, ratio in ((128, 2), (16, 1)):
        fp16 = plan_kv_attention(CFG, _layer(D=D), (0, 1), 0).state_bytes
        int8 = plan_kv_attention(CFG, _layer(D=D), (0, 1), 0, _scales()).state_bytes
        assert fp16 == 2 * 2 * 12 * ((D * 2 + 127) // 128 * 128) and fp16 == ratio * int8


@pytest.mark.parametrize(
    "layer, scales, code",
    [
        (_layer(), ([0.5, 0.0], [1.0, 1.0]), "ERR_INVALID_CONFIG"),  # a scale of 0
        (_layer(), ([0.5, float("nan")], [1.0, 1.0]), "ERR_INVALID_CONFIG"),
        (_layer(H=30, H_kv=30), _scales(30), "ERR_TASK_TOO_COMPLEX"),  # 2 x 30 + 5 tensors > 64
    ],
)
def test_int8_plans_the_npu_cannot_run_are_coded(layer, scales, code):
    with pytest.raises(NPUError) as err:
        plan_kv_attention(CFG, layer, (0, 1), 0, scales)
    assert err.value.code == code
