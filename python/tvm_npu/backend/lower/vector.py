"""One-operand vector ops: the activations of UNARY ("unary": sigmoid, tanh, gelu, leaky relu,
hardswish, silu, gelu tanh; in int8 a 256-entry table, docs/npu.md section 2). SOFTMAX is softmax.py's."""

from __future__ import annotations

from ...ir.values import static_shape
from ...partition.patterns import UNARY_OPS
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer
from .registry import both_datapaths, lowers

# The op each UNARY composite is built around (patterns.unary_patterns): hardswish's is its final
# multiply, x * (clip(x + 3, 0, 6) / 6).
UNARY_ANCHORS = {name: op.removeprefix("relax.") for name, op in UNARY_OPS.items()}
UNARY_ANCHORS["hardswish"] = "multiply"


@lowers(*both_datapaths(*UNARY_ANCHORS))
def lower_unary(comp: Composite) -> Layer:
    """An activation on the vector unit; in int8 its table maps every input code to an output code."""
    layer = comp.layer("unary", func=comp.base)
    call = comp.calls[UNARY_ANCHORS[layer.func]][-1]
    layer.act = "none"  # hardswish's clip is part of the function, not a fused activation
    if layer.func == "leaky_relu":
        layer.alpha = float(call.attrs.alpha)
    shape = static_shape(call)
    layout, view = comp.layout_view(comp.out_var, shape)
    if comp.int8:
        s_y, z_y = comp.output_quantization(layer)
        s_x, z_x = qparams(comp.data_dq())
        layer.in_zps = (z_x,)
        layer.const = qp.unary_table(layer.func, layer.alpha, s_x, z_x, s_y, z_y)
    return comp.connect(layer, call.args[0], view, layout, shape, view)
