"""Rewrite a division by a power-of-two constant as the multiply that gives the same bits: ``x / 2^k`` as
``x * 2^-k``, and ``x / 1`` as ``x`` itself.

The NPU has no divide; its ELTWISE multiplies. For a divisor c = 2^k (a one-element float32 constant)
both x / c and x * (1 / c) are the exact quotient rounded once, since 1 / c is itself exact: the same
float for every x, NaN, infinities, signed zeros and subnormals included (a product, like the quotient,
rounds the exact real result). Exports write such divisions where the model scales by a configured
constant: diffusers' resnet blocks divide by `output_scale_factor` (1.0 in Stable Diffusion), attention by
sqrt(head_dim) when that is a power of two. Any other divisor is left alone (its reciprocal would round).
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import const_value, rewrite_bindings


def _power_of_two(v: np.ndarray | None) -> bool:
    if v is None or v.size != 1 or v.dtype != np.float32:
        return False
    c = float(v.reshape(()))
    if not math.isfinite(c) or c <= 0:
        return False
    mantissa, exponent = math.frexp(c)
    # 1 / c must be a normal float32 too (exact): c in [2^-126, 2^126]
    return mantissa == 0.5 and -125 <= exponent <= 127


def _divide(g: rg.Graph, var, e) -> dict | None:
    if rg.op_name(e) != "relax.divide" or not rg.is_f32_tensor(var):
        return None
    x, d = e.args
    c = const_value(g, d, "divisor")
    if not isinstance(x, relax.Var) or not _power_of_two(c) or not rg.is_f32_tensor(x):
        return None
    if static_shape(x) != static_shape(var):  # the constant must not broadcast x to a larger shape
        return None
    value = float(c.reshape(()))
    if value == 1.0:
        return {var: lambda m, x=x: rg.subst(x, m)}
    inverse = relax.const(np.float32(1.0 / value), "float32")
    return {var: lambda m, x=x: relax.op.multiply(rg.subst(x, m), inverse)}


def divide_by_power_of_two(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite ``x / c`` with c a power-of-two float32 scalar constant as ``x * (1 / c)`` (``x`` for c = 1).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; each such divide in its `main` (plain dataflow) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with those divides as multiplies (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _divide)
