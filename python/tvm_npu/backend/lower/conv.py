"""Convolution and dense layers on the MAC array ("conv"; a dense layer is a 1x1 convolution over
[1, M, 1, K]): the weight in the NPU's [OC][KH][KW][IC] order, the fused bias and activation, and in
int8 the per-channel requantization of docs/npu.md section 2."""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...contract.errors import NPUError
from ...ir.values import constant_value, eval_const, static_shape
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer, conv_view, rows_view
from .group_weights import group_codes
from .registry import both_datapaths, lowers


@lowers(*both_datapaths("conv2d", "dense"), "qdense_w4")
def lower_conv(comp: Composite) -> Layer:
    """A conv2d or matmul with its fused bias and activation (npu.[q]conv2d*, npu.[q]dense*, and W4A8's
    npu.qdense_w4*)."""
    layer = comp.layer("conv")
    calls = comp.calls
    if "nn.conv2d" in calls:
        call = calls["nn.conv2d"][0]
        layout = str(call.attrs.data_layout)
        kernel_layout = str(call.attrs.kernel_layout)
        layer.stride = tuple(int(s) for s in call.attrs.strides)
        layer.dilation = tuple(int(d) for d in call.attrs.dilation)
        layer.padding = tuple(int(p) for p in call.attrs.padding)
        layer.groups = int(call.attrs.groups)
        in_view = conv_view(static_shape(call.args[0]), layout)
        out_shape = static_shape(call)
        out_view = conv_view(out_shape, layout)
    else:
        call = calls["matmul"][0]
        layout, kernel_layout = "ROWS", "IO"  # matmul weight is [K, N]
        in_view = rows_view(static_shape(call.args[0]))
        out_shape = static_shape(call)
        out_view = rows_view(out_shape)
    w4a8 = comp.base.startswith("dense_w4")
    w4 = None if (comp.int8 and not w4a8) or kernel_layout != "IO" else _group_weight(comp, call.args[1])
    if w4a8 and w4 is None:  # check_dense_w4a8 refuses what group_codes does not take
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.name}: a W4A8 weight its check accepted is not int4 codes")
    if w4 is not None:  # W4A16 / W4A8: int4 codes, their group scales (and zero points) in the block
        layer.weight, layer.w_group, layer.w_scales, layer.w_zeros = w4["codes"], w4["group"], w4["scales"], w4["zeros"]
    else:
        layer.weight, w_scale = _weight(comp, call.args[1], kernel_layout)
        if w_scale is not None and not comp.int8:  # W8A16: int8 codes, their scales in the block
            layer.scale = w_scale.astype(np.float32)
    if layer.groups > 1:
        layer.groups = out_view[3]
    if "add" in calls and not comp.int8:
        bias = eval_const(_bias_operand(comp, call), comp.region.graph.label, "bias", comp.env)
        layer.bias = bias.reshape(-1).astype(np.float32)
    layer.macs = int(np.prod(layer.weight.shape)) * out_view[0] * out_view[1] * out_view[2]
    if w4a8:
        _w4a8_requantization(comp, layer, call)
    elif comp.int8:
        _requantization(comp, layer, call, w_scale)
    return comp.connect(layer, call.args[0], in_view, layout, out_shape, out_view)


def _unpermuted(comp: Composite, wexpr) -> tuple:
    """(the weight expression under its permute_dims, their axes outermost first)."""
    perms = []
    wexpr = comp.resolve(wexpr)
    while isinstance(wexpr, relax.Call) and wexpr.op.name == "relax.permute_dims":
        perms.append(wexpr.attrs.axes)
        wexpr = comp.resolve(wexpr.args[0])
    return wexpr, perms


def _group_weight(comp: Composite, wexpr) -> dict | None:
    """group_weights.group_codes of a dense's weight under its permutes."""
    return group_codes(comp, *_unpermuted(comp, wexpr))


def _weight(comp: Composite, wexpr, kernel_layout: str) -> tuple:
    """(the weight in [OC, KH, KW, IC] order: fp16 values or the int8 codes (symmetric), the int8
    weight scales or None)."""
    w_scale = None
    wexpr, perms = _unpermuted(comp, wexpr)
    if comp.int8:  # dequantize(codes, scales, zero points): keep the codes
        value = constant_value(wexpr.args[0])
        w_scale = np.asarray(constant_value(wexpr.args[1]), np.float64).reshape(-1)
    elif kernel_layout == "IO" and (w8 := weight_only_codes(comp, wexpr, perms)) is not None:
        return w8
    else:
        value = eval_const(wexpr, comp.region.graph.label, "weight", comp.env)
    for axes in reversed(perms):  # innermost first, each as permute_dims defines it (None: reversed)
        value = value.transpose(None if axes is None else [int(a) for a in axes])
    if kernel_layout == "IO":  # matmul: x [M, K] @ w [K, N]; the NPU wants [N, 1, 1, K]
        value = value.T
        return np.ascontiguousarray(value[:, None, None, :].astype(value.dtype if comp.int8 else np.float16)), w_scale
    value = value.transpose([kernel_layout.index(d) for d in "OHWI"])
    return np.ascontiguousarray(value.astype(np.int8 if comp.int8 else np.float16)), w_scale


