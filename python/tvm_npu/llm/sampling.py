"""Samplers for `LLM.generate`: callables logits float32 [vocab] -> token id, on the CPU.

`greedy` is the default. `top_k(k, seed)` and `top_p(p, seed)` draw with their own seeded numpy
Generator, so the same seed gives the same tokens for the same logits.
"""

from __future__ import annotations

import numpy as np


def greedy(logits: np.ndarray) -> int:
    """The most likely token (the first one on a tie)."""
    return int(np.argmax(logits))


def _softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits.astype(np.float64) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def top_k(k: int, seed: int = 0, temperature: float = 1.0):
    """A sampler drawing from the `k` most likely tokens, by their renormalized probabilities."""
    if k < 1 or temperature <= 0:
        raise ValueError(f"top_k needs k >= 1 and temperature > 0, not k={k}, temperature={temperature}")
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> int:
        keep = np.argsort(-logits, kind="stable")[: min(k, logits.size)]
        return int(keep[rng.choice(keep.size, p=_softmax(logits[keep], temperature))])

    return sample


def top_p(p: float, seed: int = 0, temperature: float = 1.0):
    """A sampler drawing from the smallest set of most likely tokens whose probabilities reach `p`
    (nucleus sampling), renormalized."""
    if not 0 < p <= 1 or temperature <= 0:
        raise ValueError(f"top_p needs 0 < p <= 1 and temperature > 0, not p={p}, temperature={temperature}")
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> int:
        probs = _softmax(logits, temperature)
        order = np.argsort(-probs, kind="stable")
        size = int(np.searchsorted(np.cumsum(probs[order]), p) + 1)
        keep = order[: min(size, order.size)]
        return int(keep[rng.choice(keep.size, p=probs[keep] / probs[keep].sum())])

    return sample
