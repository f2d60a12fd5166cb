"""Nearest-neighbour upsampling by integer factors ("resize", "qresize"; relax.image.resize2d, ONNX Resize):
a layer of kind "upsample" that the planner emits as POOL 1x1 max copies, fH * fW per row tile, each
writing the input's pixels into one of their fH * fW places of the output through the output's pixel and
row strides (plan/upsample_plan.py). A copy is exact in fp16 (the one tap is the maximum) and in int8
(the check keeps only one scale and zero point: the requantization by 1 returns the code). The factors
travel in the layer's `stride` (an inverse stride: output rows per input row, output columns per
input column); partition/resize_constraints.py checked that the mapping is floor(o / f)."""

from __future__ import annotations

import numpy as np

from ...ir.values import static_shape
from .composite import Composite, qparams
from .graph import Layer, conv_view
from .registry import both_datapaths, lowers


@lowers(*both_datapaths("resize"))
def lower_resize(comp: Composite) -> Layer:
    """The input map, the output map and the factors (fH, fW)."""
    call = comp.calls["image.resize2d"][0]
    x = call.args[0]
    in_shape, out_shape = static_shape(x), static_shape(call)
    layer = comp.layer("upsample", pool_kind="max")
    layer.stride = (out_shape[2] // in_shape[2], out_shape[3] // in_shape[3])
    if comp.int8:
        _, z_y = comp.output_quantization(layer)
        _, z_x = qparams(comp.data_dq())
        layer.in_zps = (z_x,)
        layer.scale = np.array([1.0], np.float32)  # one scale in and out (constraint_resize_same_quantization)
    layout = "NCHW"
    return comp.connect(layer, x, conv_view(in_shape, layout), layout, out_shape, conv_view(out_shape, layout))