def weight_only_codes(comp: Composite, wexpr, perms: list) -> tuple | None:
    """A float dense's weight `dequantize(codes, scale, zero point)` that CONV2D's w_dtype (format 1.4)
    computes exactly as docs/npu.md states it: (codes [N, 1, 1, K] int8, scales [N] fp32), or None, and
    then the weight is dequantized at compile time and rounded to fp16 as any float weight is.

    Exact means: int8 codes, every zero point 0 (symmetric), float32 output, scales finite and > 0, and
    one scale per output column N (after the permutes: constant along K). A per-tensor scale is the same
    scale for every column. Anything else (a scale per row K, blocks, asymmetric codes) keeps the fp16
    weight, never a W8A16 command that would compute something else."""
    if not (isinstance(wexpr, relax.Call) and wexpr.op.name == "relax.dequantize"):
        return None
    codes, scale, zp = (constant_value(comp.resolve(a)) for a in wexpr.args[:3])
    if codes is None or scale is None or zp is None or codes.dtype != np.int8 or codes.ndim != 2:
        return None
    if str(wexpr.attrs.out_dtype) != "float32" or np.any(np.asarray(zp) != 0):
        return None
    scale = np.asarray(scale, np.float32)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        return None
    shape = [1, 1]
    if scale.size > 1:
        shape[int(wexpr.attrs.axis) % 2] = -1
    full = np.broadcast_to(scale.reshape(shape), codes.shape)
    for axes in reversed(perms):
        order = None if axes is None else [int(a) for a in axes]
        codes, full = codes.transpose(order), full.transpose(order)
    codes, full = codes.T, full.T  # x [M, K] @ w [K, N]: the NPU wants [N, 1, 1, K], one scale a row
    if not np.all(full == full[:, :1]):
        return None
    return np.ascontiguousarray(codes[:, None, None, :]), np.ascontiguousarray(full[:, 0])


def _bias_operand(comp: Composite, op_call):
    """The add's operand that is not the conv / matmul result: the pattern matches add(y, b) and
    add(b, y) alike (torch's export writes the bias first)."""
    add = comp.calls["add"][0]
    return next(a for a in add.args if not comp.resolve(a).same_as(op_call))


def _w4a8_requantization(comp: Composite, layer: Layer, op_call) -> None:
    """W4A8 (docs/npu.md section 2): the zero points, the clamp, one S = fp32(s_x / s_y) for every output
    channel (the weights' scales are the group scales) and the fp32 bias in the accumulator's unit,
    fp32(b / s_x) (zeros without one)."""
    f32 = np.float32
    s_y, _ = comp.output_quantization(layer)
    s_x, z_x = qparams(comp.data_dq())
    layer.in_zps = (z_x,)
    oc = layer.weight.shape[0]
    layer.scale = np.full(oc, f32(f32(s_x) / f32(s_y)), f32)
    bias = np.zeros(oc, f32)
    if "add" in comp.calls:
        value = eval_const(_bias_operand(comp, op_call), comp.region.graph.label, "bias", comp.env)
        bias = np.broadcast_to(np.asarray(value, f32).reshape(-1), (oc,)) / f32(s_x)
    layer.bias = np.asarray(bias, f32)


def _requantization(comp: Composite, layer: Layer, op_call, w_scale: np.ndarray) -> None:
    """Zero points, per-channel scales, the int32 bias and the clamp of an int8 conv / dense."""
    s_y, _ = comp.output_quantization(layer)
    s_x, z_x = qparams(comp.data_dq())
    layer.in_zps = (z_x,)
    oc = layer.weight.shape[0]
    w_scale = np.broadcast_to(w_scale, (oc,))
    layer.scale = np.array([qp.conv_scale(s_x, ws, s_y) for ws in w_scale], np.float32)
    bias = np.zeros(oc, np.int64)
    if "add" in comp.calls:
        bdq = comp.resolve(_bias_operand(comp, op_call))
        while bdq.op.name == "relax.reshape":
            bdq = comp.resolve(bdq.args[0])
        codes = constant_value(bdq.args[0]).astype(np.int64).reshape(-1)
        b_scale = np.broadcast_to(np.asarray(constant_value(bdq.args[1]), np.float64).reshape(-1), (oc,))
        want = s_x * w_scale
        if np.allclose(b_scale, want, rtol=1e-6, atol=0):
            bias = codes
        else:  # a bias quantized with another scale: re-express it in the accumulator's scale
            bias = np.rint(codes * b_scale / want).astype(np.int64)
    layer.bias = np.asarray(bias, np.int64).astype(np.int32)
