"""The KV cache in the SRAM state area (format 1.5, docs/npu.md section 3, "The SRAM state area"): the
compiler's plan (backend/plan/kv_plan.py with sram_area) run by the reference NPU at successive positions
matches the numpy model of tests/npu_ref/kv.py bit for bit, cache included, and no cache row crosses DDR;
two modules of one space (a prefill at S = 2, a decode at S = 1) share it; reset zeroes it; the verifier and
the runtime refuse a tile in the area outside the stream's own state tensors."""

import dataclasses

import numpy as np
import pytest
import tvm

from npu_ref import kv
from tvm_npu import runtime
from tvm_npu.backend.plan.kv_plan import plan_kv_attention
from tvm_npu.backend.verify import verify
from tvm_npu.contract import stream
from tvm_npu.contract.config import get_config
from tvm_npu.contract.errors import NPUError
from tvm_npu.partition.kv_cache_check import KVLayer

CFG = get_config("npu-ref")
H, H_KV, T, D = 4, 2, 12, 16
ROW = 128  # one fp16 cache row of D = 16 (32 bytes), aligned
AREA = 2 * 2 * H_KV * T * ROW  # two layers' K and V


def _layer(S, index=0):
    return KVLayer(index, None, None, None, None, 0.25, H, H_KV, S, T, D)


def _plan(S, space, layer=0, area=AREA):
    return plan_kv_attention(CFG, _layer(S, layer), (2 * layer, 2 * layer + 1), space, None, area)


def _t(x):
    return tvm.runtime.tensor(np.ascontiguousarray(x))


def _bits(x):
    return np.asarray(x, np.float16).view(np.uint16)


class Step:
    """One compiled attention module of a space and the numpy model's cache it shares."""

    def __init__(self, S, space, model):
        self.S, self.model = S, model
        self.planned = _plan(S, space)
        verify(self.planned)
        self.mod = runtime.create_module("kv", stream.encode(dataclasses.replace(self.planned)))

    def run_and_check(self, rng, position):
        q = rng.standard_normal((1, H, self.S, D)).astype(np.float32)
        k, v = (rng.standard_normal((1, H_KV, self.S, D)).astype(np.float32) for _ in range(2))
        out = _t(np.zeros((1, H, self.S, D), np.float32))
        self.mod["kv"](_t(q), _t(k), _t(v), _t(np.array([position], np.int64)), out)
        f16 = [x[0].astype(np.float16) for x in (q, k, v)]
        want = kv.attention_step(self.model["k"], self.model["v"], *f16, position, np.float32(0.25))
        np.testing.assert_array_equal(_bits(out.numpy()[0].astype(np.float16)), _bits(want))
        for slot, name in ((0, "k"), (1, "v")):
            state = np.frombuffer(bytes(self.mod["get_state"](slot)), np.float16).reshape(H_KV, T, D)
            np.testing.assert_array_equal(_bits(state), _bits(self.model[name]))
        return runtime.profile_of(self.mod)["last"]


def _zero_model():
    return {"k": np.zeros((H_KV, T, D), np.float16), "v": np.zeros((H_KV, T, D), np.float16)}


def test_the_sram_plan_keeps_no_cache_in_ddr():
    """The plan says 1.5, has SRAM state tensors at the top of SRAM (layer 0 at the area's start), no DDR
    state region, and writes the new rows with pos_mode bit 2; its scratch stays below the area."""
    planned = _plan(2, 7)
    assert planned.state_bytes == 0 and planned.sram_state_bytes == AREA
    states = [t for t in planned.tensors if t.role == "sram_state"]
    assert [t.ddr_addr for t in states] == [CFG.sram_bytes - AREA, CFG.sram_bytes - AREA + H_KV * T * ROW]
    assert planned.sram_bytes_used <= CFG.sram_bytes - AREA
    assert not [c for c in planned.commands if c.op == "DMA_STORE" and c.args["pos_mode"]]
    assert sum(c.op == "DMA_LOAD" and c.args["pos_mode"] == 4 for c in planned.commands) == 2 * H_KV
    assert stream.decode(stream.encode(planned)).version == (1, 5)
    layer1 = _plan(2, 7, layer=1)
    assert [t.ddr_addr for t in layer1.tensors if t.role == "sram_state"][0] == CFG.sram_bytes - AREA // 2


