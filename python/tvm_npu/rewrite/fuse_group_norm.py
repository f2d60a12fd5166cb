"""Rewrite every GroupNorm, in each form an exporter writes it (`group_norm_forms.FORMS`), as the NPU's
layer_norm over grouped rows: ``reshape(x, [N, G, L]) -> layer_norm(axes=-1, gamma=1, beta=0) ->
reshape back``, then gamma and beta per channel.

A GroupNorm normalizes each group of C / G whole channels of an image over all its elements: once x is
viewed as ``[N, G, L]`` rows (``L = C / G * H * W``, a view: no data moves), that is exactly a layer
norm of each row without affine (same mean, biased variance, eps under the root), which the NPU runs
as one NORM command (docs/npu.md section 2) where ``L <= max_width``; the per-channel gamma and beta
are elementwise multiplies and adds with a per-channel operand, which the NPU runs too. Without this
rewrite the exported Reshape / ReduceMean / Sub / Pow / Sqrt / Div chain (or InstanceNormalization, or
GroupNormalization) runs on the CPU. A row longer than max_width stays on the CPU with NORM's reason
(NPU_E_WIDTH): NORM keeps one row's statistics. Only float32 GroupNorms are rewritten (the NPU takes
float32 tensors only). Runs in `rewrite.run`, after fuse_silu, before pattern matching.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from .group_norm_forms import FORMS, GroupNormMatch


def _layer_norm(data, length: int, eps: float):
    ones, zeros = np.ones(length, np.float32), np.zeros(length, np.float32)
    return relax.op.nn.layer_norm(data, relax.const(ones), relax.const(zeros), axes=[-1], epsilon=eps)


def _emit(bb, got: GroupNormMatch, m: dict, fresh, name: str):
    """The new value of the match's root (helpers emitted through `bb`)."""
    data = m.get(got.data, got.data)
    if got.source is None:  # data is the grouped view already
        return _layer_norm(data, int(got.data.ty.shape[-1]), got.epsilon)
    shape = list(got.source)
    rows = [shape[0], got.groups, shape[1] // got.groups * math.prod(shape[2:])]
    grouped = bb.emit(relax.op.reshape(data, rows), fresh(f"{name}_rows"))
    normed = bb.emit(_layer_norm(grouped, rows[-1], got.epsilon), fresh(f"{name}_norm"))
    out = relax.op.reshape(normed, shape)
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    keep = got.shape is not None  # form (d) keeps its affine: the NPU's GroupNorm chain ends in it
    if keep or not (got.gamma == 1).all():
        out = bb.emit(out, fresh(f"{name}_unscaled"))
        out = relax.op.multiply(out, relax.const(got.gamma.reshape(per_channel)))
    if keep or not (got.beta == 0).all():
        out = bb.emit(out, fresh(f"{name}_unshifted"))
        out = relax.op.add(out, relax.const(got.beta.reshape(per_channel)))
    if got.shape is not None:  # form (d): the map's GroupNorm, viewed as the root's [N, C, L]
        out = relax.op.reshape(bb.emit(out, fresh(f"{name}_map")), list(got.shape))
    return out


def fuse_group_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite each float32 GroupNorm of `main` (a form of `group_norm_forms.FORMS`) as a layer_norm of
    its ``[N, G, C / G * H * W]`` rows.

    The chain's intermediate bindings (each read only by the next step, so no two matches share one)
    are dropped; the grouped view and the reshape back stay. Returns `mod` itself when nothing matched.
    """
    g = rg.Graph(mod["main"])
    matches: dict = {}
    taken: set = set()
    for _, form in FORMS:  # form-major: a form containing another (d) takes its chain first
        for var, value in g.bindings:
            got = form(g, var, value)
            if got is not None and not ({var, *got.drop} & taken):
                matches[var] = got
                taken.update((var, *got.drop))
    if not matches:
        return mod
    dropped = {v for got in matches.values() for v in got.drop}

    def rewrite(bb, var, value, m, fresh):
        if var in dropped:
            return False
        return _emit(bb, matches[var], m, fresh, var.name) if var in matches else None

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0])
