"""ROPE (docs/npu.md section 2): rotary position embedding in the rotate-half form, written from the
contract's text with numpy float32 operations, each IEEE-rounded: the two products (exact, fp16 x fp16),
then one fp32 subtract (first half) or add (second half), then one rounding to fp16."""

import numpy as np

F32 = np.float32


def rope(x, cos, sin, cs_row0=0):
    """What ROPE writes for the fp16 rows `x` [rows, D] with the fp16 tables `cos`, `sin` [cs_rows, D]: row r
    reads table row (cs_row0 + r) % cs_rows. Returns fp16 [rows, D]."""
    with np.errstate(all="ignore"):  # inf * 0, inf - inf: NaN, as the contract says
        x = np.asarray(x, F32).astype(np.float16).astype(F32)
        cos = np.asarray(cos, F32).astype(np.float16).astype(F32)
        sin = np.asarray(sin, F32).astype(np.float16).astype(F32)
        rows, d = x.shape
        h = d // 2
        t = (cs_row0 + np.arange(rows)) % cos.shape[0]
        c, s = cos[t], sin[t]
        partner = np.concatenate([x[:, h:], x[:, :h]], axis=1)  # x[i + h] for i < h, x[i - h] for i >= h
        p = x * c
        q = partner * s
        y = np.concatenate([p[:, :h] - q[:, :h], p[:, h:] + q[:, h:]], axis=1)
        return y.astype(np.float16)
