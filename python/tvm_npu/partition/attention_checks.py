"""The check of a softmax with its scale and additive mask fused (SOFTMAX format 1.4: attention's
softmax(scores * scale + mask), docs/npu.md section 2). Its own module because checks.py is full; it
runs check_softmax's tensor, attribute and input-range checks, then the factor's and the mask's."""

from __future__ import annotations

from ..ir.values import static_shape
from .attributes import attribute_checks, attribute_constraints
from .checks import (
    QUANT_CONSTRAINTS,
    TENSOR_CONSTRAINTS,
    PartitionRun,
    _check_tensors,
    _quant_checks,
    _run,
    _view_source,
    applies,
)
from .constraints import constraint_softmax_input, constraint_width
from .transformer_constraints import constraint_softmax_mask, constraint_softmax_scale, softmax_scale


@applies(
    *TENSOR_CONSTRAINTS,
    *attribute_constraints("relax.nn.softmax"),
    constraint_width,
    constraint_softmax_input,
    constraint_softmax_scale,
    constraint_softmax_mask,
    int8=QUANT_CONSTRAINTS,
)
def check_softmax_masked(run: PartitionRun, ctx) -> bool:
    """softmax(x * c + mask), softmax(x / c + mask), softmax(x + mask), softmax(x * c), softmax(x / c):
    annotations "op" (the softmax), "data" (x), "scale_op" / "scale_c" and "mask_add" / "mask_c" where
    the form has them (patterns.softmax_patterns)."""
    ann = ctx.annotated_expr
    call, data = ann["op"], ann["data"]
    tensors = [data, call]
    checks = _check_tensors(run, tensors) + _quant_checks(ctx)
    if not _run(run, ctx, "softmax", checks):
        return False
    shape, in_shape = static_shape(call), static_shape(data)
    checks = attribute_checks(call) + [(constraint_width, ([shape[-1]], run.config))]
    if "quantize" not in ann:  # int8 codes are exact: no fp16 staging of a float input
        checks.append((constraint_softmax_input, _view_source(ctx, data)))
    scale = 1.0
    if "scale_op" in ann:
        divide = ann["scale_op"].op.name == "relax.divide"
        checks.append((constraint_softmax_scale, (ann["scale_c"], divide, in_shape, shape)))
        scale = softmax_scale(ann["scale_c"], divide, in_shape, shape)[0] or 1.0
    if "mask_add" in ann:
        checks.append((constraint_softmax_mask, (ann["mask_c"], shape, scale, in_shape)))
    return _run(run, ctx, "softmax", checks)
