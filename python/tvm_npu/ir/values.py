"""Values of Relax expressions every stage reads: static shapes, dtypes, compile-time constants."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm

from ..contract.errors import NPUError


def static_shape(expr) -> tuple | None:
    """The shape of `expr` as ints, or None when any dimension is symbolic or unknown."""
    ty = expr.ty if hasattr(expr, "ty") else expr.struct_info
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    dims = []
    for v in shape.values:
        if not isinstance(v, IntImm):
            return None
        dims.append(int(v.value))
    return tuple(dims)


def dtype_of(expr) -> str:
    ty = expr.ty if hasattr(expr, "ty") else expr.struct_info
    return str(getattr(ty, "dtype", ""))


def constant_value(expr):
    """Numpy value of a constant (None when not a compile-time constant)."""
    if isinstance(expr, tvm.ir.Constant):
        return expr.value.numpy()
    return None


def eval_const(expr, symbol: str, what: str, env: dict | None = None) -> np.ndarray:
    """Evaluate a constant expression (constant, permute_dims, reshape, dequantize, and the astype / take /
    subtract / multiply of a group-wise quantized weight) with numpy;
    `env` maps the composite's dataflow variables to their values."""
    env = env or {}
    while isinstance(expr, relax.Var) and expr in env:
        expr = env[expr]
    value = constant_value(expr)
    if value is not None:
        return value
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        name = expr.op.name
        if name == "relax.permute_dims":
            axes = expr.attrs.axes
            return eval_const(expr.args[0], symbol, what, env).transpose(
                None if axes is None else [int(a) for a in axes]
            )
        if name == "relax.reshape":
            return eval_const(expr.args[0], symbol, what, env).reshape(static_shape(expr))
        if name == "relax.dequantize":
            q, scale, zp = (eval_const(a, symbol, what, env) for a in expr.args[:3])
            shape = [1] * q.ndim
            if scale.size > 1:
                shape[int(expr.attrs.axis) % q.ndim] = -1
            return (q.astype(np.float32) - zp.astype(np.float32).reshape(shape)) * scale.astype(np.float32).reshape(
                shape
            )
        # A group-wise weight (ir/group_quant.py): float32 arithmetic, as TVM's build computes it.
        if name == "relax.astype":
            return eval_const(expr.args[0], symbol, what, env).astype(str(expr.attrs.dtype))
        if name == "relax.take":
            data, index = (eval_const(a, symbol, what, env) for a in expr.args[:2])
            axis = expr.attrs.axis
            return np.take(data, index, axis=None if axis is None else int(axis))
        if name in ("relax.subtract", "relax.multiply"):
            a, b = (eval_const(x, symbol, what, env) for x in expr.args[:2])
            return np.subtract(a, b) if name == "relax.subtract" else np.multiply(a, b)
    raise NPUError(
        "ERR_OP_NOT_SUPPORTED", f"{symbol}: the {what} is not a compile-time constant; bind weights with params="
    )
