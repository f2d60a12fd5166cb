"""Fold a float graph in which some compute op reads constants alone (TVM's FoldConstant).

Matched into an NPU layer, such an op would take a constant as its data input, which no NPU command
reads (lowering crashed on it). Runs first in `rewrite.run` (from `partition.prepare` and the
quantizer), so the later rewrites and the patterns see the folded constant.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import graph as rg
from .common import const_value

# Ops that compute (rather than move or reinterpret) values: one of them on constants alone is work the
# NPU region would get as a constant input, which no NPU command reads.
_COMPUTE = (
    "relax.matmul",
    "relax.nn.conv2d",
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.sigmoid",
    "relax.tanh",
    "relax.nn.relu",
    "relax.clip",
    "relax.nn.softmax",
    "relax.nn.layer_norm",
    "relax.nn.rms_norm",
)


def _dequantizes(g: rg.Graph, e) -> bool:
    """Whether `e` is a step of a group-wise weight's dequantization (ir/group_quant.py: a subtract or
    multiply reading integer codes or zero points widened by astype, or group values gathered by take).
    The dense lowering keeps those codes (int4 weights); folded they would be a float weight."""
    if rg.op_name(e) not in ("relax.subtract", "relax.multiply"):
        return False
    for a in e.args:
        a = g.value.get(a, a) if isinstance(a, relax.Var) else a
        if rg.op_name(a) == "relax.take":
            return True
        if rg.op_name(a) == "relax.astype" and str(a.args[0].ty.dtype).startswith(("int", "uint")):
            return True
    return False


def fold_constant_compute(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold a float graph whose compute ops include one on constants only (TVM's FoldConstant).

    A frontend or a user's own rewrite can leave, e.g., ``matmul(zeros, W)`` (an LSTM's first step
    from a zero state): matched as an NPU dense layer its data input would be a constant, which NPU
    commands do not take. Folded, it is a constant operand of the next op. Only float graphs: in a QDQ
    graph FoldConstant would also fold ``dequantize(int8 weight)`` and hide the int8 weights from the
    patterns. Graphs without such an op are returned as they are (FoldConstant compiles a kernel per
    constant subgraph, e.g. every transposed weight); the steps of a group-wise weight's dequantization
    do not count (a graph folded for another op folds them too: those weights then run as fp16).
    """
    g = rg.Graph(mod["main"])
    ops = {rg.op_name(e) for _, e in g.bindings}
    if "relax.dequantize" in ops or "relax.quantize" in ops:
        return mod
    for _, e in g.bindings:
        if _dequantizes(g, e):
            continue
        if rg.op_name(e) in _COMPUTE and all(
            not isinstance(a, (relax.Var, relax.Call)) or const_value(g, a, "constant compute") is not None
            for a in e.args
        ):
            return relax.transform.FoldConstant()(mod)
    return mod
