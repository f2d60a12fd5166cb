"""Pooling on the vector unit ("pool"): max and average pools, and the global average pool (a mean over
H and W); in int8 one requantization scale (docs/npu.md section 2)."""

from __future__ import annotations

import numpy as np

from ...ir.values import static_shape
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer, conv_view
from .registry import both_datapaths, lowers


@lowers(*both_datapaths("max_pool2d", "avg_pool2d", "global_avg_pool"))
def lower_pool(comp: Composite) -> Layer:
    """A max / average pool with its window geometry, or a mean over H and W as a whole-map window."""
    layer = comp.layer("pool")
    calls = comp.calls
    if "mean" in calls:  # global average pooling: mean over H and W with keepdims
        call = calls["mean"][0]
        layout = "NCHW"
        in_view = conv_view(static_shape(call.args[0]), layout)
        layer.window = (in_view[1], in_view[2])
    else:
        op = "nn.max_pool2d" if "nn.max_pool2d" in calls else "nn.avg_pool2d"
        call = calls[op][0]
        layer.pool_kind = "max" if op == "nn.max_pool2d" else "avg"
        layout = str(call.attrs.layout)
        in_view = conv_view(static_shape(call.args[0]), layout)
        layer.window = tuple(int(k) for k in call.attrs.pool_size)
        layer.stride = tuple(int(s) for s in call.attrs.strides)
        layer.dilation = tuple(int(d) for d in call.attrs.dilation)
        layer.padding = tuple(int(p) for p in call.attrs.padding)
    out_shape = static_shape(call)
    if comp.int8:
        s_y, _ = comp.output_quantization(layer)
        s_x, z_x = qparams(comp.data_dq())
        layer.in_zps = (z_x,)
        taps = layer.window[0] * layer.window[1] if layer.pool_kind == "avg" else 1
        layer.scale = np.array([qp.pool_scale(s_x, s_y, taps)], np.float32)
    return comp.connect(layer, call.args[0], in_view, layout, out_shape, conv_view(out_shape, layout))
