"""Two-operand vector ops: the same-shape tensor add (ADD, "add") and the ELTWISE ops (add, subtract,
multiply, maximum, minimum with a same-shape, per-channel or scalar b; "eltwise"), and the int8
requantization, an ELTWISE add whose b counts for nothing. In int8: zero points, integer multipliers
and one shift (docs/npu.md section 2)."""

from __future__ import annotations

import numpy as np

from ...contract.errors import NPUError
from ...ir.values import constant_value, static_shape
from ...partition.constraints import broadcast_mode
from ...partition.patterns import ELTWISE_OPS
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer
from .registry import both_datapaths, lowers


@lowers(*both_datapaths("add"))
def lower_add(comp: Composite) -> Layer:
    """A same-shape tensor add with its fused activation (ADD): two region tensors in, one out."""
    layer = comp.layer("add")
    call = comp.calls["add"][0]
    shape = static_shape(call)
    layout, view = comp.layout_view(comp.out_var, shape)
    for arg in call.args[:2]:
        if comp.int8:  # add(dequantize(a), dequantize(b))
            arg = comp.resolve(arg).args[0]
        layer.inputs.append(comp.tensor(arg, view, layout))
    if comp.int8:
        s_y, _ = comp.output_quantization(layer)
        (s_a, z_a), (s_b, z_b) = (qparams(comp.resolve(a)) for a in call.args[:2])
        mults, n = qp.common_shift([s_a / s_y, s_b / s_y])
        layer.in_zps, layer.mult, layer.shift = (z_a, z_b), np.array(mults), n
    layer.out = comp.tensor(comp.out_var, view, layout, shape)
    layer.out_elems = int(np.prod(view))
    return layer


@lowers(*both_datapaths(*(f"eltwise_{op}" for op in ELTWISE_OPS)))
def lower_eltwise(comp: Composite) -> Layer:
    """a (op) b: `a` has the output's shape; b is a tensor of that shape, or a per-channel / scalar
    constant (carried in the weight region) or per-channel tensor, per constraints.broadcast_mode."""
    func = comp.base.split("_")[1]
    layer = comp.layer("eltwise", func=func)
    call = comp.calls[func][0]
    shape = static_shape(call)
    layout, view = comp.layout_view(comp.out_var, shape)
    dqs = [comp.resolve(arg) for arg in call.args[:2]]
    ops = [comp.resolve(dq.args[0]) if comp.int8 else comp.resolve(arg) for dq, arg in zip(dqs, call.args)]
    mode, swapped = broadcast_mode(call, *ops)
    if mode is None:  # the pattern check refused this already; reaching here is a compiler bug
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.region.graph.label}: {swapped}")
    if swapped:
        dqs, ops = dqs[::-1], ops[::-1]
    layer.b_mode = mode
    a, b = ops
    layer.inputs = [comp.tensor(a, view, layout)]
    value = constant_value(b)
    if value is not None:  # carried in the weight region, loaded like weights
        layer.const = value.reshape(-1).astype(np.int8 if comp.int8 else np.float16)
    else:
        # same: b is stored as a is (layouts.py groups them); channel: one row of the row's elements
        b_layout, b_view = comp.layout_view(b)
        layer.inputs.append(comp.tensor(b, b_view, b_layout))
    return _output(comp, layer, view, layout, shape, dqs)


@lowers("qrequantize")
def lower_requantize(comp: Composite) -> Layer:
    """quantize(dequantize(x)): an ELTWISE add of a scalar b with b_mult 0, t = (a - z_a) * M_a."""
    layer = comp.layer("eltwise", func="add", b_mode="scalar")
    dq = comp.calls["dequantize"][0]
    shape = static_shape(dq)
    layout, view = comp.layout_view(comp.out_var, shape)
    layer.inputs = [comp.tensor(dq.args[0], view, layout)]
    layer.const = np.zeros(1, np.int8)  # b: read, but b_mult 0 drops it
    return _output(comp, layer, view, layout, shape, [dq, None])


def _output(comp: Composite, layer: Layer, view, layout, shape, dqs: list) -> Layer:
    """The output tensor of an ELTWISE layer; in int8 the operand dtypes and multipliers, which
    depend on the tensors' dtypes (int8 or int16)."""
    layer.out = comp.tensor(comp.out_var, view, layout, shape)
    layer.out_elems = int(np.prod(view))
    if comp.int8:
        t = comp.region.graph.tensors
        b = t[layer.inputs[1]].dtype if len(layer.inputs) > 1 else str(layer.const.dtype)
        layer.dtypes = (t[layer.inputs[0]].dtype, b, t[layer.out].dtype)
        _multipliers(comp, layer, *dqs)
    return layer


def _multipliers(comp: Composite, layer: Layer, dq_a, dq_b) -> None:
    """ELTWISE's zero points, multipliers and shift (docs section 2); a multiply's multiplier stays
    below 2^(62 - k_a - k_b) (k = 8 for int8, 16 for int16), which binds for int16 x int16 only."""
    s_y, z_y = qparams(comp.calls["quantize"][-1])
    layer.out_zp = z_y
    layer.clamp = qp.clamp_bounds(layer.act, layer.clip, s_y, z_y, layer.dtypes[2])
    s_a, z_a = qparams(dq_a)
    if dq_b is None:  # a requantization: b_mult 0
        mults, n = qp.common_shift([s_a / s_y])
        layer.in_zps, layer.mult, layer.shift = (z_a, 0), np.array([mults[0], 0]), n
        return
    s_b, z_b = qparams(dq_b)
    if layer.func == "multiply":
        k = sum(8 if d == "int8" else 16 for d in layer.dtypes[:2])
        mults, n = qp.common_shift([s_a * s_b / s_y], bound=min(2**31, 2 ** (62 - k)))
    else:
        mults, n = qp.common_shift([s_a / s_y, s_b / s_y])
    layer.in_zps, layer.mult, layer.shift = (z_a, z_b), np.array(mults + [0])[:2], n
