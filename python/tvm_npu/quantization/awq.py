"""Activation-aware weight scaling for int4 (AWQ; Lin et al., 2023): Relax -> Relax, before the codes.

A few input channels of a dense layer carry much larger activations than the rest, and the rounding error
of their weights costs the most output error. Scaling weight row k of ``W [K, N]`` up by ``s_k`` (and the
activation down by the same factor, so the product is unchanged) gives those rows a finer int4 step
relative to their values. The scales are ``s = a ** alpha / m ** (1 - alpha)`` of each channel's mean
absolute calibration activation `a` and the mean of its weights' magnitude relative to their group's largest
`m` (AutoAWQ's "duo" scaling), normalized around 1, with `alpha` on a grid in [0, 1) (or s = 1) chosen per
input for the smallest error of the *block* the layers feed, on the calibration rows, with the layers'
weights quantized as ``Q(W s) / s`` and everything else float (the block's inputs are the float model's):

- dense layers sharing one input (q, k and v after the attention's norm; gate and up after the MLP's) share
  one `s`, measured on the output of the first dense layer all of their outputs reach with no other dense
  layer between (the attention's output projection; the MLP's down projection): awq_block.py runs that
  part of the graph. Each layer's own output error weighs q against v and gate against up as the block does
  not (q and k enter through a softmax, gate through a SiLU), and chose scales worse than none;
- a layer alone on its input (down, or o where it can be folded) is measured on its own output;
- the model's last dense layers (an LM head: their outputs are the model's, no block after them) keep
  s = 1: their output error weighs every logit alike, which is not what the next-token distribution feels.

s = 1 is a candidate, so a searched block never does worse than round to nearest on its own
data. After the scales, each layer's group ranges are clipped (weight_int4.searched_params, for the
smallest output error on the layer's scaled calibration inputs), and a guard (awq_plan.py) keeps round to
nearest for the whole model, said in the report and warned, when the result is not better than it on the
calibration data.

The activation's ``1 / s`` must be applied where it costs nothing: it is folded into the constant of the
op that produces the input (the gamma, and beta, of a LayerNorm / RMSNorm, or the constant factor of a
multiply along the last axis, which is how a written-out RMSNorm ends), or, for a product
``act(gate) * up`` (the input of a gated MLP's down projection), into the output columns of the dense
layer `up` (the product is elementwise: ``act(gate) * (up / s)``), before `up` is quantized. An input whose
producer has none of these, or that is also read by anything but its dense layers, keeps s = 1 (round to
nearest, then clipped) and `fold_target` says why (an attention's output projection reads heads mixed by
the softmax: folding into v needs one v column per o row, which grouped-query attention does not have).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ..ir import graph as rg
from ..ir.values import constant_value

ALPHAS = np.arange(10) / 10  # the grid of alpha, 0 to 0.9 (a grid of 20: the same KL on tiny-llama)
_SAMPLES = 512  # calibration rows a search and the guard read (the first ones; 1024: the same KL)


def channel_means(x: np.ndarray) -> np.ndarray:
    """Each input channel's mean |x| over the first calibration rows of `x` [samples, K]."""
    return np.maximum(np.abs(x[:_SAMPLES].astype(np.float64)).mean(axis=0), 1e-8)


def weight_means(weights: list, group: int) -> np.ndarray:
    """Each input channel's mean |w| relative to its group's max, over the outputs of `weights` [K, N_i]."""
    w = np.abs(np.concatenate(weights, axis=1).astype(np.float64)).T  # [N, K]
    n, k = w.shape
    gm = w.reshape(n, k // group, group).max(axis=2, keepdims=True) + 1e-6
    return (w.reshape(n, k // group, group) / gm).reshape(n, k).mean(axis=0)


def search(a: np.ndarray, wm: np.ndarray, loss) -> tuple[np.ndarray, float | None, float, float]:
    """(s [K], its alpha or None for s = 1, its loss, the loss at s = 1) of the smallest ``loss(s)`` over
    s = 1 and ``s = a ** alpha / wm ** (1 - alpha)`` normalized around 1, alpha on ALPHAS (`a`:
    `channel_means`, `wm`: `weight_means`; AutoAWQ's "duo" scaling: a channel whose weights are small in
    their groups gains the most from a larger scale). s = 1 (round to nearest) is tried first and wins ties:
    it costs nothing."""
    ones = np.ones(a.size, np.float32)
    plain = best = float(loss(ones))
    best_s, best_alpha = ones, None
    for alpha in ALPHAS:
        s = np.maximum(a**alpha / (wm ** (1 - alpha) + 1e-4), 1e-4)
        s = (s / np.sqrt(s.max() * s.min())).astype(np.float32)
        err = float(loss(s))
        if err < best:
            best, best_s, best_alpha = err, s, float(alpha)
    return best_s, best_alpha, best, plain


def own_output_loss(weights: list[np.ndarray], x: np.ndarray, quantize):
    """``loss(s)``: the mean squared output error of the dense weights `weights` ([K, N_i] each) on their
    inputs `x` [samples, K] (the first rows), quantized as ``quantize(w [N, K]) -> dequantized w``."""
    w = np.concatenate(weights, axis=1).astype(np.float64)
    x = x[:_SAMPLES].astype(np.float64)
    ref = x @ w

    def loss(s):
        approx = quantize((w * s[:, None]).T.astype(np.float32)).T.astype(np.float64) / s[:, None]
        return np.mean((x @ approx - ref) ** 2)

    return loss


def _last_axis_constant(e, g: rg.Graph, k: int) -> int | None:
    """The index of `e`'s argument that is a float constant of K values along the last axis ([K], or 1s
    then K), or None."""
    for i, arg in enumerate(e.args):
        value = constant_value(g.value.get(arg, arg) if isinstance(arg, relax.Var) else arg)
        if value is not None and value.dtype == np.float32 and value.size == k and value.shape[-1:] == (k,):
            return i
    return None


def _dense_factor(x, g: rg.Graph, k: int, dense: dict):
    """The dense layer (its var) that is a factor of the product `x`, N = K, read by `x` alone, or None."""
    e = g.value[x]
    if len(e.args) != 2:
        return None
    for arg in e.args:
        d = dense.get(arg)
        if d is not None and d.weight.shape[1] == k and g.uses.get(arg) == [x]:
            return arg
    return None


def fold_target(g: rg.Graph, x, readers: list, k: int, dense: dict | None = None) -> tuple[list, str | None]:
    """Where the input `x` of the dense layers `readers` (their vars) can take a per-channel 1 / s:
    ([(binding var, argument index)], None), where an index None means the output columns of the dense
    layer that var is (`dense`: {var: weight_only.DenseWeight} of the model), or ([], why not)."""
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
        up = _dense_factor(x, g, k, dense or {})
        if up is not None:
            return [(up, None)], None
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
