"""The check of GroupNorm (GN_STATS and GN_APPLY, format 1.7, docs/npu.md sections 2 and 6) in the form
rewrite/fuse_group_norm.py gives every exported GroupNorm: reshape(x, [N, G, C / G * H * W]) ->
layer_norm(axes -1, gamma 1, beta 0) -> reshape to x's shape -> multiply by gamma -> add beta, per channel,
optionally -> silu (patterns.group_norm_patterns). The NPU runs the whole chain as one layer over the NHWC
map: the statistics of every group over all row tiles, then the normalization of each tile."""

from __future__ import annotations

import numpy as np

from ..contract.config import NPUConfig
from ..ir.values import constant_value, static_shape
from .checks import TENSOR_CONSTRAINTS, PartitionRun, _check_tensors, _resolve, _run, applies

GN_RECORD_BYTES = 12  # one group's {count, mean, m2} (docs/npu.md section 6)


def _align(n: int, cfg: NPUConfig) -> int:
    return -(-n // cfg.alignment) * cfg.alignment


def _channel_values(ctx, call, channels: int):
    """(the tensor operand, the C per-channel values) of a multiply / add, or (None, why)."""
    for k in (0, 1):
        arg = _resolve(ctx, call.args[k])
        value = constant_value(arg)
        if value is None:
            continue
        shape = list(value.shape)
        per_channel = shape in ([channels, 1, 1], [1, channels, 1, 1]) or (channels == 1 and value.size == 1)
        if value.dtype != np.float32 or not per_channel:
            return None, f"{call.op.name.removeprefix('relax.')} by a {value.dtype} constant {shape}, not [C, 1, 1]"
        return call.args[1 - k], value.reshape(-1)
    return None, f"{call.op.name.removeprefix('relax.')} by a tensor computed at run time"


def constraint_group_norm_form(ctx, x, rows, norm, back, scale, shift):
    """NPU_E_GROUP_NORM: a GroupNorm runs on the NPU as the chain the GroupNorm rewrite writes over a 4-D
    NCHW map x [N, C, H, W]: x viewed as [N, G, C / G * H * W] with C a multiple of G, a layer_norm of each
    row over its last axis with gamma 1, beta 0 and epsilon finite and >= 0, the view back to x's shape,
    then a multiply by a float32 constant gamma and an add of a float32 constant beta, one value per channel
    ([C, 1, 1] or [1, C, 1, 1]). Another chain of these ops keeps its ops' own placement."""
    shape = static_shape(x)
    if shape is None or len(shape) != 4:
        return f"x has rank {len(shape) if shape is not None else '?'}, not a 4-D map"
    n, c, h, w = shape
    grouped = static_shape(rows)
    if grouped is None or len(grouped) != 3 or grouped[0] != n or grouped[1] < 1 or c % grouped[1]:
        return f"x {list(shape)} viewed as {list(grouped) if grouped is not None else '?'}, not [N, G, C / G * H * W]"
    if grouped[2] != c // grouped[1] * h * w or list(static_shape(back)) != list(shape):
        return f"x {list(shape)} viewed as {list(grouped)} and back as {list(static_shape(back))}"
    axes = [int(a) for a in norm.attrs.axes]
    if axes not in ([-1], [2]):
        return f"layer_norm over axes {axes}"
    eps = float(norm.attrs.epsilon)
    if not np.isfinite(eps) or eps < 0:
        return f"epsilon {eps}"
    for name, arg, want in zip(("gamma", "beta"), norm.args[1:3], (1.0, 0.0)):
        value = constant_value(_resolve(ctx, arg))
        if value is None or not np.all(value == want):
            return f"the layer_norm's {name} is not all {want:g}"
    for call in (scale, shift):
        _, why = _channel_values(ctx, call, c)
        if isinstance(why, str):
            return why
    return None


def constraint_group_norm_width(w: int, c: int, cfg: NPUConfig):
    """NPU_E_WIDTH: GN_STATS and GN_APPLY take a map of width W and C channels up to max_width (2048) each;
    the height is not limited (the map is tiled by rows, the statistics merged over the tiles)."""
    worst = max(w, c)
    return f"{'width' if w >= c else 'channels'} {worst} > {cfg.max_width}" if worst > cfg.max_width else None


def constraint_group_norm_fits(w: int, c: int, groups: int, cfg: NPUConfig):
    """NPU_E_SRAM: a GroupNorm's smallest tile must fit SRAM: two input and two output buffers of one fp16
    map row (W * C values), gamma and beta (C fp32 values each) and the G statistics records (12 bytes
    each). A larger map runs on the CPU; a configuration with more SRAM keeps it on the NPU."""
    row = _align(w * c * 2, cfg)
    need = 4 * row + 2 * _align(c * 4, cfg) + _align(groups * GN_RECORD_BYTES, cfg)
    return f"{need} bytes > {cfg.sram_bytes}" if need > cfg.sram_bytes else None


@applies(*TENSOR_CONSTRAINTS, constraint_group_norm_form, constraint_group_norm_width, constraint_group_norm_fits)
def check_group_norm(run: PartitionRun, ctx) -> bool:
    """reshape -> layer_norm -> reshape -> multiply -> add [-> silu] (annotations "data" x, "rows" and
    "back" the views, "op" the layer_norm a refusal is reported on, "scale" / "shift" the affine, "root"
    the chain's result); fp16 on the NPU, as every float op. No int8 form."""
    ann = ctx.annotated_expr
    x, root = _resolve(ctx, ann["data"]), ann["root"]
    parts = [_resolve(ctx, ann[k]) for k in ("rows", "op", "back", "scale", "shift")]
    if not _run(run, ctx, "group_norm", _check_tensors(run, [x, root])):
        return False
    if not _run(run, ctx, "group_norm", [(constraint_group_norm_form, (ctx, x, *parts))]):
        return False
    _, c, _, w = static_shape(x)
    groups = static_shape(parts[0])[1]
    checks = [
        (constraint_group_norm_width, (w, c, run.config)),
        (constraint_group_norm_fits, (w, c, groups, run.config)),
    ]
    return _run(run, ctx, "group_norm", checks)
