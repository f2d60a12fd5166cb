"""The check of a dense of int8 activations and group-wise int4 weights (W4A8: CONV2D's w_dtype int4 /
uint4 under an int8 dtype, docs/npu.md section 2, format 1.4), matched in the QDQ form a quantized model
has: quantize(matmul(dequantize(x), W) [+ b] [+ act]) with W a group-wise dequantization of constant 4-bit
codes (ir/group_quant.py) and b any constant (the NPU adds it in fp32, in units of the input's scale).

What it refuses stays on the fp16 path (the matmul, with its weight folded or as W4A16) or the CPU, with
the reason of the first constraint it failed in the build report."""

from __future__ import annotations

from ..ir.values import static_shape
from .checks import (
    EPILOGUE,
    QUANT_CONSTRAINTS,
    TENSOR_CONSTRAINTS,
    PartitionRun,
    _act,
    _check_tensors,
    _quant_checks,
    _resolve,
    _run,
    applies,
)
from .constraints import (
    constraint_bias_per_channel,
    constraint_clip_bounds,
    constraint_dense_fits,
    constraint_int4_weights,
    constraint_weight_2d,
)


@applies(
    *TENSOR_CONSTRAINTS,
    constraint_dense_fits,
    constraint_weight_2d,
    *EPILOGUE,
    int8=QUANT_CONSTRAINTS + [constraint_int4_weights],
)
def check_dense_w4a8(run: PartitionRun, ctx) -> bool:
    ann = ctx.annotated_expr
    call = ann["op"]
    data, weight = call.args[0], call.args[1]
    # int8 data and output with per-tensor scales (the weight is annotated "int4_weight": not int8 codes)
    checks = _check_tensors(run, [data, weight, call]) + _quant_checks(ctx)
    if not _run(run, ctx, "dense_w4a8", checks):
        return False
    out_shape = static_shape(call)
    checks = [
        (constraint_dense_fits, (static_shape(data)[-1], out_shape[-1], 1, run.config)),
        (constraint_weight_2d, (weight,)),
        (constraint_int4_weights, (ann["int4_weight"], lambda e: _resolve(ctx, e))),
    ]
    if "bias" in ann:
        rank = len(out_shape)
        checks.append((constraint_bias_per_channel, (ann["bias"], out_shape[-1], rank - 1, rank)))
    checks.append((constraint_clip_bounds, (_act(ctx),)))
    return _run(run, ctx, "dense_w4a8", checks)
