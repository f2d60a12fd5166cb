"""A KV cache kept across calls and addressed at a run-time position (format 1.4, docs/npu.md section 3), from
hand-packed streams (tests/npu_stream_pack.py, not the compiler): one attention step of S query rows writes its
keys and values into state tensors at the position and attends over cache rows [0, position + S) with the
causal rule; run at successive positions on one module, and shared with a second stream (prefill then decode),
it matches the numpy model of tests/npu_ref/kv.py bit for bit, cache included. Also: reset, the position limit
and its coded error (the cache unchanged), the cycles and bytes per position, and the load-time refusals."""

import json

import numpy as np
import pytest

from kv_streams import INT32, INT64, POSITION, STATE, V13, V14, kv_stream
from npu_ref import kv
from npu_stream_pack import FP16, ROWS, T, raises_code, tensor
from tvm_npu import NPUError
from tvm_npu.contract import layout
from tvm_npu.contract.stream import check_state_fits


class Step:
    """A module of kv_stream and the numpy model of its cache."""

    def __init__(self, rt, S, T_=12, D=16, H=4, H_kv=2, scale=0.25, space=0, model=None):
        self.S, self.T, self.D, self.H, self.H_kv, self.scale = S, T_, D, H, H_kv, scale
        self.mod = rt["create"]("kv", kv_stream(S, T_, D, H, H_kv, scale, space))
        # Modules of one state space share one cache: so do their models.
        self.model = model or {"k": np.zeros((H_kv, T_, D), np.float16), "v": np.zeros((H_kv, T_, D), np.float16)}

    def inputs(self, rng):
        q = rng.standard_normal((self.H, self.S, self.D)).astype(np.float32)
        k = rng.standard_normal((self.H_kv, self.S, self.D)).astype(np.float32)
        v = rng.standard_normal((self.H_kv, self.S, self.D)).astype(np.float32)
        return q, k, v

    def run(self, q, k, v, position, pos_dtype=np.int64):
        out = np.zeros((self.H, self.S, self.D), np.float32)
        self.mod["kv"](T(q), T(k), T(v), T(np.array([position], pos_dtype)), T(out))
        return out

    def expect(self, q, k, v, position):
        f16 = [x.astype(np.float16) for x in (q, k, v)]
        return kv.attention_step(self.model["k"], self.model["v"], *f16, position, self.scale)

    def state(self, slot):
        raw = self.mod["get_state"](slot)
        return np.frombuffer(bytes(raw), np.float16).reshape(self.H_kv, self.T, self.D)


def bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


def check_step(step, rng, position):
    q, k, v = step.inputs(rng)
    got = step.run(q, k, v, position)
    want = step.expect(q, k, v, position)
    np.testing.assert_array_equal(bits(got.astype(np.float16)), bits(want))
    np.testing.assert_array_equal(bits(step.state(0)), bits(step.model["k"]))
    np.testing.assert_array_equal(bits(step.state(1)), bits(step.model["v"]))


@pytest.mark.parametrize("seed", range(3))
def test_steps_at_successive_positions_match_numpy(rt, seed):
    """One compiled step of S = 2 serves positions 0, 2, ..., 10 on one module: outputs and cache bit-exact."""
    rng = np.random.default_rng(seed)
    step = Step(rt, S=2, T_=12)
    assert step.mod["position_limit"]() == 12 - 2
    for position in range(0, 11, 2):
        check_step(step, rng, position)


def test_prefill_then_decode_share_the_cache(rt):
    """Two streams of one state space (prefill S = 3, decode S = 1, GQA 4 heads over 1): the decode module
    reads what prefill wrote, and each step writes where the next one reads."""
    rng = np.random.default_rng(5)
    prefill = Step(rt, S=3, T_=10, H=4, H_kv=1, space=77)
    decode = Step(rt, S=1, T_=10, H=4, H_kv=1, space=77, model=prefill.model)
    check_step(prefill, rng, 0)
    for position in range(3, 10):
        check_step(decode, rng, position)
    assert decode.mod["position_limit"]() == 9 and prefill.mod["position_limit"]() == 7


