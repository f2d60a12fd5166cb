"""Weight-only int8 quantization (W8A16) of a float model's dense layers: Relax -> Relax.

Issue 20's decode step reads every weight once per token, so its time is the weights' DDR bytes: int8 codes
(1 byte) instead of fp16 (2) halve it. Activations stay float (fp16 on the NPU), so nothing is calibrated:
each ``matmul(x, W)`` whose `W` is a float32 constant ``[K, N]`` (inline, or a binding of a constant or of a
constant's transpose that only this matmul reads) becomes ``matmul(x, dequantize(codes, scale, 0, axis=1))``
with symmetric max-abs codes per output column: ``scale[n] = max|W[:, n]| / 127`` (at least
calibrate.MIN_SCALE for an all-zero column) and ``codes = clip(round(W / scale), -127, 127)``.

The result is still a float model — TVM's llvm build runs it as is, which is the reference the NPU is held
to — and the dense pattern of partition/ takes the dequantize as its weight: the lowering
(backend/lower/conv.weight_only_codes) keeps the codes and scales, and CONV2D's w_dtype (format 1.4,
docs/npu.md section 2) computes the layer with 1-byte weights. Batched matmuls of two activations
(attention) and weights of another rank are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import constant_value
from ..rewrite.common import const_value, rewrite_bindings
from .calibrate import quantize_weight, weight_scales


def int8_columns(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes int8 [K, N], scales float32 [N]) of a float weight [K, N], symmetric per column."""
    scales = weight_scales(w, axis=1)
    return quantize_weight(w, scales, axis=1), scales


def _float_constant(g: rg.Graph, w) -> bool:
    """Whether `w` is a constant or a transposed constant (through `g`'s bindings), nothing computed."""
    w = g.value.get(w, w) if isinstance(w, relax.Var) else w
    if rg.op_name(w) == "relax.permute_dims":
        w = w.args[0]
        w = g.value.get(w, w) if isinstance(w, relax.Var) else w
    return constant_value(w) is not None


@dataclass
class DenseWeight:
    """A dense layer ``var = matmul(x, W)`` whose weight `W` is a float32 constant [K, N] (inline, or a
    binding of a constant or of a constant's transpose that only this matmul reads)."""

    var: relax.Var
    call: relax.Call
    x: relax.Expr
    weight: np.ndarray
    weight_var: relax.Var | None  # W's own binding, dropped with the rewrite

    def plan(self, new_weight) -> dict:
        """The rebuild plan writing this matmul with `new_weight` (a Relax expression) as its weight. No two
        plans name one binding: each names its matmul and a weight binding read by it alone."""

        def emit(m, e=self.call):
            return relax.Call(e.op, [rg.subst(e.args[0], m), new_weight], e.attrs, e.ty_args)

        plan = {self.var: emit}
        if self.weight_var is not None:
            plan[self.weight_var] = False
        return plan


def dense_weight(g: rg.Graph, var, e) -> DenseWeight | None:
    """Binding `var = e` as a DenseWeight, or None when it is not a float dense layer with its own constant
    weight."""
    if rg.op_name(e) != "relax.matmul" or not rg.is_f32_tensor(var):
        return None
    w = e.args[1]
    if isinstance(w, relax.Var) and g.uses.get(w) != [var]:
        return None  # shared (or a model input): leave it
    if not _float_constant(g, w):
        return None  # e.g. already dequantized codes: never quantize a weight twice
    value = const_value(g, w, "weight")
    if value is None or value.dtype != np.float32 or value.ndim != 2:
        return None
    return DenseWeight(var, e, e.args[0], value, w if isinstance(w, relax.Var) else None)


def dense_weights(g: rg.Graph) -> list[DenseWeight]:
    """Every DenseWeight of `g`, in model order."""
    return [d for d in (dense_weight(g, v, e) for v, e in g.bindings) if d is not None]


def _dense(g: rg.Graph, var, e) -> dict | None:
    """The plan writing matmul binding `var` with a dequantized int8 weight, or None."""
    d = dense_weight(g, var, e)
    if d is None:
        return None
    codes, scales = int8_columns(d.weight)
    zeros = np.zeros(scales.size, np.int8)
    deq = relax.op.dequantize(relax.const(codes), relax.const(scales), relax.const(zeros), axis=1, out_dtype="float32")
    return d.plan(deq)


def quantize_weights_int8(mod: tvm.IRModule) -> tvm.IRModule:
    """Weight-only int8 quantization of `mod`'s dense layers (see the module docstring).

    Parameters
    ----------
    mod : tvm.IRModule
        A float model with its weights bound as constants (e.g. from `tvm_npu.from_onnx`).

    Returns
    -------
    tvm.IRModule
        The model with each constant dense weight as ``dequantize(int8 codes, per-column scales)``; `mod`
        itself when it has none.
    """
    return rewrite_bindings(mod, _dense)
