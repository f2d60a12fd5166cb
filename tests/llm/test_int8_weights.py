"""weights="int8" (W8A16: int8 dense weights, one fp32 scale per output column, fp16 activations) and
weights="int4" (W4A16: int4 codes, one fp16 scale per group of K) against an independent reference: TVM
llvm running the same weight-quantized decode step (the dequantize in fp32 on the CPU) in its own host
loop; and the bytes and cycles they save."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from llm.reference import BUILDERS, HostLoop, S, T, assert_logits_close, compiled
from npu_ref import int4
from tvm_npu.contract import stream
from tvm_npu.quantization import quantize_weights_int4, quantize_weights_int8

PROMPT = np.array([3, 14, 15, 92, 65], np.int64)
NEW = 8


class _LlvmDecoder(HostLoop):
    """The decode step model, weight-quantized, built for llvm; the cache held by the loop."""

    def __init__(self, builder, quantize=quantize_weights_int8):
        model = builder(seq_len=1, max_context=T)
        mod = quantize(tvm_npu.from_onnx(model))
        self.vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        self.shape = [d.dim_value for d in model.graph.input[2].type.tensor_type.shape.dim]
        self.names = [i.name for i in model.graph.input]

    def step(self, args):
        return [r.numpy() for r in self.vm["main"](*[tvm.runtime.tensor(a) for a in args])]


def _dense_weight_bytes(lm) -> int:
    regions = lm.reports["decode"].regions.values()
    return sum(lay["weight_bytes"] for r in regions for lay in r.get("layers", []) if lay["composite"] == "npu.dense")


def _compiled_and_checked(arch, quantize, **weights):
    """tvm_npu.llm.compile(..., **weights), its logits and greedy tokens checked against the llvm decoder
    of the same model quantized by `quantize`, along the reference's path (a slip shows as one step)."""
    lm = tvm_npu.llm.compile(BUILDERS[arch], max_context=T, prefill_len=S, **weights)
    want_logits, want_tokens = _LlvmDecoder(BUILDERS[arch], quantize).run(PROMPT, NEW)
    got = [lm.prefill(PROMPT)]
    for token in want_tokens[:-1]:
        got.append(lm.decode(token))
    for g, w in zip(got, want_logits):
        assert_logits_close(g, w)
    assert [int(np.argmax(g)) for g in got] == want_tokens
    return lm


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_int8_weights_match_the_weight_quantized_model_and_halve_the_weight_bytes(arch):
    lm = _compiled_and_checked(arch, quantize_weights_int8, weights="int8")
    # Every dense layer of the decode step on the NPU with int8 codes: half the fp16 step's weight bytes
    # (plus a row of fp32 scales per layer).
    dense = [p for p in lm.placements["decode"] if p["composite"] == "npu.dense"]
    assert dense and all(p["device"] == "npu" for p in dense)
    assert _dense_weight_bytes(lm) < 0.6 * _dense_weight_bytes(compiled(arch))


def _convs(module):
    return [c for c in stream.decode(bytes(module["get_stream"]())).commands if c.op == "CONV2D"]


def _int4(mod):
    return quantize_weights_int4(mod, group_size=32, progress=False)[0]


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_int4_weights_match_the_weight_quantized_model_and_beat_int8(arch):
    lm = _compiled_and_checked(arch, _int4, weights="int4", group_size=32)
    dense = [p for p in lm.placements["decode"] if p["composite"] == "npu.dense"]
    assert dense and all(p["device"] == "npu" for p in dense)
    # Every dense command with int4 codes, GPT-2's fused QKV too (split into three by its columns).
    w_dtypes = {c.args["w_dtype"] for m in lm._runners["decode"].modules for c in _convs(m)}
    assert w_dtypes == {int4.w_dtype(True, 32)}, w_dtypes
    # Issue 21: decode DDR bytes per token <= 0.6x the int8 build's, tokens/s on the cycle model >= 1.7x.
    # These test models are tiny (d 64): the fixed per-step bytes (activations, KV rows) weigh more than in
    # a real decoder, so only the weights' own share is held to 0.6x here; benchmarks/llm_decode.py
    # measures the whole step on larger models.
    lm8 = tvm_npu.llm.compile(BUILDERS[arch], max_context=T, prefill_len=S, weights="int8")
    assert _dense_weight_bytes(lm) <= 0.6 * _dense_weight_bytes(lm8)
    for m in (lm, lm8):
        m.prefill(PROMPT)
        m.decode(7)
    p4, p8 = lm.profile()["decode"], lm8.profile()["decode"]
    assert p4["ddr_bytes"] < p8["ddr_bytes"] and p4["cycles"] < p8["cycles"]