def test_reset_zeroes_the_shared_cache(rt):
    rng = np.random.default_rng(1)
    a = Step(rt, S=2, space=78)
    b = Step(rt, S=1, space=78, model=a.model)
    check_step(a, rng, 0)
    assert np.any(b.state(0) != 0)
    b.mod["reset_state"]()
    assert not np.any(a.state(0)) and not np.any(a.state(1))
    a.model["k"][:] = 0
    a.model["v"][:] = 0
    check_step(a, rng, 0)  # starts again from a zero cache


def test_a_module_of_its_own_space_starts_from_zero(rt):
    """State space 0: each module has its own cache, zero when created."""
    rng = np.random.default_rng(2)
    first = Step(rt, S=2)
    check_step(first, rng, 0)
    second = Step(rt, S=2)
    assert not np.any(second.state(0))
    check_step(second, rng, 0)


@pytest.mark.parametrize("position", [11, 12, 1 << 20, -1])
def test_a_position_past_the_cache_is_refused_and_changes_nothing(rt, position):
    rng = np.random.default_rng(3)
    step = Step(rt, S=2, T_=12)
    check_step(step, rng, 0)
    before = step.state(0).copy(), step.state(1).copy()
    q, k, v = step.inputs(rng)
    msg = raises_code("ERR_POSITION_RANGE", step.run, q, k, v, position)
    assert f"position {position} " in msg and "outside 0..10" in msg
    if position == 11:  # the reason names the command and the range that would leave the cache
        assert "at 11 command" in msg and "DMA_STORE" in msg
    np.testing.assert_array_equal(bits(step.state(0)), bits(before[0]))
    np.testing.assert_array_equal(bits(step.state(1)), bits(before[1]))
    check_step(step, rng, 2)  # the module still works


def test_an_int32_position_is_the_wrong_dtype(rt):
    """The stream says int64 on the host: an int32 tensor is ERR_SHAPE_MISMATCH, nothing runs."""
    rng = np.random.default_rng(4)
    step = Step(rt, S=2)
    raises_code("ERR_SHAPE_MISMATCH", step.run, *step.inputs(rng), 0, np.int32)
    assert not np.any(step.state(0))


