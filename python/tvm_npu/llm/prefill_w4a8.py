"""A W4A8 prefill step (`tvm_npu.llm.compile(weights="int4", prefill_activations="int8", calibration=...)`).

Prefill runs S tokens a call: its dense layers are compute-bound, and the NPU's int8 MACs are faster than its
fp16 ones. Decode runs one token a call and reads every weight once: it is bound by the weights' bytes,
which int8 activations do not shrink. So the prefill step is quantized as W4A8 (`tvm_npu.quantize(...,
weight_bits=4, activations="int8")`, quantization/w4a8.py: int8 activations per tensor, calibrated on the
calibration text's prefill-bucket chunks, llm/weight_calibration.py) while decode stays W4A16, and both
hold the same int4 codes: the W4A16 quantization of the prefill step chooses them first (exactly as a plain
weights="int4" build does, so the decode step is unchanged) and its memo hands them to the W4A8 one.

Only the dense layers take int8 activations (their inputs quantized per tensor, their outputs
dequantized): the ops between them (the norms, RoPE, the residual adds, the gated MLP's product, the heads'
reshapes) and the attention stay fp16, as W4A8 schemes do. Measured on tiny-llama (docs/llm.md, RTN g128):
with those ops int8 too, the held-out perplexity rose +31% over the float model and the KL divergence was
0.22 nats per token (1,024 tokens); with them fp16, +1.0% and 0.008 over all 10,109 held-out tokens
(W4A16: +0.9%, 0.007). The attention is every op between a layer's scores (Q x K^T) and its P x V, the
softmax's inputs included (`attention_ops`): quantized, the mask's add would give the scores one int8
scale over [-1e9, max], and the resident KV cache's recognizer (partition/kv_cache_check.py) matches only
a float attention; Q, K and V themselves are the int8 dense layers' dequantized outputs, so the cache
holds those values. What stays float, with its reason, is `lm.meta["prefill_quantization"]["float_ops"]`;
where each op then ran, and in which precision, is `lm.meta["placements"]["prefill"]` ("device",
"precision").
"""

from __future__ import annotations

from tvm import relax

from .. import rewrite
from ..contract.errors import NPUError
from ..ir.graph import Graph, free_vars, op_name
from ..quantization import awq_fold, ptq

ACTIVATIONS = ("fp16", "int8")


def check(prefill_activations, weights: str, weight_method: str, calibration) -> None:
    """The coded errors of a prefill_activations= its other arguments do not allow."""
    if not isinstance(prefill_activations, str) or prefill_activations not in ACTIVATIONS:
        raise NPUError("ERR_INVALID_CONFIG", f"prefill_activations={prefill_activations!r}: use one of {ACTIVATIONS}")
    if prefill_activations == "fp16":
        return
    if weights != "int4":
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f'prefill_activations="int8" is a W4A8 prefill (int4 weights under int8 activations): pass '
            f'weights="int4", not {weights!r}',
        )
    if calibration is None:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            'prefill_activations="int8" calibrates the activations\' scales: pass calibration=[token ids of '
            "representative text, ...]",
        )


def refuse_one_step() -> None:
    """The coded error of a W4A8 prefill asked of one step model serving both steps."""
    raise NPUError(
        "ERR_INVALID_CONFIG",
        'prefill_activations="int8": one step model at seq_len 1 serves both steps here, so the prefill '
        "cannot differ from the decode step: give a builder callable(seq_len, max_context) or a (prefill, "
        'decode) pair, or prefill_activations="fp16"',
    )


def _two_activations(g: Graph, var) -> bool:
    """Whether `var` is a matmul of two computed tensors (Q x K^T, P x V), not a dense layer."""
    e = g.value.get(var)
    return op_name(e) == "relax.matmul" and all(isinstance(a, relax.Var) and a in g.value for a in e.args)


def attention_ops(mod) -> list[str]:
    """The var names of every layer's attention in `mod` as the quantizer sees it (rewrite.run, then
    FoldConstant): from each softmax back to its scores matmul (the scale, a softcap, the mask's add and
    the mask itself) and on to the P x V matmul that reads it (sdpa's NaN guard)."""
    g = Graph(relax.transform.FoldConstant()(rewrite.run(mod))["main"])
    found: set = set()
    for var, e in g.bindings:
        if op_name(e) != "relax.nn.softmax":
            continue
        back = [var]
        while back:  # to the scores' matmul (included) and the mask's inputs: the model's params
            v = back.pop()
            if v in found or v not in g.value:
                continue
            found.add(v)
            if v is var or not _two_activations(g, v):
                back += [u for u in free_vars(g.value[v]) if isinstance(u, relax.Var)]
        ahead = [var]
        while ahead:  # to P x V (included)
            v = ahead.pop()
            for u in g.uses.get(v, []):
                if u is not None and u not in found:
                    found.add(u)
                    if not _two_activations(g, u):
                        ahead.append(u)
    return [v.name for v, _ in g.bindings if v in found]


# Every op but the dense layers' matmul stays float (the attention's matmuls are skipped by name)
BETWEEN = tuple(op for op in ptq.UNIT_OPS if op != "relax.matmul")
_REASONS = {
    "attention": "the attention stays fp16 (the scores, the mask's add, the softmax, P x V over the cache)",
    "between": "W4A8 quantizes the dense layers' inputs only: the ops between them stay fp16",
}


def quantize(mod, data, group_size: int, weight_method: str, memo: dict):
    """(the W4A8 prefill module, what it keeps float as `meta["prefill_quantization"]`) of the float prefill
    step `mod`, its activations calibrated on `data` (weight_calibration.batches), its int4 codes from `memo`.
    Under AWQ the step is first given the scales the codes were chosen with (quantization/awq_fold.py): its
    int8 activations are then the scaled ones, each input channel divided by its s."""
    scaled = 0
    if weight_method == "awq":
        mod, scaled = awq_fold.scaled_float(mod, memo)
    qmod, report = ptq.quantize(
        mod,
        data,
        weight_bits=4,
        activations="int8",
        group_size=group_size,
        weight_method="rtn" if weight_method == "awq" else weight_method,  # every code is in the memo
        progress=False,
        memo=memo,
        skip=attention_ops(mod) + list(BETWEEN),
    )
    summary = {
        "activations": "int8",
        "calibration_batches": report.batches,
        "int8_ops": len(report.ops),
        "int4_layers": [t.name for t in report.int4_layers],
        "awq_scaled_layers": scaled,
        "int8_weights": [{"layer": name, "reason": why} for name, why in report.int8_weights],
        "float_ops": [{"name": s.name, "op": s.op, "reason": _reason(s.reason)} for s in report.skipped],
    }
    return qmod, summary


def _reason(reason: str) -> str:
    """A skipped op's reason as the user reads it: why W4A8 keeps it float, not the `skip` entry."""
    if not reason.startswith("skipped by the user"):
        return reason
    return _REASONS["between" if any(f"'{op}'" in reason for op in BETWEEN) else "attention"]
