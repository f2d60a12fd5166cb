"""The check of GroupNorm (GN_STATS and GN_APPLY, format 1.7, docs/npu.md sections 2 and 6) in the form
rewrite/fuse_group_norm.py gives every exported GroupNorm: reshape(x, [N, G, C / G * H * W]) ->
layer_norm(axes -1, gamma 1, beta 0) -> reshape to x's shape -> multiply by gamma -> add beta, per channel,
optionally -> silu (patterns.group_norm_patterns). The NPU runs the whole chain as one layer over the NHWC
map: the statistics of every group over all row tiles, then the normalization of each tile."""

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
from .transformer_constraints import (
    constraint_group_norm_fits,
    constraint_group_norm_form,
    constraint_group_norm_width,
    constraint_norm_axes,
    constraint_norm_params,
)


@applies(
    *TENSOR_CONSTRAINTS,
    constraint_norm_axes,
    constraint_norm_params,
    constraint_group_norm_form,
    constraint_group_norm_width,
    constraint_group_norm_fits,
    int8=QUANT_CONSTRAINTS,
)
def check_group_norm(run: PartitionRun, ctx) -> bool:
    """reshape -> layer_norm -> reshape -> multiply -> add [-> silu] (annotations "data" x, "rows" and
    "back" the views, "op" the layer_norm a refusal is reported on, "scale" / "shift" the affine, "root"
    the chain's result); fp16 on the NPU, as every float op. No int8 form (_quant_checks finds no QDQ)."""
    ann = ctx.annotated_expr
    x, root = _resolve(ctx, ann["data"]), ann["root"]
    parts = [_resolve(ctx, ann[k]) for k in ("rows", "op", "back", "scale", "shift")]
    # The layer_norm's attributes as the table checks them (axes, then epsilon / gamma / beta), then the form.
    checks = _check_tensors(run, [x, root]) + _quant_checks(ctx) + attribute_checks(parts[1])
    if not _run(run, ctx, "group_norm", checks):
        return False
    if not _run(run, ctx, "group_norm", [(constraint_group_norm_form, (lambda e: _resolve(ctx, e), x, *parts))]):
        return False
    _, c, _, w = static_shape(x)
    groups = static_shape(parts[0])[1]
    checks = [
        (constraint_group_norm_width, (w, c, run.config)),
        (constraint_group_norm_fits, (w, c, groups, run.config)),
    ]
    return _run(run, ctx, "group_norm", checks)
