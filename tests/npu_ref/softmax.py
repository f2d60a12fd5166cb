"""SOFTMAX with format 1.4's scale and additive mask (docs/npu.md section 2), in the contract's fp32 order.

Written from the text, not the C++: z = x * scale (when scale is not 0), then z + the mask row's element,
each one fp32 operation; m = the row's maximum by comparisons in element order; e_i = exp(z_i - m) in fp32;
s = the in-order fp32 sum of the e_i from +0.0; y_i = e_i / s rounded to fp16. exp is evaluated in float64
and rounded to fp32 (the correctly rounded fp32 exp a libm's expf may differ from in its last bit, section 2:
the contract's bit-exactness is up to that). Row r reads mask row (mask_row0 + r) % mask_rows.
"""

import numpy as np

from . import int8

F32 = np.float32


def z_values(x, scale=None, mask=None, mask_row0=0, x32=None):
    """The fp32 z of every row: x (rows of fp16 values; or `x32`, rows of fp32 values, the int8 form's
    dequantized codes) times `scale`, plus the broadcast mask rows."""
    z = np.asarray(x, np.float16).astype(F32) if x32 is None else np.asarray(x32, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        if scale is not None:
            z = z * F32(scale)
        if mask is not None:
            mask = np.asarray(mask, np.float16).astype(F32)
            rows = (mask_row0 + np.arange(z.shape[0])) % mask.shape[0]
            z = z + mask[rows]
    return z


def softmax(x, scale=None, mask=None, mask_row0=0):
    """What SOFTMAX writes for `x` [rows, row_elems] (fp16 values), fp16 [rows, row_elems]."""
    return _softmax_f32(z_values(x, scale, mask, mask_row0)).astype(np.float16)


def softmax_int8(q, s_x, z_x, s_y, z_y, scale=None, mask=None, mask_row0=0):
    """What an int8 SOFTMAX writes for the codes `q` [rows, row_elems] (format 1.4): each code dequantized as
    staging out does, fp32(fp32(q - z_x) * s_x), the fp32 steps of the fp16 softmax, and each fp32 result
    quantized as staging in does, clamp(round_half_even(fp32(y / s_y)) + z_y, -128, 127)."""
    z = z_values(None, scale, mask, mask_row0, x32=int8.dequantize(q, s_x, z_x))
    return int8.quantize(_softmax_f32(z), s_y, z_y)


def _softmax_f32(z):
    """The fp32 y of every row of z: m by comparisons in order, e = exp(z - m), the in-order fp32 sum, e / s."""
    out = np.empty(z.shape, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for r, row in enumerate(z):
            m = row[0]
            for v in row[1:]:
                if v > m:  # a NaN never wins a comparison
                    m = v
            e = np.exp((row - m).astype(np.float64)).astype(F32)  # row - m: fp32 subtractions
            s = F32(0.0)
            for v in e:  # in element order, fp32
                s = F32(s + v)
            out[r] = e / s
    return out


def exact(x, scale=None, mask=None, mask_row0=0):
    """The exact softmax (float64) of the fp32 z, rounded to fp16: SOFTMAX is within 1 fp16 ulp of it."""
    z = z_values(x, scale, mask, mask_row0).astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float16)
