"""Fold a zero pad into the padding of the conv2d that reads it.

Models exported from TensorFlow write "SAME" padding as an explicit Pad before the convolution. The
NPU has no pad command, so the pad would run on the CPU and split the NPU region; as the conv's own
padding it costs nothing. Runs in `rewrite.run` (from `partition.prepare` and the quantizer), before
pattern matching, on float graphs only.
"""

from __future__ import annotations

import tvm

from ..ir import graph as rg
from .common import CONV, copy_conv2d, rewrite_bindings


def _fold_pad(g: rg.Graph, var, pad) -> dict | None:
    """The rebuild plan folding pad binding `var` into the conv2d that reads it, or None."""
    if (
        rg.op_name(pad) != "relax.nn.pad"
        or str(pad.attrs.pad_mode) != "constant"
        or float(pad.attrs.pad_value) != 0.0
        or not rg.is_f32_tensor(var)
        or rg.op_name(g.value.get(pad.args[0])) == "relax.dequantize"
    ):
        return None  # not a zero pad of a float tensor
    user = g.sole_use(var)
    conv = g.value.get(user)
    if rg.op_name(conv) != CONV or not conv.args[0].same_as(var) or conv.args[1].same_as(var):
        return None
    width = [int(p) for p in pad.attrs.pad_width]
    layout = str(conv.attrs.data_layout)
    h, w = layout.index("H"), layout.index("W")
    # before/after pairs per axis; anything on N or C (or a crop) is not a conv padding
    if (
        len(width) != 2 * len(layout)
        or min(width) < 0
        or any(width[2 * i] or width[2 * i + 1] for i in range(len(layout)) if i not in (h, w))
    ):
        return None
    top, left, bottom, right = (int(p) for p in conv.attrs.padding)
    padding = [top + width[2 * h], left + width[2 * w], bottom + width[2 * h + 1], right + width[2 * w + 1]]
    # the pad's sole use is the conv's data operand, so no two pads plan the same conv
    return {var: False, user: lambda m: copy_conv2d(conv, rg.subst(pad.args[0], m), rg.subst(conv.args[1], m), padding)}


def fuse_pad_into_conv(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold a zero `R.nn.pad` into the padding of the `conv2d` that reads it.

    Matches ``p = R.nn.pad(x, pad_mode="constant", pad_value=0)`` on a float32 tensor, padding only
    the H and W axes of the consumer's data layout by non-negative amounts, whose only use is the data
    operand of a ``conv2d``; the pad binding is dropped and its amounts are added to the conv's
    padding (top, left, bottom, right). Models exported from TensorFlow ("SAME" padding with an
    explicit Pad) then run as one NPU convolution.

    Only float graphs are handled for now. In int8 QDQ graphs the pad reads a dequantize (and is
    usually followed by its own quantize -> dequantize pair before the conv); such pads are left
    alone and run on the CPU, the conv on the NPU.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; each zero pad feeding a conv in its `main` (plain dataflow, as frontends
        emit) becomes that conv's padding.

    Returns
    -------
    tvm.IRModule
        `mod` with those pads fused (`mod` itself when it has none).
    """
    return rewrite_bindings(mod, _fold_pad)
