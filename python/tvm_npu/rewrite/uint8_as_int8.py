"""Rewrite uint8 QDQ tensors as int8 tensors with their zero point minus 128.

onnxruntime's `quantize_static` quantizes activations to uint8 by default, and the NPU's integer
datapath is int8 (docs/npu.md section 2). A uint8 code q with zero point z stands for the same value as
the int8 code q - 128 with zero point z - 128, and quantizing to either clamps the same way:
clamp(round(x / s) + z, 0, 255) - 128 == clamp(round(x / s) + z - 128, -128, 127). So every
quantize / dequantize pair is rewritten to int8 exactly, and the int8 patterns, lowering and staging
see nothing new. Runs in `rewrite.run` (from `partition.prepare`), before pattern matching.

Where uint8 bytes meet the rest of the model (a uint8 model input or output, an op other than a
dequantize reading the codes) they differ from the int8 codes by 128: the rewrite converts them there
with integer arithmetic on the CPU (`_shift`), never by reinterpreting the bytes.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import dtype_of
from .common import const_value

QUANTIZE, DEQUANTIZE = "relax.quantize", "relax.dequantize"


def _shift(x, to: str):
    """`x` (uint8 or int8 codes) as the other dtype: q - 128 or q + 128, computed in int16 (exact)."""
    wide = relax.op.astype(x, "int16")
    delta = relax.const(-128 if to == "int8" else 128, "int16")
    return relax.op.astype(relax.op.add(wide, delta), to)


def _int8_zero_point(g: rg.Graph, zp):
    """The int8 zero point z - 128 of a uint8 zero point expression, or None when it is not constant."""
    value = const_value(g, zp, "uint8 zero point")
    if value is None or value.dtype != np.uint8:
        return None
    return relax.const((value.astype(np.int16) - 128).astype(np.int8))


def _plan(g: rg.Graph) -> tuple[dict, set]:
    """(the dequantizes of uint8 codes to rewrite: {var: int8 zero point}, the uint8 quantizes to
    rewrite). A binding whose zero point is not a constant keeps uint8 (the int8 patterns then refuse
    it with NPU_E_QUANT_DTYPE)."""
    dqs, qs = {}, set()
    for var, e in g.bindings:
        name = rg.op_name(e)
        if name == DEQUANTIZE and dtype_of(e.args[0]) == "uint8":
            zp = _int8_zero_point(g, e.args[2])
            if zp is not None:
                dqs[var] = zp
        elif name == QUANTIZE and str(e.attrs.out_dtype) == "uint8" and _int8_zero_point(g, e.args[2]) is not None:
            qs.add(var)
    return dqs, qs


def uint8_as_int8(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite uint8 quantizes and dequantizes in `mod`'s main as int8 ones (zero point minus 128).

    A uint8 quantize becomes an int8 one; when something other than a dequantize reads its codes (or
    main returns them), those readers get the codes shifted back to uint8. A dequantize of uint8 codes
    reads the int8 codes: a rewritten quantize's, a constant's (weights: folded here), or else (a model
    input, another op's result) the codes shifted to int8 on the CPU. Values are unchanged everywhere.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; its `main` must be plain dataflow (else ValueError, as the other rewrites).

    Returns
    -------
    tvm.IRModule
        The rewritten module (`mod` itself when it has no uint8 quantize or dequantize).
    """
    g = rg.Graph(mod["main"])
    dqs, qs = _plan(g)
    if not dqs and not qs:
        return mod
    signed = {}  # uint8 var -> its int8 codes (the rewritten quantize's var, or a shift of the codes)

    def int8_codes(bb, x, m, fresh):
        codes = None if x in g.params else const_value(g, x, "uint8 codes")
        if codes is not None:  # weights, constant operands: shifted at compile time
            return relax.const((codes.astype(np.int16) - 128).astype(np.int8))
        if x not in signed:
            signed[x] = bb.emit(_shift(rg.subst(x, m), "int8"), name_hint=fresh(f"{x.name}_s8"))
        return signed[x]

    def rewrite(bb, var, e, m, fresh):
        if var in qs:
            x, s, _ = (rg.subst(a, m) for a in e.args)
            q = relax.op.quantize(x, s, _int8_zero_point(g, e.args[2]), axis=e.attrs.axis, out_dtype="int8")
            if all(u is not None and u in dqs for u in g.uses.get(var, [])):
                return q  # the codes stay inside the model's QDQ pairs: no uint8 form is needed
            signed[var] = bb.emit(q, name_hint=fresh(f"{var.name}_s8"))
            return _shift(signed[var], "uint8")  # `var` itself: what other readers and main's result see
        if var in dqs:
            x = e.args[0]
            codes = m[x] if x in qs and x not in signed else int8_codes(bb, x, m, fresh)
            return relax.op.dequantize(
                codes, rg.subst(e.args[1], m), dqs[var], axis=e.attrs.axis, out_dtype=e.attrs.out_dtype
            )
        return None

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0])
