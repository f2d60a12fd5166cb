"""Supported-operator rules: small `constraint_*` functions whose docstrings are the user-facing reasons.

A constraint returns None when the op is acceptable, or a short detail string when it is not; the
rejection is recorded with the constraint's reason code and docstring, so the partition report can say
exactly why an op stayed on the CPU and what to change. The limits come from the active NPUConfig.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import tvm
from tvm.ir.prim.expr import FloatImm, IntImm

from .config import NPUConfig, get_config

# The configuration the checks use; set by the partitioner for the duration of one partition.
_ACTIVE = {"config": None, "log": None}


@dataclass
class Rejection:
    """One op the pattern table matched but a constraint refused."""

    var: str  # the Relax variable bound to the op's result
    op: str
    pattern: str
    code: str
    reason: str
    detail: str


@contextlib.contextmanager
def checking(config: NPUConfig, log: list):
    """Run pattern checks against `config`, appending every Rejection to `log`."""
    saved = dict(_ACTIVE)
    _ACTIVE.update(config=config, log=log)
    try:
        yield
    finally:
        _ACTIVE.update(saved)


def _config() -> NPUConfig:
    return _ACTIVE["config"] or get_config()


def static_shape(expr) -> tuple | None:
    """The shape of `expr` as ints, or None when any dimension is symbolic or unknown."""
    ty = expr.ty if hasattr(expr, "ty") else expr.struct_info
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    dims = []
    for v in shape.values:
        if not isinstance(v, IntImm):
            return None
        dims.append(int(v.value))
    return tuple(dims)


def dtype_of(expr) -> str:
    ty = expr.ty if hasattr(expr, "ty") else expr.struct_info
    return str(getattr(ty, "dtype", ""))


def constant_value(expr):
    """Numpy value of a constant (None when not a compile-time constant)."""
    if isinstance(expr, tvm.ir.Constant):
        return expr.value.numpy()
    return None


# --- constraints: docstring = reason shown to the user; first word of the code = reason code ---

def constraint_float32(exprs):
    """NPU_E_DTYPE: tensors must be float32 (run on the NPU's fp16 datapath); int8 arrives with QDQ."""
    bad = [dtype_of(e) for e in exprs if dtype_of(e) != "float32"]
    return f"dtype {bad[0]}" if bad else None


def constraint_static_shape(exprs):
    """NPU_E_DYNAMIC_SHAPE: every shape must be static; symbolic dimensions stay on the CPU."""
    return "symbolic or unknown shape" if any(static_shape(e) is None for e in exprs) else None


def constraint_rank(exprs):
    """NPU_E_RANK: tensors must have rank at most max_rank (4)."""
    worst = max(len(static_shape(e)) for e in exprs)
    return f"rank {worst} > {_config().max_rank}" if worst > _config().max_rank else None


def constraint_conv_layout(call):
    """NPU_E_LAYOUT: conv2d must use data layout NCHW or NHWC, kernel layout OIHW, OHWI or HWIO."""
    a = call.attrs
    if a.data_layout not in ("NCHW", "NHWC") or a.kernel_layout not in ("OIHW", "OHWI", "HWIO"):
        return f"data_layout {a.data_layout}, kernel_layout {a.kernel_layout}"
    if a.out_layout != a.data_layout:
        return f"out_layout {a.out_layout} differs from data_layout {a.data_layout}"
    return None


def constraint_stride(call):
    """NPU_E_STRIDE: convolution strides must be 1 or 2."""
    strides = [int(s) for s in call.attrs.strides]
    return f"strides {strides}" if any(s not in (1, 2) for s in strides) else None


def constraint_groups(call):
    """NPU_E_GROUPS: grouped and depthwise convolution are not offloaded yet; use groups=1."""
    return f"groups {int(call.attrs.groups)}" if int(call.attrs.groups) != 1 else None


def constraint_width(widths):
    """NPU_E_WIDTH: feature-map width (and a matrix's inner dimension) must be at most max_width (2048)."""
    worst = max(widths)
    return f"width {worst} > {_config().max_width}" if worst > _config().max_width else None


def constraint_const_weight(weight):
    """NPU_E_NONCONST_WEIGHT: weights must be compile-time constants (bind them with params=...)."""
    return None if constant_value(weight) is not None else "weight is a run-time tensor"


def constraint_bias_per_channel(bias, out_channels: int, channel_axis: int, out_rank: int):
    """NPU_E_BIAS: a fused bias must be a constant broadcast along the output channels only."""
    shape = static_shape(bias)
    if shape is None:
        return "bias shape unknown"
    if len(shape) == 1 and shape[0] == out_channels and channel_axis == out_rank - 1:
        return None
    expected = [1] * out_rank
    expected[channel_axis] = out_channels
    if list(shape) == expected:
        return None
    return f"bias shape {list(shape)} is not a per-channel vector of {out_channels}"


def constraint_clip_bounds(act):
    """NPU_E_ACTIVATION: clip bounds must be compile-time numbers."""
    if act is None or act.op.name != "relax.clip":
        return None
    for bound in act.args[1:]:
        if not isinstance(bound, (IntImm, FloatImm)):
            return f"clip bound {bound} is not a constant"
    return None


def constraint_weight_2d(weight):
    """NPU_E_RANK: a matmul's weight must be a 2-D matrix (batched matmul stays on the CPU)."""
    return None if len(static_shape(weight)) == 2 else f"weight rank {len(static_shape(weight))}"


def reason_code(constraint) -> str:
    return constraint.__doc__.split(":", 1)[0]


def reason_text(constraint) -> str:
    return constraint.__doc__.split(":", 1)[1].strip()


def _run(ctx, pattern: str, checks) -> bool:
    """Apply (constraint, args) pairs in order; the first failure is logged and rejects the match."""
    for constraint, args in checks:
        detail = constraint(*args)
        if detail is not None:
            log = _ACTIVE["log"]
            if log is not None:
                var = ctx.value_to_bound_var.get(ctx.annotated_expr["op"])
                log.append(Rejection(var.name if var is not None else "?",
                                     ctx.annotated_expr["op"].op.name, pattern,
                                     reason_code(constraint), reason_text(constraint), detail))
            return False
    return True


def check_conv2d(ctx) -> bool:
    call = ctx.annotated_expr["op"]
    data, weight = ctx.annotated_expr["data"], ctx.annotated_expr["weight"]
    tensors = [data, weight, call]
    checks = [(constraint_float32, (tensors,)), (constraint_static_shape, (tensors,)),
              (constraint_rank, (tensors,)), (constraint_conv_layout, (call,)),
              (constraint_stride, (call,)), (constraint_groups, (call,)),
              (constraint_const_weight, (weight,))]
    if not _run(ctx, "conv2d", checks):
        return False
    layout = call.attrs.data_layout
    w_axis = layout.index("W")
    c_axis = layout.index("C")
    out_shape = static_shape(call)
    checks = [(constraint_width, ([static_shape(data)[w_axis], out_shape[w_axis]],))]
    if "bias" in ctx.annotated_expr:
        checks.append((constraint_bias_per_channel,
                       (ctx.annotated_expr["bias"], out_shape[c_axis], c_axis, 4)))
    checks.append((constraint_clip_bounds, (_act(ctx),)))
    return _run(ctx, "conv2d", checks)


def check_dense(ctx) -> bool:
    call = ctx.annotated_expr["op"]
    data, weight = ctx.annotated_expr["data"], ctx.annotated_expr["weight"]
    tensors = [data, weight, call]
    checks = [(constraint_float32, (tensors,)), (constraint_static_shape, (tensors,)),
              (constraint_rank, (tensors,)), (constraint_const_weight, (weight,))]
    if not _run(ctx, "dense", checks):
        return False
    out_shape = static_shape(call)
    checks = [(constraint_width, ([static_shape(data)[-1], out_shape[-1]],)),
              (constraint_weight_2d, (weight,))]
    if "bias" in ctx.annotated_expr:
        checks.append((constraint_bias_per_channel,
                       (ctx.annotated_expr["bias"], out_shape[-1], len(out_shape) - 1, len(out_shape))))
    checks.append((constraint_clip_bounds, (_act(ctx),)))
    return _run(ctx, "dense", checks)


def _act(ctx):
    act = ctx.annotated_expr.get("act")
    return act if act is not None and act.op.name == "relax.clip" else None


# Every constraint, for the generated supported-ops table.
ALL_CONSTRAINTS = [constraint_float32, constraint_static_shape, constraint_rank, constraint_conv_layout,
                   constraint_stride, constraint_groups, constraint_width, constraint_const_weight,
                   constraint_bias_per_channel, constraint_clip_bounds, constraint_weight_2d]
