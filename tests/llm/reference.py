"""The two decoders of tests/llm, compiled once per session (`compiled`), and an independent reference: onnxruntime
running the same step models in a numpy host loop (its own cache, token by token with the decode step)."""

import functools
import math

import numpy as np
import onnxruntime as ort

import tvm_npu
from tvm_npu.models.decoder import gpt2_step, llama_step

T, S = 44, 8  # max_context, prefill bucket: T is not a multiple of S on purpose (the last chunk moves)
BUILDERS = {
    "gpt2": functools.partial(gpt2_step, layers=2, d=64, heads=4, ffn=256, vocab=256),
    "llama": functools.partial(llama_step, layers=2, d=64, heads=4, kv_heads=2, ffn=128, vocab=256),
}


class HostLoop:
    """A decode step model run token by token by a numpy host loop holding the cache; subclasses give
    `step(args) -> outputs` (numpy in, numpy out) and `shape` (one cache tensor's) and `names`."""

    def run(self, ids, new_tokens: int):
        """(logits after each prompt token's position n-1 and each greedy token, the greedy tokens)."""
        cache = [np.zeros(self.shape, np.float32) for _ in self.names[2:]]
        logits, seq, out = [], list(ids), []
        for p in range(len(ids) + new_tokens - 1):
            res = self.step([np.array([[seq[p]]], np.int64), np.array([p], np.int64), *cache])
            cache = res[1:]
            if p >= len(ids) - 1:
                logits.append(res[0][0, 0])
                out.append(int(np.argmax(res[0][0, 0])))
                seq.append(out[-1])
        return logits, out


class OrtDecoder(HostLoop):
    """onnxruntime on the decode step model (S = 1), the cache as numpy arrays held by this loop."""

    def __init__(self, builder, max_context=T):
        model = builder(seq_len=1, max_context=max_context)
        self.sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.sess.get_inputs()]
        self.shape = [d.dim_value for d in model.graph.input[2].type.tensor_type.shape.dim]

    def step(self, args):
        return self.sess.run(None, dict(zip(self.names, args)))


_COMPILED: dict = {}


def compiled(name, kv_placement="auto"):
    """The test decoder `name` (the cache where `kv_placement` puts it: "auto" is SRAM for these models)."""
    if (name, kv_placement) not in _COMPILED:
        _COMPILED[name, kv_placement] = tvm_npu.llm.compile(
            BUILDERS[name], max_context=T, prefill_len=S, kv_placement=kv_placement
        )
    return _COMPILED[name, kv_placement]


def assert_logits_close(got, want):
    bound = 1e-2 * max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= bound, f"max |npu - onnxruntime| {err:.3g} > {bound:.3g}"


def gpt2_mask_minus_50(seq_len, max_context):
    """The GPT-2 step model with its mask value -1e9 changed to -50 (its exp is not 0): a mask the causal
    SOFTMAX does not reproduce, so the resident cache refuses it (NPU_E_MASK) and the host keeps the cache."""
    model = BUILDERS["gpt2"](seq_len=seq_len, max_context=max_context)
    for init in model.graph.initializer:
        if init.data_type == 1 and not init.dims and np.frombuffer(init.raw_data, np.float32)[0] == -1e9:
            init.raw_data = np.float32(-50.0).tobytes()
    return model


def assert_decode_ddr_grows_by_the_kv_rows(lm, start: int = 3, steps: int = 16):
    """DDR bytes of a decode step at position p = a constant (weights and activations) + the K and V rows
    [0, p] of every layer and KV head, each row a DMA of D * 2 bytes rounded up to whole bursts
    (npu-ref: 128-byte bursts, so a 32-byte row of D = 16 moves 128 bytes); kv_bytes counts D * 2 per row.
    `lm` is resident with its cache in DDR (kv_placement="ddr"), from a reset cache; a prompt of `start`
    tokens, then `steps` decodes."""
    info, cfg = lm.meta["step"], lm.meta["config"]
    L, H_kv, D = info["layers"], info["kv_heads"], info["head_dim"]
    row = math.ceil(D * 2 / cfg["burst_bytes"]) * cfg["burst_bytes"]
    weights = sum(r["weight_bytes"] for r in lm.reports["decode"].regions.values())
    lm.prefill(np.arange(start))
    runner, rest, kv_read = lm._runners["decode"], set(), 0
    for p in range(start, start + steps):
        before = runner.counters()["ddr_bytes"]
        lm.decode(7)
        kv_read += 2 * L * H_kv * (p + 1) * D * 2
        rest.add(runner.counters()["ddr_bytes"] - before - 2 * L * H_kv * (p + 1) * row)
    assert len(rest) == 1 and rest.pop() >= weights  # the weights are read every step
    assert lm.profile()["decode"]["kv_bytes"] == kv_read
