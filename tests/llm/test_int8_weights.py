"""weights="int8" (W8A16: int8 dense weights, one fp32 scale per output column, fp16 activations) against
an independent reference: TVM llvm running the same weight-quantized decode step (the dequantize in fp32 on
the CPU) in its own host loop; and the bytes it saves."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from llm.reference import BUILDERS, HostLoop, S, T, assert_logits_close, compiled
from tvm_npu.quantization import quantize_weights_int8

PROMPT = np.array([3, 14, 15, 92, 65], np.int64)
NEW = 8


class _LlvmDecoder(HostLoop):
    """The decode step model, weight-quantized, built for llvm; the cache held by the loop."""

    def __init__(self, builder):
        model = builder(seq_len=1, max_context=T)
        mod = quantize_weights_int8(tvm_npu.from_onnx(model))
        self.vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        self.shape = [d.dim_value for d in model.graph.input[2].type.tensor_type.shape.dim]
        self.names = [i.name for i in model.graph.input]

    def step(self, args):
        return [r.numpy() for r in self.vm["main"](*[tvm.runtime.tensor(a) for a in args])]


def _dense_weight_bytes(lm) -> int:
    regions = lm.reports["decode"].regions.values()
    return sum(lay["weight_bytes"] for r in regions for lay in r.get("layers", []) if lay["composite"] == "npu.dense")


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_int8_weights_match_the_weight_quantized_model_and_halve_the_weight_bytes(arch):
    lm = tvm_npu.llm.compile(BUILDERS[arch], max_context=T, prefill_len=S, weights="int8")
    want_logits, want_tokens = _LlvmDecoder(BUILDERS[arch]).run(PROMPT, NEW)
    got = [lm.prefill(PROMPT)]
    for token in want_tokens[:-1]:  # the reference's path, so a slip shows as one step
        got.append(lm.decode(token))
    for g, w in zip(got, want_logits):
        assert_logits_close(g, w)
    assert [int(np.argmax(g)) for g in got] == want_tokens
    # Every dense layer of the decode step on the NPU with int8 codes: half the fp16 step's weight bytes
    # (plus a row of fp32 scales per layer).
    dense = [p for p in lm.placements["decode"] if p["composite"] == "npu.dense"]
    assert dense and all(p["device"] == "npu" for p in dense)
    assert _dense_weight_bytes(lm) < 0.6 * _dense_weight_bytes(compiled(arch))
