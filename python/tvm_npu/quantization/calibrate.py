"""Calibration observers: the range [lo, hi] of a tensor over calibration batches, and int8 parameters.

Three methods, as in TensorRT and onnxruntime:

- ``minmax``: the exact minimum and maximum seen.
- ``percentile``: the ``100 - p`` and ``p`` percentiles of all values seen (default p = 99.99), which
  ignores a few outliers.
- ``entropy``: TensorRT's histogram method: the clipping threshold ``T`` on ``|x|`` that minimises the
  KL divergence between the float distribution and its int8-quantized version; the range is then the
  observed range clipped to ``[-T, T]``.

Percentile and entropy keep a histogram anchored at 0 whose bin width doubles when a batch falls
outside it. Doubling merges pairs of bins exactly, so one pass over the batches suffices (the
calibration data may be a generator) and memory stays constant, whatever the number of batches.
"""

from __future__ import annotations

import numpy as np

from ..contract.errors import NPUError

METHODS = ("minmax", "percentile", "entropy")
INT8_MIN, INT8_MAX = -128, 127
#: the smallest weight scale: an all-zero channel must not give scale 0 (dequantize divides by it)
MIN_SCALE = 1e-8


class MinMaxObserver:
    """The exact minimum and maximum over all batches."""

    def __init__(self):
        self.lo, self.hi = np.inf, -np.inf
        self.count = 0
        self.finite = True

    def update(self, x) -> None:
        """Add a batch (any shape)."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size == 0:
            return
        if not np.all(np.isfinite(x)):
            # a NaN/inf activation cannot be given an int8 range: remember it, the op stays float
            self.finite = False
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        self.count += x.size

    def range(self) -> tuple[float, float]:
        """The observed range ``(lo, hi)``; ``(nan, nan)`` if nothing finite was seen."""
        if not self.finite or self.count == 0:
            return float("nan"), float("nan")
        return self.lo, self.hi


class _HistogramObserver(MinMaxObserver):
    """A signed histogram with ``2 * bins`` bins of width ``w`` covering ``[-bins * w, bins * w)``."""

    def __init__(self, bins: int = 2048):
        super().__init__()
        self.bins = int(bins)
        self.width = 0.0
        self.hist = np.zeros(2 * self.bins, dtype=np.int64)

    def update(self, x) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        super().update(x)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        amax = float(np.abs(x).max())
        if self.width == 0.0:
            # the first batch sets the resolution: its largest |x| lands in the last bin
            self.width = amax / self.bins if amax > 0 else 0.0
            if self.width == 0.0:
                self.hist[self.bins] += x.size  # all zeros: keep them in the bin [0, w) for later
                return
        while amax >= self.bins * self.width:
            self._double()
        idx = np.floor(x / self.width).astype(np.int64) + self.bins
        self.hist += np.bincount(np.clip(idx, 0, 2 * self.bins - 1), minlength=2 * self.bins)

    def _double(self) -> None:
        # bins [2k, 2k+1] relative to 0 merge into bin k: exact because the grid is anchored at 0
        b = self.bins
        pos, neg = self.hist[b:], self.hist[:b][::-1]  # neg[k] holds [-(k+1)w, -kw)
        newpos, newneg = np.zeros(b, np.int64), np.zeros(b, np.int64)
        newpos[: b // 2] = pos.reshape(-1, 2).sum(1)
        newneg[: b // 2] = neg.reshape(-1, 2).sum(1)
        self.hist = np.concatenate([newneg[::-1], newpos])
        self.width *= 2

    def _edges(self) -> np.ndarray:
        return (np.arange(2 * self.bins + 1) - self.bins) * self.width


class PercentileObserver(_HistogramObserver):
    """The ``100 - p`` and ``p`` percentiles of all values seen (linear inside a histogram bin).

    Parameters
    ----------
    percentile : float
        ``p`` in (50, 100]; 100 gives the min-max range.
    bins : int
        Bins per sign; the error is at most about one bin width, ``max|x| / bins``.
    """

    def __init__(self, percentile: float = 99.99, bins: int = 4096):
        super().__init__(bins)
        if not 50.0 < percentile <= 100.0:
            raise NPUError("ERR_INVALID_CONFIG", f"percentile must be in (50, 100], got {percentile}")
        self.percentile = float(percentile)

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if np.isnan(lo) or self.width == 0.0 or lo == hi:
            return lo, hi
        p = self.percentile
        return (max(lo, self._quantile(100.0 - p)), min(hi, self._quantile(p)))

    def _quantile(self, q: float) -> float:
        # numpy's default: the value at rank q/100 * (n - 1) of the sorted data; inside the bin that
        # holds that rank, the values are taken as evenly spread (midpoints of count sub-bins)
        cum = np.cumsum(self.hist)
        rank = q / 100.0 * (cum[-1] - 1)
        k = int(np.searchsorted(cum, rank, side="right"))
        before = cum[k - 1] if k > 0 else 0
        frac = (rank - before + 0.5) / self.hist[k]
        return float(self._edges()[k] + frac * self.width)


class EntropyObserver(_HistogramObserver):
    """TensorRT's entropy calibration: the threshold on ``|x|`` with the least KL divergence.

    Parameters
    ----------
    bins : int
        Bins per sign of the histogram (TensorRT uses 2048 over ``[0, max|x|]``).
    """

    def range(self) -> tuple[float, float]:
        lo, hi = super().range()
        if np.isnan(lo) or self.width == 0.0 or lo == hi:
            return lo, hi
        # one-signed data (e.g. after relu) maps onto all 256 int8 levels, two-signed onto 128 a side
        levels = 128 if (lo < 0 < hi) else 256
        t = self.threshold(levels)
        return max(lo, -t), min(hi, t)

    def threshold(self, levels: int = 128) -> float:
        """The clipping threshold ``T`` for ``|x|`` quantized onto ``levels`` levels."""
        b = self.bins
        hist = (self.hist[b:] + self.hist[:b][::-1]).astype(np.float64)  # |x|: fold exactly at 0
        used = int(np.nonzero(hist)[0].max()) + 1
        if used <= levels:
            return used * self.width  # fewer bins than levels: nothing to gain by clipping
        hist = hist[:used]
        best_i, best_kl = used, np.inf
        for i in range(levels, used + 1):
            kl = _kl_of_threshold(hist, i, levels)
            if kl < best_kl:
                best_i, best_kl = i, kl
        return best_i * self.width


def _kl_of_threshold(hist: np.ndarray, i: int, levels: int) -> float:
    """KL(P || Q): P = the first i bins with the clipped tail folded into the last, Q = the first i
    bins merged into `levels` groups and spread back evenly over each group's non-empty bins."""
    p = hist[:i].copy()
    p[-1] += hist[i:].sum()
    nonzero = hist[:i] != 0
    starts = (np.arange(levels) * i) // levels  # groups of (nearly) equal size, as TensorRT
    sums = np.add.reduceat(hist[:i], starts)
    counts = np.add.reduceat(nonzero.astype(np.float64), starts)
    group = np.repeat(np.arange(levels), np.diff(np.append(starts, i)))
    q = np.where(nonzero, (sums / np.maximum(counts, 1))[group], 0.0)
    mask = p > 0
    if np.any(mask & (q == 0)):
        return np.inf  # P has mass where Q has none: infinite divergence
    p, q = p[mask] / p.sum(), q[mask] / q.sum()
    return float(np.sum(p * np.log(p / q)))


