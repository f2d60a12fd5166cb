"""A matmul of two activations on the MAC array ("matmul", MATMUL of docs/npu.md section 4, format 1.4):
attention's Q x K^T and P x V. Every tensor is its rows view [1, batch * rows, 1, cols]; B is read as it is
stored ([.., K, N], or [.., N, K] under a permute_dims of its last two axes: b_transposed) and, for
grouped-query attention, from the key / value tensor before its repeat over query heads (b_index: the B
batch each output batch reads, query head h reading KV head h / g)."""

from __future__ import annotations

import numpy as np

from ...ir.values import static_shape
from .composite import Composite
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


@lowers("matmul", "matmul_bt", "matmul_gqa", "matmul_gqa_bt")
def lower_matmul(comp: Composite) -> Layer:
    """A batched matmul of two activations (npu.matmul*), fp16 only: the pattern table has no int8 form."""
    layer = comp.layer("matmul")
    call = comp.calls["matmul"][0]
    b = call.args[1]
    transposed = "permute_dims" in comp.calls
    if transposed:
        b = comp.resolve(b).args[0]
    group = 1
    if "broadcast_to" in comp.calls:  # the repeat of grouped-query attention: read the KV heads themselves
        bcast = comp.calls["broadcast_to"][0]
        group = static_shape(bcast)[2]
        b = comp.resolve(bcast.args[0]).args[0]
    a_shape, src_shape, out_shape = static_shape(call.args[0]), static_shape(b), static_shape(call)
    m, k, n = a_shape[-2], a_shape[-1], out_shape[-1]
    batch = int(np.prod(out_shape[:-2]))
    layer.matmul = (batch, m, k, n, int(transposed))
    layer.b_index = _b_index(tuple(out_shape[:-2]), tuple(src_shape[:-2]), group)
    layer.macs = batch * m * k * n
    layer.out_elems = batch * m * n
    layer.inputs = [comp.tensor(call.args[0], rows_view(a_shape), "ROWS"), comp.tensor(b, rows_view(src_shape), "ROWS")]
    layer.out = comp.tensor(comp.out_var, rows_view(out_shape), "ROWS", out_shape)
    return layer
