"""Quality of a compiled LLM measured on the NPU: teacher-forced perplexity over a text, and the top-1
agreement and KL divergence against the float model on the same tokens (docs/llm.md, "Quality").

A text longer than the compiled context is read in sliding windows (the usual evaluation of a fixed-length
model): windows of `max_context` tokens starting every `stride` tokens (at most max_context - 1, so that a
window holds the token before its first target), each scoring only the tokens the windows before it did
not, so that every token but the first is scored once with at least `max_context - stride` tokens of
context (all of them for the tokens of the first window). Each window is a
new sequence: with step="prefill" its logits come from the compiled prefill step, run in its buckets; with
step="decode" from one prefill token and then one decode step per token (the KV cache path).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from ..contract.errors import NPUError


@dataclass
class Evaluation:
    """What `perplexity` measured. `nll` is the mean negative log-likelihood in nats per scored token on
    the NPU; with a reference, `reference_nll` the float model's on the same tokens, `top1_agreement` the
    fraction of scored positions whose most likely next token is the same, `kl` the mean KL divergence
    KL(reference || NPU) per token (nats). `token_nll` / `reference_token_nll` hold each scored token's
    negative log-likelihood in text order, `token_kl` its KL divergence, for paired comparisons of two
    builds on the same tokens."""

    tokens: int
    windows: int
    nll: float
    reference_nll: float | None = None
    top1_agreement: float | None = None
    kl: float | None = None
    token_nll: np.ndarray | None = None
    reference_token_nll: np.ndarray | None = None
    token_kl: np.ndarray | None = None

    @property
    def change_stderr(self) -> float | None:
        """The standard error of the relative perplexity change against the reference: the per-token
        differences' standard error of the mean, as a fraction of perplexity. Tokens are taken as
        independent (neighbouring tokens are not quite), so read it as a lower bound of the noise: a
        change within about two of these of another build's is not a measured difference."""
        if self.reference_token_nll is None:
            return None
        d = self.token_nll - self.reference_token_nll
        return float(math.exp(d.mean()) * d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else None

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    @property
    def reference_perplexity(self) -> float | None:
        return None if self.reference_nll is None else math.exp(self.reference_nll)

    def summary(self) -> str:
        line = f"perplexity {self.perplexity:.3f} over {self.tokens} tokens ({self.windows} windows)"
        if self.reference_nll is not None:
            rel = self.perplexity / self.reference_perplexity - 1
            line += (
                f"; float model {self.reference_perplexity:.3f} ({rel:+.2%} +- {self.change_stderr or 0:.2%}), "
                f"top-1 agreement "
                f"{self.top1_agreement:.2%}, KL {self.kl:.4f} nats/token"
            )
        return line


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def windows(n: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored target) of each window over n tokens: targets [first, end) are scored
    in window [begin, end), every target 1..n-1 exactly once."""
    out, scored = [], 1
    begin = 0
    while scored < n:
        end = min(begin + context, n)
        out.append((begin, end, scored))
        scored = end
        # the next window holds the token before its first target (a stride of max_context would not)
        begin = min(begin + stride, scored - 1)
    return out


def _window_logits(lm, ids: np.ndarray, step: str) -> np.ndarray:
    if step == "prefill":
        return lm.prefill(ids, all_logits=True)
    rows = [lm.prefill(ids[:1])]
    rows += [lm.decode(int(t)) for t in ids[1:-1]]
    return np.stack(rows + [rows[-1]])  # the last token's logits predict nothing in the window


def check_stride(stride, max_context: int) -> int:
    """The window step `perplexity` uses: `stride`, or half of `max_context` when None; ERR_INVALID_CONFIG
    for one that is not an integer from 1 to `max_context` (`tvm-npu eval` checks it before compiling)."""
    stride = max_context // 2 or 1 if stride is None else stride
    if isinstance(stride, bool) or not isinstance(stride, numbers.Integral) or not 1 <= stride <= max_context:
        raise NPUError("ERR_INVALID_CONFIG", f"stride={stride!r}: use an integer from 1 to max_context ({max_context})")
    return stride


def perplexity(
    lm,
    ids,
    stride: int | None = None,
    reference: Callable[[np.ndarray], np.ndarray] | None = None,
    step: str = "prefill",
    progress: bool = False,
) -> Evaluation:
    """Teacher-forced perplexity of `lm` (a compiled `tvm_npu.llm.LLM`) over the token ids `ids` (int64
    [n], n >= 2), measured on the NPU.

    Parameters
    ----------
    stride : int, optional
        Window step for a text longer than max_context (default max_context // 2); 1 <= stride <=
        max_context.
    reference : callable, optional
        `reference(window_ids) -> logits float32 [w, vocab]`: the float model on the same window (e.g.
        `tvm_npu.llm.reference.onnxruntime_logits(export)`); adds the agreement and the KL divergence.
    step : str
        "prefill" (the compiled prefill step, in its buckets) or "decode" (one decode step per token).
    progress : bool
        A progress bar over the windows.

    Raises NPUError(ERR_INVALID_CONFIG) for a text of fewer than 2 tokens, a stride out of range or an
    unknown step; token ids outside the vocabulary are ERR_LLM_TOKEN, as for `prefill`.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size < 2:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"perplexity needs a 1-D integer array of at least 2 token ids, not {ids.dtype} {list(ids.shape)} "
            "(an empty text, or one token, has nothing to predict)",
        )
    T = lm.max_context
    if T < 2:
        raise NPUError("ERR_INVALID_CONFIG", f"max_context {T}: a window of one token predicts nothing")
    stride = check_stride(stride, T)
    if step not in ("prefill", "decode"):
        raise NPUError("ERR_INVALID_CONFIG", f'step={step!r}: use "prefill" or "decode"')
    agree = 0
    token_nll, ref_token_nll, token_kl = [], [], []
    spans = windows(ids.size, T, stride)
    for begin, end, first in tqdm(spans, desc="perplexity", unit="window", disable=not progress):
        window = ids[begin:end].astype(np.int64)
        logp = _log_softmax(_window_logits(lm, window, step))
        rows = np.arange(first - 1 - begin, end - 1 - begin)  # logits at t predict the token at t + 1
        targets = window[rows + 1]
        token_nll.append(-logp[rows, targets])
        if reference is not None:
            ref = _log_softmax(np.asarray(reference(window), np.float32))
            ref_token_nll.append(-ref[rows, targets])
            agree += int((ref[rows].argmax(-1) == logp[rows].argmax(-1)).sum())
            token_kl.append((np.exp(ref[rows]) * (ref[rows] - logp[rows])).sum(-1, dtype=np.float64))
    token_nll = np.concatenate(token_nll)
    count = token_nll.size
    out = Evaluation(tokens=count, windows=len(spans), nll=float(token_nll.mean()), token_nll=token_nll)
    if reference is not None:
        out.reference_token_nll, out.token_kl = np.concatenate(ref_token_nll), np.concatenate(token_kl)
        out.reference_nll, out.top1_agreement = float(out.reference_token_nll.mean()), agree / count
        out.kl = float(out.token_kl.mean())
    return out
