"""The check of a nearest-neighbour upsampling by integer factors (relax.image.resize2d, the "npu.resize" and
"npu.qresize" composites; patterns.resize_patterns): the tensors, the attribute table's constraints, then
those of resize_constraints.py (factors, index mapping, channels, width, SRAM). It runs on the NPU as
addressing: POOL 1x1 copies into the output's strided places (backend/plan/upsample_plan.py)."""

from __future__ import annotations

from ..ir.values import static_shape
from .attributes import attribute_checks
from .checks import (
    QUANT_CONSTRAINTS,
    TENSOR_CONSTRAINTS,
    PartitionRun,
    _check_tensors,
    _quant_checks,
    _resolve,
    _run,
    applies,
)
from .constraints import constraint_width
from .resize_constraints import (
    constraint_resize_channels,
    constraint_resize_factor,
    constraint_resize_fits,
    constraint_resize_layout,
    constraint_resize_method,
    constraint_resize_same_quantization,
)


@applies(
    *TENSOR_CONSTRAINTS,
    constraint_resize_method,
    constraint_resize_layout,
    constraint_resize_factor,
    constraint_resize_channels,
    constraint_width,
    constraint_resize_fits,
    int8=QUANT_CONSTRAINTS + [constraint_resize_same_quantization],
)
def check_resize(run: PartitionRun, ctx) -> bool:
    """resize2d (annotations "data" its input, its dequantize in int8, "op" the resize, "root" the match's
    result); fp16 on the NPU as every float op, int8 in the QDQ form with one set of parameters."""
    ann = ctx.annotated_expr
    call = ann["op"]
    x = call.args[0]
    checks = _check_tensors(run, [x, call]) + attribute_checks(call) + _quant_checks(ctx)
    if "quantize" in ann:
        checks.append((constraint_resize_same_quantization, (_resolve(ctx, ann["data"]), ann["quantize"])))
    if not _run(run, ctx, "resize", checks):
        return False
    elem = 1 if "quantize" in ann else 2
    checks = [
        (constraint_resize_factor, (x, call)),
        (constraint_resize_channels, (x, elem)),
        (constraint_width, ([static_shape(call)[3]], run.config)),  # the output's, the wider
        (constraint_resize_fits, (x, call, elem, run.config)),
    ]
    return _run(run, ctx, "resize", checks)