def test_prefill_and_decode_share_the_sram_cache_bit_exact():
    """A prefill module (S = 2) at position 0, then a decode module (S = 1) of the same space at 2..6: each
    output and both slots as the numpy model says; DDR reads are the staged q, k and v rows only, the same
    at every position (an SRAM cache is read by no DMA), and the writes the output rows."""
    model = _zero_model()
    prefill, decode = Step(2, 4242, model), Step(1, 4242, model)
    # The runtime's derived limit: the last head's new value rows would leave their tensor at T - S + 1.
    assert [int(s.mod["position_limit"]()) for s in (prefill, decode)] == [T - 2, T - 1]
    rng = np.random.default_rng(0)
    last = prefill.run_and_check(rng, 0)
    assert last["ddr_read_bytes"] == (H + 2 * H_KV) * 2 * ROW
    for p in range(2, 7):
        last = decode.run_and_check(rng, p)
        assert last["ddr_read_bytes"] == (H + 2 * H_KV) * ROW
        assert last["ddr_write_bytes"] == H * ROW


def test_reset_zeroes_the_sram_cache():
    model = _zero_model()
    step = Step(1, 4343, model)
    rng = np.random.default_rng(1)
    for p in range(3):
        step.run_and_check(rng, p)
    assert np.abs(model["k"][:, :3].astype(np.float32)).max() > 0
    step.mod["reset_state"]()
    model["k"][:], model["v"][:] = 0, 0
    step.run_and_check(rng, 0)  # from zeros again: rows 1.. are 0 in the slots


def test_a_tile_in_the_area_outside_the_stream_state_tensors_is_refused():
    """Layer 0's stream with its q tile moved onto layer 1's cache rows (inside the area, in no state tensor
    of this stream): the verifier refuses it at compile time, the runtime at load (ERR_INVALID_ADDR)."""
    planned = _plan(1, 0)
    at = next(i for i, c in enumerate(planned.commands) if c.op == "DMA_LOAD" and c.args["pos_mode"] == 0)
    cmd = planned.commands[at]
    moved = dict(cmd.args, sram_addr=CFG.sram_bytes - AREA // 2)
    planned.commands[at] = stream.Command(cmd.op, moved, cmd.waits, cmd.note)
    with pytest.raises(NPUError) as err:
        verify(planned)
    assert err.value.code == "ERR_BAD_STREAM" and "SRAM state area" in str(err.value)
    with pytest.raises(NPUError) as err:
        runtime.create_module("kv", stream.encode(planned))
    assert err.value.code == "ERR_INVALID_ADDR" and "SRAM state area" in str(err.value)


def test_the_area_needs_format_1_5_and_room_for_the_scratch():
    planned = _plan(1, 0)
    with pytest.raises(NPUError) as err:  # a 1.4 reader knows no SRAM state area
        runtime.create_module("kv", stream.encode(dataclasses.replace(planned, version=(1, 4))))
    assert err.value.code == "ERR_BAD_STREAM" and "1.5" in str(err.value)
    # One KV head's buffers: q, scores, probabilities and output, g = 2 rows of 128 bytes each (1024 bytes).
    assert _plan(1, 0, area=CFG.sram_bytes - 1024).sram_bytes_used == 1024
    with pytest.raises(NPUError) as err:  # the area leaves too little SRAM for them
        _plan(1, 0, area=CFG.sram_bytes - 896)
    assert err.value.code == "ERR_SRAM_OVERFLOW" and "needs 1024 bytes of SRAM, 896 are available" in str(err.value)


def test_modules_of_a_space_must_agree_on_the_sram_address():
    """A second module whose slot 0 lies elsewhere in SRAM (a larger area) cannot share the space."""
    first = runtime.create_module("kv", stream.encode(_plan(1, 4444)))
    with pytest.raises(NPUError) as err:
        runtime.create_module("kv", stream.encode(_plan(1, 4444, area=2 * AREA)))
    assert err.value.code == "ERR_SHAPE_MISMATCH" and "state slot 0 of state space 4444" in str(err.value)
    del first
