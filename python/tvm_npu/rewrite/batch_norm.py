"""Fold an inference batch norm into the conv2d before it; decompose the ones no conv absorbs.

An inference batch norm after a convolution is a per-channel scale and shift of the conv's weights and
bias. Folded here, on constants, the pair is one ``conv2d + add`` that the conv patterns run as one NPU
layer, instead of a CPU island splitting the NPU region. A batch norm with no conv to fold into is
rewritten into elementwise ops that TVM compiles for the CPU. Both run in `rewrite.run` (from
`partition.prepare` and the quantizer), before pattern matching: the fold among the other rewrites of
`main`, the decomposition after all of them, so it sees only the batch norms left.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import CONV, const_value, copy_conv2d, rewrite_bindings


def _per_channel(value: np.ndarray, channels: int, axis: int, rank: int):
    """`value` as a [channels] vector when it broadcasts along `axis` of a rank-`rank` tensor only."""
    if value is None or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def _bn_producer(g: rg.Graph, x):
    """(conv var, conv call, bias add var or None, bias expr or None) when `x` is conv2d(+bias add)
    used only on the way to the batch norm; None otherwise."""
    add_var, bias, e = None, None, g.value.get(x)
    if rg.op_name(e) == "relax.add" and g.sole_use(x) is not None:
        for conv_arg, bias_arg in ((e.args[0], e.args[1]), (e.args[1], e.args[0])):
            if rg.op_name(g.value.get(conv_arg)) == CONV:
                add_var, bias, x = x, bias_arg, conv_arg
                break
    conv = g.value.get(x)
    if rg.op_name(conv) != CONV or g.sole_use(x) is None:
        return None
    return x, conv, add_var, bias


def _drop_feeders(g: rg.Graph, expr, user, plan: dict) -> None:
    """Drop the bindings that computed `expr` (a folded weight or bias) for `user` alone, so no dead
    reshape of a constant is left behind to show up as a CPU op."""
    for v in rg.free_vars(expr):
        if v in g.value and g.sole_use(v) == user:
            plan[v] = False
            _drop_feeders(g, g.value[v], v, plan)


def _batch_norm_fold(g: rg.Graph, bn_var, bn) -> dict | None:
    """The rebuild plan folding batch norm binding `bn_var` into its producing conv, or None."""
    if rg.op_name(bn) != "relax.nn.batch_norm":
        return None
    a = bn.attrs
    gets = g.uses.get(bn_var, [])
    # Inference only (training normalizes by the batch's own statistics), and the tuple may only be
    # taken apart: item 0 is the normalized tensor, items 1 and 2 the unchanged moving statistics.
    if (
        a.training
        or not gets
        or None in gets
        or not all(isinstance(g.value[u], relax.TupleGetItem) for u in gets)
        or [g.value[u].index for u in gets].count(0) != 1
    ):
        return None
    # a conv feeds only one batch norm (sole use), so two plans never touch one binding
    found = _bn_producer(g, bn.args[0])
    if found is None:
        return None
    conv_var, conv, add_var, bias = found
    shape = static_shape(conv_var)
    if shape is None or not rg.is_f32_tensor(conv_var):
        return None
    c_axis, o_axis = str(conv.attrs.out_layout).index("C"), str(conv.attrs.kernel_layout).index("O")
    if int(a.axis) % len(shape) != c_axis:
        return None
    channels = shape[c_axis]
    weight = const_value(g, conv.args[1], "weight")
    gamma, beta, mean, var = (
        _per_channel(const_value(g, e, "batch norm parameter"), channels, 0, 1) for e in bn.args[1:5]
    )
    b = (
        np.zeros(channels, np.float32)
        if add_var is None
        else _per_channel(const_value(g, bias, "bias"), channels, c_axis, len(shape))
    )
    if weight is None or weight.dtype != np.float32 or any(v is None for v in (gamma, beta, mean, var, b)):
        return None
    # center / scale off mean "no beta" / "no gamma" (the ops ignore those operands then).
    gamma, beta = (gamma if a.scale else np.float32(1)), (beta if a.center else np.float32(0))
    # All arithmetic in float32, as the batch norm itself computes on the CPU.
    scale = (gamma / np.sqrt(var + np.float32(a.epsilon))).astype(np.float32)
    w_shape = [1] * weight.ndim
    w_shape[o_axis] = -1
    new_w = (weight * scale.reshape(w_shape)).astype(np.float32)
    b_shape = [1] * len(shape)
    b_shape[c_axis] = -1
    new_b = ((b - mean) * scale + beta).astype(np.float32).reshape(b_shape)

    # The conv keeps its binding (and name) with the new weights; the bias add and the batch norm go,
    # and the tuple's item 0 becomes conv + new bias, the conv2d_bias form the patterns match.
    plan = {conv_var: lambda m: copy_conv2d(conv, rg.subst(conv.args[0], m), relax.const(new_w)), bn_var: False}
    _drop_feeders(g, conv.args[1], conv_var, plan)
    if add_var is not None:
        plan[add_var] = False
        _drop_feeders(g, bias, add_var, plan)
    for u in gets:
        index = g.value[u].index
        if index == 0:
            plan[u] = lambda m: relax.op.add(m[conv_var], relax.const(new_b))
        elif g.uses.get(u):
            plan[u] = lambda m, e=bn.args[2 + index]: rg.subst(e, m)  # moving_mean / moving_var
        else:
            plan[u] = False  # the frontend's unused running statistics
    return plan


def fold_batch_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold an inference `R.nn.batch_norm` into the `conv2d` before it.

    Matches ``batch_norm(conv2d(x, W) [+ b], gamma, beta, mean, var, training=False)`` on the conv's
    channel axis, where W, b and the four statistics are compile-time constants (per output channel),
    the conv (and its bias add) feed only the batch norm, and the batch norm's result is only taken
    apart by TupleGetItem (as TVM's ONNX frontend emits BatchNormalization). The pair becomes
    ``conv2d(x, W') + b'`` with, per output channel, ``s = gamma / sqrt(var + eps)``, ``W' = W * s``
    and ``b' = (b - mean) * s + beta``, computed in float32 with numpy.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; the batch norms after convs in its `main` (plain dataflow, as frontends
        emit) are folded.

    Returns
    -------
    tvm.IRModule
        `mod` with each such batch norm folded (`mod` itself when none was).
    """
    return rewrite_bindings(mod, _batch_norm_fold)


def decompose_batch_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite the batch norms no conv absorbed into elementwise ops (TVM's DecomposeOpsForInference),
    so they run on the CPU with their moving statistics; `mod` itself when `main` has none, or has a
    training batch norm (ONNX training_mode=1): the pass rewrites every batch norm as inference, and
    a training one normalizes by its batch's own statistics, which TVM's legalization computes."""
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if rg.op_name(e) == "relax.nn.batch_norm" else None
    )
    if not found or any(bool(bn.attrs.training) for bn in found):
        return mod
    return relax.transform.DecomposeOpsForInference("main")(mod)
