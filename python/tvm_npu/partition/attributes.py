"""The attribute table: for every Relax op the pattern table claims, each field of its attrs node and
each non-tensor argument, with the values the NPU runs exactly and the constraint that refuses the
others.

One source: the checks run the attribute constraints named here (`attribute_checks`), SUPPORTED_OPS.md
prints the table (tools/supported_ops.py), and tests/partition/test_attribute_completeness.py fails when
TVM gives a claimed op an attribute the table does not name, or when an entry's constraint is not one
its family runs. frontend/onnx_attributes.py says which of these each ONNX attribute becomes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .constraints import (
    constraint_bias_per_channel,
    constraint_clip_bounds,
    constraint_concat,
    constraint_conv_layout,
    constraint_float32,
    constraint_groups,
    constraint_int8_activations,
    constraint_per_tensor,
    constraint_permute_view,
    constraint_pool,
    constraint_pool_window_fits,
    constraint_quant_params,
    constraint_reshape_keeps_rows,
    constraint_slice_rows,
    constraint_softmax_axis,
    constraint_staged_reshape,
    constraint_stride,
    constraint_symmetric_weights,
)
from .resize_constraints import constraint_resize_factor, constraint_resize_layout, constraint_resize_method
from .transformer_constraints import (
    constraint_matmul_transpose,
    constraint_norm_axes,
    constraint_norm_params,
    constraint_repeat_kv,
)


@dataclass(frozen=True)
class Attr:
    """What the NPU does with one attribute (or argument) of a Relax op.

    `npu` is the values that run on the NPU, as SUPPORTED_OPS.md shows them. `check` is the constraint,
    called with the op's call alone, that refuses every other value (the family's check runs it through
    `attribute_checks`); `via` are constraints the family runs on more than the call (the output dtype,
    the operands) that refuse them instead. Neither: every value runs exactly (the lowering reads it)."""

    npu: str
    check: Callable | None = None
    via: tuple = ()

    @property
    def constraints(self) -> tuple:
        return ((self.check,) if self.check else ()) + self.via


def exact(npu: str) -> Attr:
    return Attr(npu)


def checked(npu: str, constraint) -> Attr:
    return Attr(npu, check=constraint)


def through(npu: str, *constraints) -> Attr:
    return Attr(npu, via=constraints)


_OUT_FLOAT32 = through("unset or float32 (the output tensor must be float32)", constraint_float32)

_POOL = {
    "pool_size": through("any window that fits in SRAM", constraint_pool_window_fits),
    "strides": checked("1 or 2", constraint_pool),
    "dilation": checked("1 (POOL has no dilation operand)", constraint_pool),
    "padding": exact("any: top and left as virtual padding, bottom and right read past the tile"),
    "ceil_mode": checked("False", constraint_pool),
    "count_include_pad": checked(
        "True, or False with no padding (the NPU divides by the whole window); max pool: either", constraint_pool
    ),
    "layout": checked("NCHW or NHWC", constraint_pool),
    "out_layout": checked("the input layout", constraint_pool),
}

# The attrs fields of each claimed Relax op (an op without an attrs node maps to {}).
RELAX_ATTRS: dict[str, dict[str, Attr]] = {
    "relax.nn.conv2d": {
        "strides": checked("1 or 2", constraint_stride),
        "padding": exact("any: top and left as virtual padding, bottom and right read past the tile"),
        "dilation": exact("any (CONV2D's dil_h, dil_w)"),
        "groups": checked("1, or depthwise (groups = input channels = output channels)", constraint_groups),
        "data_layout": checked("NCHW or NHWC", constraint_conv_layout),
        "kernel_layout": checked("OIHW, OHWI or HWIO", constraint_conv_layout),
        "out_layout": checked("the data layout", constraint_conv_layout),
        "out_dtype": _OUT_FLOAT32,
    },
    "relax.matmul": {"out_dtype": _OUT_FLOAT32},
    "relax.nn.max_pool2d": _POOL,
    "relax.nn.avg_pool2d": _POOL,
    "relax.image.resize2d": {
        "method": checked("nearest_neighbor", constraint_resize_method),
        "roi": through("any (read only by tf_crop_and_resize, which is refused)", constraint_resize_factor),
        "layout": checked("NCHW", constraint_resize_layout),
        "coordinate_transformation_mode": through(
            "any that, with the rounding method, maps output o to input floor(o / f)", constraint_resize_factor
        ),
        "rounding_method": through(
            "any that, with the coordinate transformation, maps output o to input floor(o / f)",
            constraint_resize_factor,
        ),
        "cubic_alpha": exact("any (unused by nearest)"),
        "cubic_exclude": exact("any (unused by nearest)"),
        "extrapolation_value": exact("any (used only by tf_crop_and_resize, which is refused)"),
        "out_dtype": checked("unset or the input's", constraint_resize_layout),
    },
    "relax.mean": {
        "axis": checked("[2, 3] (H and W) of a 4-D NCHW map", constraint_pool),
        "keepdims": checked("True", constraint_pool),
    },
    "relax.nn.softmax": {"axis": checked("the last axis of a tensor of rank 1 to 3", constraint_softmax_axis)},
    "relax.nn.layer_norm": {
        "axes": checked("the last axis alone, of a tensor of rank 1 to 3", constraint_norm_axes),
        "epsilon": checked("finite and >= 0 (NORM's fp32 eps)", constraint_norm_params),
        "center": checked("True (TVM's CPU kernels add beta even when False)", constraint_norm_params),
        "scale": checked("True (TVM's CPU kernels apply gamma even when False)", constraint_norm_params),
    },
    "relax.nn.rms_norm": {
        "axes": checked("the last axis alone, of a tensor of rank 1 to 3", constraint_norm_axes),
        "epsilon": checked("finite and >= 0 (NORM's fp32 eps)", constraint_norm_params),
    },
    "relax.nn.leakyrelu": {"alpha": exact("any (UNARY's alpha; int8: folded into the table)")},
    "relax.concat": {
        "axis": through(
            "0 of a rank-2 or rank-3 tensor, or 1 (channels) of a 4-D map; negative counts back", constraint_concat
        )
    },
    "relax.strided_slice": {"assume_inbound": exact("either (the view starts at the clamped begin)")},
    "relax.permute_dims": {
        "axes": through(
            "any of a constant weight (applied at compile time); of a matmul's second operand: its last two "
            "axes swapped (MATMUL's b_transposed); alone: an NCHW map to its pixels as rows or back (a view)",
            constraint_matmul_transpose,
            constraint_permute_view,
        )
    },
    "relax.broadcast_to": {},
    "relax.quantize": {
        "out_dtype": through(
            "int8 (uint8 with a constant zero point; int16 in elementwise ops, requantizations and staging)",
            constraint_int8_activations,
        ),
        "axis": through("any, with a per-tensor scale and zero point (the axis is then unused)", constraint_per_tensor),
    },
    "relax.dequantize": {
        "out_dtype": through("float32", constraint_float32),
        "axis": through(
            "activations: any, with a per-tensor scale (the axis is then unused); weights: per-tensor, or "
            "per-channel along the output channels",
            constraint_per_tensor,
            constraint_symmetric_weights,
        ),
    },
    # Only inside a dense layer's constant group-wise weight (ir/group_quant.py): evaluated at compile time,
    # or kept as int4 codes where CONV2D computes them exactly (backend/lower/group_weights.py).
    "relax.astype": {"dtype": exact("float32, of a constant weight's integer codes, zero points or scales")},
    "relax.take": {
        "axis": exact("any, of a constant weight's group scales or zero points"),
        "mode": exact("any: the indices are the constant group of each k"),
    },
    "relax.add": {},
    "relax.subtract": {},
    "relax.multiply": {},
    "relax.divide": {},
    "relax.maximum": {},
    "relax.minimum": {},
    "relax.nn.relu": {},
    "relax.negative": {},  # only inside a rotary embedding's rotate_half (ROPE)
    "relax.clip": {},
    "relax.sigmoid": {},
    "relax.tanh": {},
    "relax.nn.gelu": {},
    "relax.nn.gelu_tanh": {},
    "relax.nn.silu": {},
    "relax.reshape": {},
}

# The arguments of a claimed Relax op that are not the tensors it computes on (attributes in ONNX).
RELAX_INPUTS: dict[str, dict[str, Attr]] = {
    "relax.image.resize2d": {
        "size": through("H and W times integer factors 1 to 8 (not both 1)", constraint_resize_factor)
    },
    "relax.nn.layer_norm": {
        "gamma": checked("a float32 constant of the row's length (fp32 in the weight region)", constraint_norm_params),
        "beta": checked("a float32 constant of the row's length (fp32 in the weight region)", constraint_norm_params),
    },
    "relax.nn.rms_norm": {
        "weight": checked("a float32 constant of the row's length (fp32 in the weight region)", constraint_norm_params)
    },
    "relax.clip": {
        "min": through("a constant at most max (a fused activation; hardswish's clip: 0)", constraint_clip_bounds),
        "max": through("a constant at least min (a fused activation; hardswish's clip: 6)", constraint_clip_bounds),
    },
    "relax.reshape": {
        "shape": through(
            "one that keeps the stored rows; a weight's or bias's: any (folded at compile time); at a staged "
            "model input or output: one that keeps the last dimension",
            constraint_reshape_keeps_rows,
            constraint_staged_reshape,
            constraint_bias_per_channel,
            constraint_repeat_kv,
        )
    },
    "relax.broadcast_to": {
        "shape": through(
            "[B, H_kv, g, T, D] of a key / value repeated for grouped-query attention (MATMUL's b_group = g)",
            constraint_repeat_kv,
        )
    },
    "relax.strided_slice": {
        "axes": through("[0] of a rank-2 or rank-3 tensor", constraint_slice_rows),
        "begin": exact("any constant (clamped into the axis, as TVM does)"),
        "end": exact("any constant (the output shape says where the view ends)"),
        "strides": through("[1]", constraint_slice_rows),
    },
    "relax.quantize": {
        "scale": through("a per-tensor constant, finite and > 0", constraint_per_tensor, constraint_quant_params),
        "zero_point": through(
            "a per-tensor constant within the dtype's range", constraint_per_tensor, constraint_quant_params
        ),
    },
    "relax.dequantize": {
        "scale": through(
            "a per-tensor constant, finite and > 0; a weight's also per output channel",
            constraint_per_tensor,
            constraint_quant_params,
        ),
        "zero_point": through(
            "a constant within the dtype's range; a weight's 0",
            constraint_per_tensor,
            constraint_quant_params,
            constraint_symmetric_weights,
        ),
    },
}


def claimed_ops() -> list[str]:
    return list(RELAX_ATTRS)


def attribute_constraints(op: str) -> list:
    """The call-only constraints (`Attr.check`) of `op`'s attributes, in table order, each once."""
    return list(dict.fromkeys(a.check for a in RELAX_ATTRS[op].values() if a.check is not None))


def attribute_checks(call) -> list:
    """The (constraint, args) pairs a check function runs on `call`'s attributes."""
    return [(c, (call,)) for c in attribute_constraints(call.op.name)]