def make_observer(method: str = "minmax", percentile: float = 99.99):
    """A fresh observer: feed it batches with ``update(x)``, read ``range() -> (lo, hi)``.

    Parameters
    ----------
    method : str
        "minmax", "percentile" or "entropy".
    percentile : float
        The upper percentile of the "percentile" method (the lower one is ``100 - percentile``).

    Returns
    -------
    MinMaxObserver or PercentileObserver or EntropyObserver
    """
    if method == "minmax":
        return MinMaxObserver()
    if method == "percentile":
        return PercentileObserver(percentile)
    if method == "entropy":
        return EntropyObserver()
    raise NPUError("ERR_INVALID_CONFIG", f"unknown calibration method {method!r}; expected one of {METHODS}")


def activation_qparams(lo: float, hi: float) -> tuple[float, int] | None:
    """Asymmetric per-tensor int8 parameters for an observed range.

    The range is widened to include 0, so that real 0 (padding, relu's floor) is exact:
    ``scale = (hi - lo) / 255``, ``zp = round(-128 - lo / scale)`` clipped to [-128, 127].

    Parameters
    ----------
    lo, hi : float
        The observed range.

    Returns
    -------
    (float, int) or None
        ``(scale, zero_point)`` (the scale rounded to float32), or None if the range is empty or not
        finite: such a tensor cannot be quantized.
    """
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo <= 0.0:
        return None
    scale = np.float32((hi - lo) / 255.0)
    if scale <= 0:
        return None  # below float32's range
    zp = int(np.clip(np.round(INT8_MIN - lo / float(scale)), INT8_MIN, INT8_MAX))
    return float(scale), zp


def wide_qparams(lo: float, hi: float) -> tuple[float, int] | None:
    """Symmetric per-tensor int16 parameters (zero point 0, TFLite's 16-bit activations) for an observed
    range: ``scale = max(|lo|, |hi|) / 32767``; None if the range is empty or not finite."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    scale = np.float32(max(abs(float(lo)), abs(float(hi))) / 32767.0)
    return (float(scale), 0) if scale > 0 else None


def weight_scales(w: np.ndarray, axis: int) -> np.ndarray:
    """Symmetric per-channel int8 scales.

    Parameters
    ----------
    w : numpy.ndarray
        A float weight.
    axis : int
        The channel axis (0 for OIHW convolution weights).

    Returns
    -------
    numpy.ndarray
        float32 ``max|w[c]| / 127`` per channel ``c``, at least `MIN_SCALE` (an all-zero channel).
    """
    w = np.asarray(w, dtype=np.float32)
    amax = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
    return np.maximum(amax / np.float32(INT8_MAX), np.float32(MIN_SCALE)).astype(np.float32)


def quantize_weight(w: np.ndarray, scales: np.ndarray, axis: int) -> np.ndarray:
    """int8 ``round(w / scales[c])`` per channel `c` along `axis`, clipped to [-127, 127] (symmetric).

    Parameters
    ----------
    w : numpy.ndarray
        A float weight.
    scales : numpy.ndarray
        One scale per channel, e.g. from `weight_scales`.
    axis : int
        The channel axis.

    Returns
    -------
    numpy.ndarray
        The int8 weight, shaped as `w`.
    """
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.round(w.astype(np.float32) / scales.reshape(shape).astype(np.float32))
    return np.clip(q, -INT8_MAX, INT8_MAX).astype(np.int8)
