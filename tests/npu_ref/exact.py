"""The real functions, in float64, that docs/npu.md section 2 states UNARY's and SOFTMAX's results
against: fp16 within 1 ulp of the exact value rounded, and the int8 tables' entries (int8.unary_table)."""

import math

import numpy as np


def _gelu(v):
    if v == -math.inf:
        return 0.0  # the limit (0.5 * v * erfc(inf) would be -inf * 0)
    return 0.5 * v * math.erfc(-v / math.sqrt(2.0))


def _gelu_tanh(v):
    """0.5 * v * (1 + tanh(0.7978845608 * (v + 0.044715 * v^3))), written with tanh(z) = 2 * sigmoid(2z) - 1
    so that 1 + tanh does not cancel (float64 would lose fp16's digits below v = -9)."""
    z = 0.7978845608 * (v + 0.044715 * v**3)
    return v / (1.0 + np.exp(-2.0 * z))


# f(v, alpha) on float64 arrays; alpha is leaky relu's slope.
FUNCTIONS = {
    "sigmoid": lambda v, alpha: 1.0 / (1.0 + np.exp(-v)),
    "tanh": lambda v, alpha: np.tanh(v),
    "hardswish": lambda v, alpha: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0,
    "gelu": lambda v, alpha: np.vectorize(_gelu, otypes=[np.float64])(v),
    "leaky_relu": lambda v, alpha: np.where(v < 0, v * alpha, v),
    "silu": lambda v, alpha: v / (1.0 + np.exp(-v)),  # -inf / inf: NaN at -inf, as x * sigmoid(x) in IEEE
    "gelu_tanh": lambda v, alpha: _gelu_tanh(v),
}


def function(func, v, alpha=0.01):
    """f(v) in float64 (exp may overflow to inf on the way to sigmoid's 0: no warning)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return FUNCTIONS[func](np.asarray(v, np.float64), alpha)


def unary(func, x, alpha=0.01):
    """The exact f of the fp16 input, rounded to fp16: what UNARY's sigmoid, tanh, gelu, silu and gelu tanh
    are within 1 fp16 ulp of (section 2)."""
    x16 = np.asarray(x, np.float32).astype(np.float16)
    return function(func, x16, alpha).astype(np.float16)


def softmax(x):
    """The exact softmax of each last-axis row of the fp16 input, rounded to fp16: what SOFTMAX is within
    1 fp16 ulp of (section 2)."""
    x = np.asarray(x, np.float32).astype(np.float16).astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float16)


def fp16_ulps(a, b):
    """Distance in fp16 steps between fp16-representable a and b (0 for equal bits or two NaNs)."""

    def ordered(v):
        bits = np.asarray(v, np.float32).astype(np.float16).view(np.int16).astype(np.int32)
        return np.where(bits < 0, -32768 - bits, bits)

    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)
