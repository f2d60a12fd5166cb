"""Ops that move no data on the NPU: a reshape that keeps the stored rows, a permute_dims between a map
and its pixels as rows when they are the same bytes, and a slice of whole leading rows ("view": the
output aliases the input), and a concatenation ("concat": its inputs are written
into its channels or rows, slices.py)."""

from __future__ import annotations

import numpy as np

from ...ir.values import static_shape
from ...partition.constraints import ROWS
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer, conv_view, rows_view
from .registry import both_datapaths, lowers


@lowers(*both_datapaths("reshape"))
def lower_reshape(comp: Composite) -> Layer:
    """A reshape that keeps the stored rows (constraints.constraint_reshape_keeps_rows) in the layout
    layouts.py chose: no command, the output aliases the input's bytes."""
    layer = comp.layer("view")
    call = comp.calls["reshape"][0]
    data, out_shape = call.args[0], static_shape(call)
    if comp.int8:
        data = comp.data_dq().args[0]
    layout, in_view = comp.layout_view(data, static_shape(call.args[0]))  # rows kept (layouts.py)
    out_layout, out_view = comp.layout_view(comp.out_var, out_shape)
    layer.inputs = [comp.tensor(data, in_view, layout)]
    layer.out = comp.tensor(comp.out_var, out_view, out_layout, out_shape)
    return layer


@lowers("permute_view")
def lower_permute_view(comp: Composite) -> Layer:
    """An NCHW map to its pixels as rows, or back (constraints.constraint_permute_view): with a pixel's
    channels filling whole aligned rows the map's rows are the pixels' rows, so no command, the output
    aliases the input's bytes. A narrower pixel (C x elem not a multiple of the configured alignment) is
    stored at another pitch in the map than as a token row: the planner, which knows the alignment, makes
    that view a "restride" layer, one strided POOL copy per band of map rows (plan/restride_plan.py).
    `func` says the direction: "to_rows" (map -> tokens) or "to_map"."""
    call = comp.calls["permute_dims"][0]
    data, out_shape = call.args[0], static_shape(call)
    layout, in_view = comp.layout_view(data, static_shape(call.args[0]))
    out_layout, out_view = comp.layout_view(comp.out_var, out_shape)
    layer = comp.layer("view")
    layer.func = "to_map" if layout == ROWS else "to_rows"  # the planner may make it a copy (restride_plan.py)
    layer.out_elems = int(np.prod(out_shape))
    layer.inputs = [comp.tensor(data, in_view, layout)]
    layer.out = comp.tensor(comp.out_var, out_view, out_layout, out_shape)
    return layer


@lowers(*both_datapaths("slice_rows"))
def lower_slice_rows(comp: Composite) -> Layer:
    """A slice of whole leading rows (constraints.constraint_slice_rows): a view at a row offset."""
    layer = comp.layer("view", rows=True)
    call = comp.calls["strided_slice"][0]
    data = comp.data_dq().args[0] if comp.int8 else call.args[0]
    in_shape, out_shape = static_shape(call.args[0]), static_shape(call)
    begin = int(call.args[2].fields[0].value)
    begin += in_shape[0] if begin < 0 else 0
    begin = min(max(begin, 0), in_shape[0])  # clamped into the axis, as strided_slice does
    layer.offsets = (begin * int(np.prod(in_shape[1:-1])),)  # rows of the [1, rows, 1, K] view
    layer.inputs = [comp.tensor(data, rows_view(in_shape), "ROWS")]
    layer.out = comp.tensor(comp.out_var, rows_view(out_shape), "ROWS", out_shape)
    return layer


@lowers(*both_datapaths("concat"))
def lower_concat(comp: Composite) -> Layer:
    """Inputs and their channel (or row) offsets; int8: each input's zero point and requantization scale
    into the output's (1 when they share it: the input is then written in place, slices.py)."""
    layer = comp.layer("concat")
    call = comp.calls["concat"][0]
    offsets, c0, zps, scales = [], 0, [], []
    s_y, z_y = qparams(comp.calls["quantize"][-1]) if comp.int8 else (1.0, 0)
    layer.rows = len(static_shape(call)) != 4  # stacked along rows (axis 0), else channels
    view, layout = (rows_view, "ROWS") if layer.rows else (lambda s: conv_view(s, "NCHW"), "NCHW")
    for field in comp.resolve(call.args[0]).fields:
        src = field
        if comp.int8:  # concat(dequantize(x_i), ...)
            s_i, z_i = qparams(comp.resolve(field))
            zps.append(z_i)
            scales.append(qp.pool_scale(s_i, s_y, 1))
            src = comp.resolve(field).args[0]
        shape = static_shape(src)
        layer.inputs.append(comp.tensor(src, view(shape), layout))
        offsets.append(c0)
        c0 += view(shape)[1] if layer.rows else shape[1]
    layer.offsets = tuple(offsets)
    if comp.int8:
        layer.out_zp, layer.in_zps, layer.scale = z_y, tuple(zps), np.array(scales, np.float32)
    out_shape = static_shape(call)
    layer.out = comp.tensor(comp.out_var, view(out_shape), layout, out_shape)
    layer.out_elems = int(np.prod(out_shape))
    return layer
