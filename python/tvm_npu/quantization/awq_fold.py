"""A float model with the activation-aware scales of an AWQ quantization applied and nothing quantized: each
dense weight ``W * s_rows / s_cols`` and each ``1 / s`` folded into the op before (awq.py), the same function
as the model up to float rounding.

A W4A8 step under AWQ codes (llm/prefill_w4a8.py) is quantized from this model: its activations are the
scaled ones (each input channel divided by its s, what the int8 scales are calibrated on; SmoothQuant's
migration of activation outliers into the weights is this same transform), and its dense weights are the
very arrays the W4A16 quantization chose the int4 codes of, so the W4A8 step takes those codes from the
memo and both steps hold one copy of them.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from . import awq, awq_plan
from .weight_int4 import _key
from .weight_only import dense_weights


def scaled_float(mod: tvm.IRModule, memo: dict) -> tuple[tvm.IRModule, int]:
    """(`mod` with the scales `memo` (quantize_weights_int4's, method "awq") holds for its dense layers
    applied, how many layers were scaled). Each scaled layer's new weight is entered in `memo` under its own
    key with the codes already chosen for it (and no scale), so that a quantization of the result takes
    them. A memo whose guard kept round to nearest holds no scale: `mod` comes back unchanged."""
    g = rg.Graph(mod["main"])
    layers = [d for d in dense_weights(g) if _key(d.weight) in memo]
    rows = {d.var: memo[_key(d.weight)][1] for d in layers if memo[_key(d.weight)][1] is not None}
    if not rows:
        return mod, 0
    dense = {d.var: d for d in layers}
    cols = {}
    for d in layers:
        if d.var in rows:
            readers = [e.var for e in layers if e.x.same_as(d.x)]
            for var, index in awq.fold_target(g, d.x, readers, d.weight.shape[0], dense)[0]:
                if index is None:
                    cols[var] = rows[d.var]
    folds = awq_plan.refolds(g, layers, [rows.get(d.var) for d in layers])
    plans = {}
    for d in layers:
        if d.var not in rows and d.var not in cols:
            continue
        w = d.weight.astype(np.float32)
        w = w * rows[d.var][:, None] if d.var in rows else w
        w = (w / cols[d.var][None, :] if d.var in cols else w).astype(np.float32)
        memo.setdefault(_key(w), (memo[_key(d.weight)][0], None))
        plans.update(d.plan(relax.const(w)))

    def rewrite(bb, var, value, m, fresh):
        if var in plans:
            return plans[var] if plans[var] is False else plans[var](m)
        if var in folds:
            out = value
            for index, s in folds[var]:
                out = awq.scaled(out, index, g, s, m)
            return out
        return None

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0]), len(rows)
