"""Saturation of the int8 KV cache, counted per layer, K / V and KV head (docs/llm.md, "An int8 KV cache").

A value of a head's new K or V rows beyond the head's calibrated range is written by the runtime's quantized
staging (format 1.3) as `clamp(round_half_even(fp32(x / s)), -128, 127)`: it saturates. Each head's rows are
a region input of their own (q, then the new K rows of KV heads 0 .. H_kv - 1, then the V rows:
backend/plan/kv_plan.py), and the staging counts the values it clamps per input (NaN too: it is written as
127), summed over the calls since the step's `begin()` (its "clamped_inputs", docs/npu.md section 2): the
counter reads those sums after each call, one function call per attention region. Only the rows of real
tokens count: a call whose new tokens are not all of its rows (a prefill chunk's padding at its end, the
rows a moved last chunk writes again at its start) has its other rows' counts taken off, read from the
region's profile, which has the last call's counts per row ("clamped_rows").

After each prefill and decode, a layer and KV head whose saturated fraction of the K and V values written
since the last prefill exceeds WARN_FRACTION gets a KVSaturationWarning naming it, once per LLM.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import runtime

# A layer and KV head whose saturated K and V values pass this fraction of those written are warned about.
# Not the profiler's 0.1%: a few values at a head's calibrated maximum pass it anyway (the fp16 datapath and
# the int8 cache of the layers before move them; default calibration, random prompts like its own: at most
# 0.11% measured), while a calibration unlike the prompts saturates several % (docs/llm.md).
WARN_FRACTION = 1e-2
STEPS = ("prefill", "decode")


class KVSaturationWarning(UserWarning):
    """Values of an int8 KV cache beyond their head's calibrated range saturated (names the layer and head)."""


def saturation_counter(runners: dict, meta: dict):
    """The LLM's counter: for an int8 resident cache a SaturationCounter over the attention regions of
    `runners` ("prefill" / "decode" -> StepRunner), else a NoCounter."""
    if meta.get("kv_cache") != "npu" or meta.get("kv_scales") is None:
        return NoCounter()
    return SaturationCounter(meta["kv_scales"], runners, meta["step"]["head_dim"])


class NoCounter:
    """A cache that does not saturate this way (fp16, host-held): nothing counted, nothing said."""

    def reset(self) -> None:
        pass

    def expect(self, step: str, lo: int, hi: int) -> None:
        pass

    def end_call(self) -> None:
        pass

    def warn(self) -> None:
        pass

    def profile(self, step: str) -> dict:
        return {"kv_saturated": None, "kv_values_written": 0}


class SaturationCounter:
    """Saturated values of the int8 cache per step, layer, K / V and KV head.

    `kv_scales` are the cache's scales [L][2][H_kv]; `runners` the steps' StepRunners, whose attention
    regions (`kv_modules`, by layer) count what their staging clamped. `expect(step, lo, hi)` says which
    step the next call is and which of its rows [lo, hi) are new tokens; `end_call()` reads the counts."""

    def __init__(self, kv_scales, runners: dict, head_dim: int):
        self.scales = np.asarray(kv_scales, np.float32)
        self.head_dim = head_dim
        heads = self.scales.shape[2]
        # Per step: each layer's region, its count reader (fetched once: a lookup costs as much as a call)
        # and its rows a call; the K and V inputs of head h are 1 + h and 1 + H_kv + h.
        self._regions = {
            step: [(m, m["clamped_inputs"]) for _, m in sorted(runner.kv_modules.items())]
            for step, runner in runners.items()
        }
        self._call_rows = {step: runner.info["seq_len"] for step, runner in runners.items()}
        self._inputs = slice(1, 1 + 2 * heads)
        self.warned: set = set()  # (layer, head) already warned about: once per LLM
        self.reset()
        self.expect("prefill", 0, 0)

    def reset(self) -> None:
        """Zero the counts of both steps (a new sequence; the step's `begin()` zeroes the regions' sums)."""
        self.counts = {s: np.zeros(self.scales.shape, np.int64) for s in STEPS}
        self._excluded = {s: np.zeros(self.scales.shape, np.int64) for s in STEPS}  # rows not new tokens
        self.written = dict.fromkeys(STEPS, 0)  # values written per layer, K / V and KV head

    def expect(self, step: str, lo: int, hi: int) -> None:
        self._step, self._rows = step, (lo, hi)

    def end_call(self) -> None:
        """One step call done: its new rows are written (in every layer, head, K and V); the counts are
        the regions' sums since `begin()` less their rows that were no new tokens."""
        step, (lo, hi) = self._step, self._rows
        self.written[step] += (hi - lo) * self.head_dim
        shape = self.scales.shape
        if lo > 0 or hi < self._call_rows[step]:
            for layer, (module, _) in enumerate(self._regions[step]):
                rows = runtime.profile_of(module)["last"]["clamped_rows"][self._inputs]
                off = [sum(c for r, c in per_row if not lo <= r < hi) for per_row in rows]
                self._excluded[step][layer] += np.reshape(off, shape[1:])
        sums = [n for _, read in self._regions[step] for n in tuple(read())[self._inputs]]
        self.counts[step] = np.array(sums, np.int64).reshape(shape) - self._excluded[step]

    def profile(self, step: str) -> dict:
        """`lm.profile()[step]`'s counters: kv_saturated [L][2][H_kv] (K, V), kv_values_written."""
        return {"kv_saturated": self.counts[step].tolist(), "kv_values_written": self.written[step]}

    def warn(self, stacklevel: int = 4) -> None:
        """KVSaturationWarning for each layer and KV head past WARN_FRACTION over the sequence (prefill and
        decodes since), not warned about before."""
        sat = self.counts["prefill"] + self.counts["decode"]
        written = self.written["prefill"] + self.written["decode"]
        past = sat.sum(axis=1) > WARN_FRACTION * 2 * written  # [L, H_kv]: K and V together
        if not written or not past.any():  # every decode step asks: the common answer is cheap
            return
        fraction = sat / written  # [L, 2, H_kv]
        new = [(layer, h) for layer, h in map(tuple, np.argwhere(past).tolist()) if (layer, h) not in self.warned]
        if not new:
            return
        self.warned.update(new)
        heads = "; ".join(
            f"layer {layer} KV head {h}: keys {100 * fraction[layer, 0, h]:.2f}%, values "
            f"{100 * fraction[layer, 1, h]:.2f}% of the {written} written"
            for layer, h in new
        )
        warnings.warn(
            f"int8 KV cache: values beyond the calibrated range saturated to -128 / 127 (more than "
            f"{100 * WARN_FRACTION:g}% of a head's K and V values since the prefill) in {heads}. The logits "
            "lose accuracy: compile with calibration=[prompts like these] (token id arrays), or "
            "kv_dtype='float16'. Counts per layer, K / V and head: lm.profile()[step]['kv_saturated']",
            KVSaturationWarning,
            stacklevel=stacklevel,
        )