def ceil(a, b):
    return -(-a // b)


@pytest.mark.parametrize("position", [0, 5, 10])
def test_cycles_and_bytes_follow_the_position(rt, position):
    """Section 5 with the effective operands at p (npu-ref: 32x32 array, fp16 rate 4, 64 lanes, 128-byte
    bursts): the reads of rows [0, p + S), MATMUL passes over n + p / k + p, SOFTMAX steps over S + p."""
    S, H, H_kv, D = 2, 4, 2, 16
    rng = np.random.default_rng(6)
    step = Step(rt, S=S, H=H, H_kv=H_kv, D=D)
    step.run(*step.inputs(rng), position)
    last = json.loads(step.mod["get_profile"]())["last"]
    assert last["position"] == position
    recs = last["records"]
    cache_reads = [r for r in recs if r["opcode"] == "DMA_LOAD"][3:]
    assert [r["bus_bytes"] for r in cache_reads] == [(S + position) * 128] * (2 * H_kv)
    writes = [r for r in recs if r["opcode"] == "DMA_STORE"][: 2 * H_kv]
    assert [r["bus_bytes"] for r in writes] == [S * 128] * (2 * H_kv)
    qk, pv = (r for r in recs if r["opcode"] == "MATMUL")
    n = S + position
    assert qk["end"] - qk["start"] == 32 + H * S * ceil(D, 32) * ceil(n, 32) * 4
    assert pv["end"] - pv["start"] == 32 + H * S * ceil(n, 32) * ceil(D, 32) * 4
    assert qk["macs"] == pv["macs"] == H * S * n * D
    (sm,) = (r for r in recs if r["opcode"] == "SOFTMAX")
    assert sm["end"] - sm["start"] == 32 + ceil(3 * H * S * n, 32)
    total_read = sum(r["bus_bytes"] for r in recs if r["opcode"] == "DMA_LOAD")
    assert last["ddr_read_bytes"] == total_read == (H + 2 * H_kv) * S * 128 + 2 * H_kv * n * 128


def refused(rt, code, mutate, version=V14, S=2):
    return raises_code(code, rt["validate"], kv_stream(S, 12, 16, 4, 2, 0.25, mutate=mutate, version=version))


def set_operand(parts, index, **ops):
    op, args, waits = layout.unpack_command(parts["cmds"][index])
    args.update(ops)
    parts["cmds"][index] = layout.pack_command(op, args, waits)


def test_load_time_refusals(rt):
    # A pos_mode bit the opcode does not define.
    assert "pos_mode 4" in refused(rt, "ERR_BAD_STREAM", lambda p: set_operand(p, 3, pos_mode=4))
    assert "pos_mode 2" in refused(rt, "ERR_BAD_STREAM", lambda p: set_operand(p, 12, pos_mode=2))
    # pos_mode without a position input.
    msg = refused(rt, "ERR_BAD_STREAM", lambda p: p["tensors"].pop(3) and p.update(inputs=3))
    assert "without a position input" in msg
    # A causal softmax takes no mask.
    refused(rt, "ERR_BAD_STREAM", lambda p: set_operand(p, 12, mask_rows=1, mask_addr=0, mask_stride=128))

    # A DMA into the state region outside every state tensor.
    def past_the_tensors(p):
        p["state_bytes"] += 4096
        set_operand(p, 3, ddr_addr=p["ddr"] + p["state_bytes"] - 2048)

    assert "in no state tensor" in refused(rt, "ERR_INVALID_ADDR", past_the_tensors)

    # The cache is smaller than one step at position 0 (S = 2, T = 1 row per head in the descriptor).
    def shrink(p):
        p["tensors"][5] = tensor(STATE, 0, [1, 2, 1, 16], p["ddr"], 128, FP16, FP16, ROWS, (2, 1, 16))

    refused(rt, "ERR_INVALID_ADDR", shrink)

    # Two state tensors with one slot; a state tensor outside the state region.
    def same_slot(p):
        p["tensors"][6] = p["tensors"][6][:4] + (0).to_bytes(4, "little") + p["tensors"][6][8:]

    refused(rt, "ERR_BAD_STREAM", same_slot)
    refused(rt, "ERR_INVALID_ADDR", lambda p: p.update(state_bytes=128))
    # Format 1.3 has no state region, no roles state / position and no pos_mode word.
    refused(rt, "ERR_BAD_STREAM", lambda p: None, version=V13)
    # A second position input.
    second = tensor(POSITION, 0, [1, 1, 1, 1], 0, 0, INT32, INT64, ROWS, (1,))
    assert "a second position" in refused(rt, "ERR_BAD_STREAM", lambda p: p["tensors"].append(second))


def test_modules_sharing_a_space_must_agree_on_each_slot(rt):
    """A second module of a live space with another cache length is refused; once the first module is gone the
    space is too, and the same stream binds afresh."""
    first = rt["create"]("kv", kv_stream(2, 12, 16, 4, 2, 0.25, space=91))
    msg = raises_code("ERR_SHAPE_MISMATCH", rt["create"], "kv", kv_stream(2, 10, 16, 4, 2, 0.25, space=91))
    assert "state slot 0 of state space 91" in msg
    del first
    rt["create"]("kv", kv_stream(2, 10, 16, 4, 2, 0.25, space=91))


def test_a_state_that_passes_the_address_space_is_a_compile_time_error():
    check_state_fits(1 << 20, (1 << 32) - (1 << 20))
    with pytest.raises(NPUError) as info:
        check_state_fits(1 << 20, 1 << 32, "the KV cache of max_context 1048576")
    assert info.value.code == "ERR_MEMORY_OVERFLOW"
    assert f"{(1 << 20) + (1 << 32)} bytes needed, {1 << 32} available" in str(info.value)
