"""Activation-aware weight scaling for int4 (AWQ-style; Lin et al., 2023): Relax -> Relax, before the codes.

A few input channels of a dense layer carry much larger activations than the rest, and the rounding error
of their weights costs the most output error. Scaling weight row k of ``W [K, N]`` up by ``s_k`` (and the
activation down by the same factor, so the product is unchanged) gives those rows a finer int4 step
relative to their values. The scales are ``s = a ** alpha`` of each channel's mean absolute calibration
activation `a`, normalized around 1, with `alpha` in [0, 1] chosen per input by grid search for the smallest
output error ``|x (Q(W s) / s) - x W|`` on the calibration rows; alpha 0 is plain round-to-nearest, so the
search never does worse than it on its own data.

The activation's ``1 / s`` must be applied where it costs nothing: it is folded into the constant of the
op that produces the input (the gamma, and beta, of a LayerNorm / RMSNorm, or the constant factor of a
multiply along the last axis, which is how a written-out RMSNorm ends). Every dense layer reading that
input shares one `s`, searched over their weights together (q, k and v after one norm; gate and up). An
input whose producer has no such constant, or that is also read by anything but dense layers, keeps
s = 1: those layers are quantized by round to nearest, and `fold_targets` says why.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ..ir import graph as rg
from ..ir.values import constant_value

ALPHAS = np.linspace(0.0, 1.0, 11)
_SAMPLES = 1024  # calibration rows the search reads (the first ones: enough for a mean output error)


def search_scales(weights: list[np.ndarray], x: np.ndarray, quantize) -> tuple[np.ndarray, float]:
    """(scales [K], the chosen alpha) for the dense weights `weights` ([N_i, K] each) that read the inputs
    `x` [samples, K]; `quantize(w [N, K]) -> dequantized w` is the int4 scheme (group size, symmetry)."""
    w = np.concatenate(weights, axis=0).astype(np.float64)
    x = x[:_SAMPLES].astype(np.float64)
    a = np.maximum(np.abs(x).mean(axis=0), 1e-8)
    ref = x @ w.T
    best, best_s, best_alpha = np.inf, np.ones(w.shape[1]), 0.0
    for alpha in ALPHAS:
        s = a**alpha
        s = s / np.sqrt(s.max() * s.min())
        approx = quantize((w * s[None, :]).astype(np.float32)).astype(np.float64) / s[None, :]
        err = float(np.mean((x @ approx.T - ref) ** 2))
        if err < best:
            best, best_s, best_alpha = err, s, float(alpha)
    return best_s.astype(np.float32), best_alpha


def _last_axis_constant(e, g: rg.Graph, k: int) -> int | None:
    """The index of `e`'s argument that is a float constant of K values along the last axis ([K], or 1s
    then K), or None."""
    for i, arg in enumerate(e.args):
        value = constant_value(g.value.get(arg, arg) if isinstance(arg, relax.Var) else arg)
        if value is not None and value.dtype == np.float32 and value.size == k and value.shape[-1:] == (k,):
            return i
    return None


def fold_target(g: rg.Graph, x, readers: list, k: int) -> tuple[list, str | None]:
    """Where the input `x` of the dense layers `readers` (their vars) can take a per-channel 1 / s:
    ([(binding var, argument index)], None), or ([], why not)."""
    if not isinstance(x, relax.Var) or x not in g.value:
        return [], "its input is a graph input"
    if sorted(map(str, g.uses.get(x, []))) != sorted(map(str, readers)):
        return [], "its input is also read by other ops"
    e = g.value[x]
    op = rg.op_name(e)
    if op in ("relax.nn.layer_norm", "relax.nn.rms_norm"):
        axes = [int(a) for a in e.attrs.axes]
        if axes not in ([-1], [len(x.ty.shape) - 1]):
            return [], f"its {op} normalizes axes {axes}"
        return [(x, i) for i in range(1, len(e.args))], None  # gamma (and beta): both scale with the output
    if op == "relax.multiply":
        i = _last_axis_constant(e, g, k)
        if i is not None:
            return [(x, i)], None
    if op == "relax.add":  # a written-out LayerNorm ends with + beta after * gamma
        i = _last_axis_constant(e, g, k)
        other = e.args[1 - i] if i is not None and len(e.args) == 2 else None
        inner = g.value.get(other) if isinstance(other, relax.Var) else None
        if inner is not None and rg.op_name(inner) == "relax.multiply" and g.uses.get(other) == [x]:
            j = _last_axis_constant(inner, g, k)
            if j is not None:
                return [(x, i), (other, j)], None
    return [], f"its producer ({op or type(e).__name__}) has no per-channel constant to fold 1/s into"


def scaled(value: relax.Call, index: int, g: rg.Graph, s: np.ndarray, m: dict) -> relax.Call:
    """`value` with its constant argument `index` divided by `s` along the last axis."""
    arg = value.args[index]
    const = constant_value(g.value.get(arg, arg) if isinstance(arg, relax.Var) else arg)
    args = [rg.subst(a, m) for a in value.args]
    args[index] = relax.const((const / s.reshape((1,) * (const.ndim - 1) + (-1,))).astype(np.float32))
    return relax.Call(value.op, args, value.attrs, value.ty_args)
