"""SOFTMAX over a matrix's rows (fp16; "qsoftmax*", int8 codes in and out, format 1.4), alone ("softmax") or
with attention's scale and additive mask fused (format 1.4, docs/npu.md section 2; "softmax_masked",
"softmax_scaled"): softmax(x * c + mask), x / c, x + mask, or the factor alone. The factor becomes SOFTMAX's
fp32 `scale` (x / c as x * (1 / c)); the mask's rows, fp16, go to the weight region and are loaded
like weights; row r of the scores reads mask row r % mask_rows (the planner's tiles set mask_row0)."""

from __future__ import annotations

import numpy as np

from ...contract.errors import NPUError
from ...ir.values import constant_value, static_shape
from ...partition.transformer_constraints import softmax_mask, softmax_scale
from .composite import Composite, qparams
from .graph import Layer
from .registry import lowers


def _split(comp: Composite, call) -> tuple:
    """(the tensor operand, the constant operand) of a binary call; DPL matches add and multiply either
    way round."""
    a, b = (comp.resolve(x) for x in call.args[:2])
    return (call.args[1], a) if constant_value(a) is not None else (call.args[0], b)


def int8_io(comp: Composite, layer: Layer) -> None:
    """An int8 vector op dequantized on the way in and quantized on the way out (SOFTMAX, NORM; format
    1.4): in_zps (z_x,), out_zp z_y, scale [s_x, s_y] as fp32."""
    s_x, z_x = qparams(comp.data_dq())
    s_y, _ = comp.output_quantization(layer)
    layer.in_zps = (z_x,)
    layer.scale = np.array([s_x, s_y], np.float32)


@lowers("softmax", "softmax_masked", "softmax_scaled", "qsoftmax", "qsoftmax_masked", "qsoftmax_scaled")
def lower_softmax(comp: Composite) -> Layer:
    """A softmax over a matrix's rows, with the factor and mask the pattern check accepted if any."""
    layer = comp.layer("softmax")
    call = comp.calls["nn.softmax"][-1]
    layer.act = "none"
    shape = static_shape(call)
    layout, view = comp.layout_view(comp.out_var, shape)  # rows (layouts.py)
    data, scale, mask = call.args[0], 1.0, None
    if "add" in comp.calls:
        data, mask = _split(comp, comp.calls["add"][0])
    scale_op = next((comp.calls[op][0] for op in ("multiply", "divide") if op in comp.calls), None)
    if scale_op is not None:
        data, factor = _split(comp, scale_op)
        scale, why = softmax_scale(factor, scale_op.op.name == "relax.divide", shape, shape)
        _refused(comp, scale is None, why)
        layer.softmax_scale = scale
    if mask is not None:
        rows, why = softmax_mask(mask, shape, scale)
        _refused(comp, rows is None, why)
        layer.const = rows
    if comp.int8:
        int8_io(comp, layer)
    return comp.connect(layer, data, view, layout, shape, view)


def _refused(comp: Composite, refused: bool, why) -> None:
    if refused:  # the pattern check refused this already; reaching here is a compiler bug
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.region.graph.label}: {why}")
