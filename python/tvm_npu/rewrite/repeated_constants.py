"""Cut a constant operand of an elementwise op expanded to the batch to one image.

Why: exporters expand constants to the batch. CLIP's causal mask, folded at import for a batch of 2
(classifier-free guidance encodes the prompt and the empty prompt together), is a [2, 1, 8, 8]
constant whose two images are the same mask; added to the [2, 4, 8, 8] attention scores it is no
broadcast the NPU's ELTWISE or the masked softmax takes (NPU_E_BROADCAST), and each layer's mask add
became a CPU island that cut the text encoder into 3 NPU regions. As [1, 1, 8, 8] it is the mask the
batch-1 export has.

Exact: the batch axis (axis 0 of a constant of the output's rank) is cut only where every image of the
constant equals the first, bit for bit (NaNs and signed zeros included), and the other operand has the
output's batch, so the output's shape and every element are unchanged (broadcasting repeats the one
image that was repeated anyway). Only the batch: a per-channel gamma of equal values (a fresh norm's
ones) stays the [C] vector its recognizers read; and only a literal constant beside a run-time tensor,
so a weight's dequantize chain (int4 scales taken per group) keeps its form.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import const_value, rewrite_bindings

_ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _one_image(value: np.ndarray, other: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray | None:
    """`value` [B, ...] (the output's rank) cut to [1, ...] when its B images are equal and `other` has
    the output's batch; else None."""
    if value.ndim != len(out) or value.shape[0] == 1 or len(other) != len(out) or other[0] != out[0]:
        return None
    first = value[:1]
    return first if _bits(value) == _bits(np.broadcast_to(first, value.shape)) else None


def _repeated(g: rg.Graph, var, e) -> dict | None:
    if rg.op_name(e) not in _ELEMENTWISE or len(e.args) != 2:
        return None
    out = static_shape(var)
    for k in (0, 1):
        const, other = e.args[k], e.args[1 - k]
        # a literal constant beside a run-time tensor only: a weight's own chain (an int4 weight's
        # dequantize, scales taken per group) keeps the form its recognizers read
        literal = isinstance(const, tvm.ir.Constant) and const_value(g, other, "operand") is None
        value = const_value(g, const, "operand") if literal else None
        other_shape = static_shape(other) if value is not None else None
        if value is None or out is None or other_shape is None or value.ndim > len(out):
            continue
        shrunk = _one_image(value, other_shape, out)
        if shrunk is None:
            continue
        shrunk = np.ascontiguousarray(shrunk)
        new = relax.const(shrunk, str(value.dtype))

        def rebuilt(m, k=k, other=other, new=new, op=e.op):
            args = [None, None]
            args[k], args[1 - k] = new, rg.subst(other, m)
            return relax.Call(op, args, e.attrs)

        return {var: rebuilt}
    return None


def repeated_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """Cut each constant operand of an elementwise add / subtract / multiply / divide / maximum / minimum
    of `main` to one image where its images are equal (see the module docstring).

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; `main` plain dataflow.

    Returns
    -------
    tvm.IRModule
        `mod` with those constants shrunk (`mod` itself when there are none).
    """
    return rewrite_bindings(mod, _repeated)
