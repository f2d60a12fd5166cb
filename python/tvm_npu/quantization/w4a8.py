"""W4A8: the int8 post-training quantization of ptq.py with group-wise int4 dense weights.

``tvm_npu.quantize(mod, data, weight_bits=4, activations="int8")`` quantizes activations exactly as the int8
PTQ does (per-tensor, calibrated) and gives each dense layer (a matmul with a constant weight) int4 codes
with one fp16 scale (and, asymmetric, a uint4 zero point) per `group_size` weights along K, chosen as
`quantize_weights_int4` chooses them (round to nearest or GPTQ). The weight is written as
weight_int4.py writes it, ``permute_dims(group_dequantize(codes, scales, zero points))``, between the
activation's dequantize and the output's quantize; the NPU runs the layer as CONV2D with w_dtype int4 /
uint4 under int8 (format 1.4, docs/npu.md section 2). A dense bias stays a float constant: the NPU adds it in
fp32 in units of the input's scale, where an int32 bias would have to be rounded to a grid no group scale
defines.

Convolutions keep int8 per-channel weights (CONV2D's int4 weights are for dense layers), and so does a dense
layer whose K `group_size` does not divide (listed in the report with the reason).
"""

from __future__ import annotations

from ..contract.errors import NPUError
from .weight_int4 import GROUP_SIZES, METHODS, Int4Layer, WeightLayer, WeightQuantReport, _key, layer_inputs


def check_options(group_size: int, method: str, calibration_data) -> None:
    """The errors quantize_weights_int4 raises for the same options."""
    if group_size not in GROUP_SIZES:
        raise NPUError(
            "ERR_INVALID_CONFIG", f"quantize: group_size {group_size}; the NPU's group sizes are {GROUP_SIZES}"
        )
    if method not in METHODS:
        raise NPUError("ERR_INVALID_CONFIG", f"quantize: weight method {method!r}; use one of {METHODS}")
    if method == "awq":  # its 1/s would have to be folded into an int8 tensor's scale, per channel
        raise NPUError(
            "ERR_INVALID_CONFIG", 'quantize: weight method "awq" is for float activations (W4A16): use "rtn" or "gptq"'
        )
    if calibration_data is None:
        raise NPUError(
            "ERR_INVALID_CONFIG", "quantize: int8 activations need calibration_data (batches of model inputs)"
        )


def _memoized(memo: dict | None, w, group_size: int, symmetric: bool):
    """The Int4Layer `memo` (quantize_weights_int4's) holds for the weight `w` [N, K], if its group and
    symmetry are these (an activation-aware layer's codes are of the scaled weight: never taken)."""
    layer, s = (memo or {}).get(_key(w.T), (None, None))
    if layer is None or s is not None or layer.group != group_size or layer.symmetric != symmetric:
        return None
    return layer


def choose_int4(
    mod, weighted: list, group_size: int, symmetric: bool, method: str, data, progress, report, memo=None
) -> None:
    """Give each dense unit of `weighted` (ptq._Unit) its Int4Layer (`u.w4`), listing it in
    `report.int4_layers`; a dense whose K `group_size` does not divide keeps int8 weights, listed in
    `report.int8_weights` with the reason. A weight `memo` holds (quantize_weights_int4's, from the W4A16
    quantization of the same weights) takes those codes, so a W4A8 and a W4A16 module of one model hold
    the same int4 codes; the others are chosen here and added to it."""
    dense = []
    for u in weighted:
        if u.op != "matmul":
            continue
        w = u.weight if u.w_perm is not None else u.weight.T  # [N, K]
        if w.shape[1] % group_size:
            reason = f"K {w.shape[1]} is not a multiple of group_size {group_size}: int8 weights per channel"
            report.int8_weights.append((u.name, reason))
        else:
            dense.append((u, w.astype("float32")))
    fresh = [(u, w) for u, w in dense if _memoized(memo, w, group_size, symmetric) is None]
    xs = {}
    if method == "gptq" and fresh:
        inputs = [u.inputs[0] for u, _ in fresh]
        rows = layer_inputs(mod, inputs, data, progress, WeightQuantReport(method, 0, True))
        xs = {id(u): x for (u, _), x in zip(fresh, rows)}
    for u, w in dense:
        u.w4 = _memoized(memo, w, group_size, symmetric)
        if u.w4 is None:
            u.w4 = Int4Layer.of(w, group_size, symmetric, method, xs.get(id(u)))
            if memo is not None:
                memo[_key(w.T)] = (u.w4, None)
        report.int4_layers.append(WeightLayer(u.name, u.name, "matmul", w.shape[1], w.shape[0], u.w4.sqnr_db))
