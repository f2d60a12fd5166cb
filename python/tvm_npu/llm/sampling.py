"""Samplers for `LLM.generate`: callables logits float32 [vocab] -> token id, on the CPU.

`greedy` is the default. `top_k(k, seed)` and `top_p(p, seed)` draw with their own seeded numpy
Generator, so the same seed gives the same tokens for the same logits. An argument they cannot use
(k=2.5, p=1.5, temperature=0 or NaN, a seed that is not an int) is NPUError(ERR_INVALID_CONFIG) saying
what to pass, raised when the sampler is made, before any token is drawn.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..contract.errors import NPUError


def greedy(logits: np.ndarray) -> int:
    """The most likely token (the first one on a tie)."""
    return int(np.argmax(_logits(logits)))


def _logits(logits) -> np.ndarray:
    arr = np.asarray(logits)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "fiu":
        raise NPUError(
            "ERR_SHAPE_MISMATCH",
            f"a sampler takes one step's logits, a non-empty 1-D float array, not {arr.dtype} {list(arr.shape)}",
        )
    if arr.dtype.kind == "f" and (np.isnan(arr).any() or np.isneginf(arr).all()):
        what = "NaN" if np.isnan(arr).any() else "only -inf"
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"the logits hold {what}: no token can be drawn from them; the model's output overflowed or is not "
            "a number (check its profile's fp16_overflow / nan counters)",
        )
    return arr


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    if np.isposinf(logits).any():  # an infinite logit takes all the probability (shared among equals)
        top = np.isposinf(logits).astype(np.float64)
        return top / top.sum()
    z = logits.astype(np.float64) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def count(name: str, value, low: int = 1, high: int | None = None) -> int:
    """`value` as an int in [low, high] (an int or a numpy integer; not a bool, not a float such as 64.0);
    else NPUError(ERR_INVALID_CONFIG) saying what to pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low or (high and value > high):
        span = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
        raise NPUError("ERR_INVALID_CONFIG", f"{name}={value!r}: pass {span}")
    return int(value)


def _real(name: str, value, ok, want: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
        raise NPUError("ERR_INVALID_CONFIG", f"{name}={value!r}: pass {want}")
    return float(value)


def _seed(seed) -> np.random.Generator:
    if seed is not None:
        count("seed", seed, low=0)
    return np.random.default_rng(seed)


def top_k(k: int, seed: int = 0, temperature: float = 1.0):
    """A sampler drawing from the `k` most likely tokens, by their renormalized probabilities."""
    k = count("top_k's k", k)
    temperature = _real("temperature", temperature, lambda t: t > 0, "a finite float > 0 (1.0: the model's)")
    rng = _seed(seed)

    def sample(logits: np.ndarray) -> int:
        logits = _logits(logits)
        keep = np.argsort(-logits, kind="stable")[: min(k, logits.size)]
        return int(keep[rng.choice(keep.size, p=_softmax(logits[keep], temperature))])

    return sample


def top_p(p: float, seed: int = 0, temperature: float = 1.0):
    """A sampler drawing from the smallest set of most likely tokens whose probabilities reach `p`
    (nucleus sampling), renormalized."""
    p = _real("top_p's p", p, lambda v: 0 < v <= 1, "a probability in (0, 1]")
    temperature = _real("temperature", temperature, lambda t: t > 0, "a finite float > 0 (1.0: the model's)")
    rng = _seed(seed)

    def sample(logits: np.ndarray) -> int:
        probs = _softmax(_logits(logits), temperature)
        order = np.argsort(-probs, kind="stable")
        size = int(np.searchsorted(np.cumsum(probs[order]), p) + 1)
        keep = order[: min(size, order.size)]
        return int(keep[rng.choice(keep.size, p=probs[keep] / probs[keep].sum())])

    return sample
