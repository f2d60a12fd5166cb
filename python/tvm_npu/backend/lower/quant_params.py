"""Requantization parameters, exactly as docs/npu.md section 2 defines them.

Convolution, dense and pooling requantize with an fp32 scale computed here with fp32 operations in
onnxruntime's order; elementwise add uses integer multipliers and one shift. The runtime only sees
these numbers; the model's float scales stay in the compiler.
"""

from __future__ import annotations

import math

import numpy as np

MAX_SHIFT = 62


def conv_scale(s_x: float, s_w: float, s_y: float) -> np.float32:
    """S = fp32(fp32(s_x * s_w) / s_y): the requantization scale of a conv / dense output channel."""
    f32 = np.float32
    return f32(f32(f32(s_x) * f32(s_w)) / f32(s_y))


def pool_scale(s_x: float, s_y: float, taps: int) -> np.float32:
    """S = fp32(fp32(s_x / taps) / s_y) for an average pool (taps = 1 for max pooling)."""
    f32 = np.float32
    return f32(f32(f32(s_x) / f32(taps)) / f32(s_y))


def common_shift(ms: list[float], bound: int = 2**31) -> tuple[list[int], int]:
    """Multipliers for several inputs sharing one shift n (elementwise add): the largest n <= 62
    keeping every round(m * 2^n) below `bound` (2^31; less for a 16-bit multiply, docs section 2)."""
    top = max(float(m) for m in ms)
    n = MAX_SHIFT
    while n >= 1 and int(round(top * 2.0**n)) >= bound:
        n -= 1
    if n < 1:
        raise ValueError(f"add multipliers {ms} are too large for the NPU")
    return [int(round(float(m) * 2.0**n)) for m in ms], n


def clamp_bounds(act: str, clip: tuple, scale: float, zp: int, dtype: str = "int8") -> tuple[int, int]:
    """The clamp that implements a fused relu / clip at the output's scale and zero point, within the
    output's int8 (or int16) range."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    if act == "relu":
        lo = max(lo, zp)
    elif act == "clip":
        lo = max(lo, zp + int(np.rint(clip[0] / scale)))
        hi = min(hi, zp + int(np.rint(clip[1] / scale)))
    return lo, max(lo, hi)


def _gelu(x: float) -> float:
    return 0.5 * x * math.erfc(-x / math.sqrt(2.0))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def _gelu_tanh(x: float) -> float:
    """0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x^3))) as x * sigmoid(2 * ...): the sum
    1 + tanh cancels for x < 0, the sigmoid does not."""
    return x * _sigmoid(1.5957691216 * (x + 0.044715 * x**3))


# The activations of UNARY in float64 (docs/npu.md section 2); alpha is leaky relu's slope.
UNARY_F64 = {
    "sigmoid": lambda x, alpha: _sigmoid(x),
    "tanh": lambda x, alpha: math.tanh(x),
    "hardswish": lambda x, alpha: x * min(max(x + 3.0, 0.0), 6.0) / 6.0,
    "gelu": lambda x, alpha: _gelu(x),
    "leaky_relu": lambda x, alpha: x if x >= 0 else x * alpha,
    "silu": lambda x, alpha: x * _sigmoid(x),
    "gelu_tanh": lambda x, alpha: _gelu_tanh(x),
}


def unary_table(func: str, alpha: float, s_x: float, z_x: int, s_y: float, z_y: int) -> np.ndarray:
    """The 256-entry int8 table of an int8 UNARY: entry q + 128 is
    clamp(z_y + round_half_even(f(s_x * (q - z_x)) / s_y), -128, 127), all in float64."""
    f = UNARY_F64[func]
    codes = [z_y + np.rint(f(s_x * (q - z_x), alpha) / s_y) for q in range(-128, 128)]
    return np.clip(np.array(codes, np.float64), -128, 127).astype(np.int8)
