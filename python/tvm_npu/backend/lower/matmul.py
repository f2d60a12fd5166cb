"""A matmul of two activations on the MAC array ("matmul", MATMUL of docs/npu.md section 4, format 1.4):
attention's Q x K^T and P x V. Every tensor is its rows view [1, batch * rows, 1, cols]; B is read as it is
stored ([.., K, N], or [.., N, K] under a permute_dims of its last two axes: b_transposed) and, for
grouped-query attention, from the key / value tensor before its repeat over query heads (b_index: the B
batch each output batch reads, query head h reading KV head h / g)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...ir.values import static_shape
from . import quant_params as qp
from .composite import Composite, qparams
from .graph import Layer, rows_view
from .registry import lowers


def _b_index(out_batch: tuple, src_batch: tuple, group: int) -> tuple:
    """The B batch (in `src_batch`, B's stored batch dims) of every output batch, flattened: numpy
    broadcasting of B's batch dims (each 1 or equal, constraint_matmul_batch), with the head axis repeated
    `group` times for a grouped-query repeat (constraint_repeat_kv)."""
    idx = np.arange(int(np.prod(src_batch, dtype=np.int64))).reshape(src_batch)
    if group > 1:
        idx = np.repeat(idx, group, axis=1)
    return tuple(int(v) for v in np.broadcast_to(idx, out_batch).reshape(-1))


def _int8_operands(comp: Composite, layer: Layer, a, b) -> tuple:
    """The int8 codes under A's and B's dequantize, with the layer's zero points and its one scale
    S = fp32(fp32(s_a * s_b) / s_y) (docs/npu.md section 2, CONV2D's formula with s_b for s_w)."""
    a_dq, b_dq = comp.resolve(a), comp.resolve(b)
    (s_a, z_a), (s_b, z_b) = qparams(a_dq), qparams(b_dq)
    s_y, _ = comp.output_quantization(layer)
    layer.in_zps = (z_a, z_b)
    layer.scale = np.array([qp.conv_scale(s_a, s_b, s_y)], np.float32)
    return a_dq.args[0], b_dq.args[0]


@lowers("matmul", "matmul_bt", "matmul_gqa", "matmul_gqa_bt", "qmatmul", "qmatmul_bt")
def lower_matmul(comp: Composite) -> Layer:
    """A batched matmul of two activations (npu.matmul*, fp16; npu.qmatmul*, int8 x int8 requantized per
    tensor: quantize(matmul(dequantize(a), dequantize(b) or its permute_dims)))."""
    layer = comp.layer("matmul")
    call = comp.calls["matmul"][0]
    a, b = call.args
    transposed = "permute_dims" in comp.calls
    if transposed:
        b = comp.resolve(b).args[0]
    group = 1
    if "broadcast_to" in comp.calls:  # the repeat of grouped-query attention: read the KV heads themselves
        bcast = comp.calls["broadcast_to"][0]
        group = static_shape(bcast)[2]
        b = comp.resolve(bcast.args[0]).args[0]
    if comp.int8:
        a, b = _int8_operands(comp, layer, a, b)
    a_shape, src_shape, out_shape = static_shape(a), static_shape(b), static_shape(call)
    m, k, n = a_shape[-2], a_shape[-1], out_shape[-1]
    batch = int(np.prod(out_shape[:-2]))
    layer.matmul = (batch, m, k, n, int(transposed))
    layer.b_index = _b_index(tuple(out_shape[:-2]), tuple(src_shape[:-2]), group)
    layer.macs = batch * m * k * n
    layer.out_elems = batch * m * n
    layer.inputs = [comp.tensor(a, rows_view(a_shape), "ROWS"), comp.tensor(b, rows_view(src_shape), "ROWS")]
    layer.out = comp.tensor(comp.out_var, rows_view(out_shape), "ROWS", out_shape)
    return layer


def _head_source(comp: Composite, operand):
    """(the [B, S, H * D] tensor, H) under a head split (permute_dims of a reshape) of `operand`."""
    split = comp.resolve(comp.resolve(operand).args[0])
    return split.args[0], static_shape(split)[2]


@lowers("matmul_heads")
def lower_matmul_heads(comp: Composite) -> Layer:
    """A matmul with attention's head split of A and / or B and / or the merge of its output (format 1.8,
    partition/matmul_check.py check_matmul_heads): the split operands are their [B, S, H * D] rows,
    each head a column slice; the merged output likewise. B is transposed when its split is K^T."""
    layer = comp.layer("matmul")
    call = comp.calls["matmul"][0]
    a, b = call.args
    out_shape = static_shape(call)
    batch = int(np.prod(out_shape[:-2]))
    heads = [0, 0, 0]
    transposed = False
    views = []
    for i, operand in enumerate((a, b)):
        head = comp.resolve(operand)
        if isinstance(head, relax.Call) and head.op.name == "relax.permute_dims":
            src, heads[i] = _head_source(comp, operand)
            transposed = transposed or (i == 1 and int(head.attrs.axes[-1]) == 1)
            views.append((src, rows_view(static_shape(src))))
        else:
            views.append((operand, rows_view(static_shape(operand))))
    # The merge: a permute_dims of the product itself (the splits' permutes read reshapes).
    merged = any(comp.resolve(p.args[0]).same_as(call) for p in comp.calls.get("permute_dims", []))
    if merged:
        heads[2] = out_shape[1]
    a_shape = static_shape(a)
    m, k, n = a_shape[-2], a_shape[-1], out_shape[-1]
    layer.matmul = (batch, m, k, n, int(transposed))
    layer.b_index = _b_index(tuple(out_shape[:-2]), tuple(static_shape(b)[:-2]), 1)
    layer.heads = tuple(heads)
    layer.macs = batch * m * k * n
    layer.out_elems = batch * m * n
    layer.inputs = [comp.tensor(v, view, "ROWS") for v, view in views]
    final = static_shape(comp.out_var)
    layer.out = comp.tensor(comp.out_var, rows_view(final), "ROWS", final)
    return layer
