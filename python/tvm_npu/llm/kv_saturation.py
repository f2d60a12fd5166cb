"""Saturation of the int8 KV cache, counted per layer, K / V and KV head (docs/llm.md, "An int8 KV cache").

A value of a head's new K or V rows beyond the head's calibrated range is written by the runtime's quantized
staging (format 1.3) as `clamp(round_half_even(fp32(x / s)), -128, 127)`: it saturates. The staging clamps
without counting (the runtime's `saturated_inputs` count the fp16 staging only, docs/npu.md section 2), and
each head's rows are a region input of their own, so the LLM counts them on the host: a VM instrument
(`relax.VirtualMachine.set_instrument`) sees the arguments of every call of an attention region before it
runs (q, then the new K rows of KV heads 0 .. H_kv - 1, then the V rows, float32: backend/plan/kv_plan.py)
and counts, with the staging's own formula, the values whose code falls outside [-128, 127] (NaN too: it is
written as 127). Only the rows of real tokens count: not a prefill chunk's padding, nor the rows a moved
last chunk writes again.

After each prefill and decode, a layer and KV head whose saturated fraction of the K and V values written
since the last prefill exceeds WARN_FRACTION gets a KVSaturationWarning naming it, once per LLM.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import one_library
from .step_runner import KV_SYMBOL

# A layer and KV head whose saturated K and V values pass this fraction of those written are warned about.
# Not the profiler's 0.1%: a few values at a head's calibrated maximum pass it anyway (the fp16 datapath and
# the int8 cache of the layers before move them; default calibration, random prompts like its own: at most
# 0.11% measured), while a calibration unlike the prompts saturates several % (docs/llm.md).
WARN_FRACTION = 1e-2
STEPS = ("prefill", "decode")


class KVSaturationWarning(UserWarning):
    """Values of an int8 KV cache beyond their head's calibrated range saturated (names the layer and head)."""


def saturation_counter(vm, meta: dict, steps: list):
    """The LLM's counter: for an int8 resident cache a SaturationCounter installed as `vm`'s instrument (the
    attention regions of the compiled `steps`, "prefill" / "decode"), else a NoCounter."""
    if meta.get("kv_cache") != "npu" or meta.get("kv_scales") is None:
        return NoCounter()
    layers = meta["step"]["layers"]
    symbols = {f"{one_library.step_prefix(s)}{KV_SYMBOL}{i}": i for s in steps for i in range(layers)}
    counter = SaturationCounter(meta["kv_scales"], symbols, meta["step"]["head_dim"])
    vm.set_instrument(counter.instrument)
    return counter


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

    `kv_scales` are the cache's scales [L][2][H_kv]; `symbols` maps each attention region's symbol (of both
    steps) to its layer. `expect(step, lo, hi)` says which step the next region calls belong to and which of
    their rows [lo, hi) are new tokens; `instrument` is the VM's instrument."""

    def __init__(self, kv_scales, symbols: dict, head_dim: int):
        self.scales = np.asarray(kv_scales, np.float32)
        self.symbols = symbols
        self.head_dim = head_dim
        self.warned: set = set()  # (layer, head) already warned about: once per LLM
        self.reset()
        self.expect("prefill", 0, 0)

    def reset(self) -> None:
        """Zero the counts of both steps (a new sequence)."""
        self.counts = {s: np.zeros(self.scales.shape, np.int64) for s in STEPS}
        self.written = dict.fromkeys(STEPS, 0)  # values written per layer, K / V and KV head

    def expect(self, step: str, lo: int, hi: int) -> None:
        self._step, self._rows = step, (lo, hi)

    def end_call(self) -> None:
        """One step call done: its new rows are written (in every layer, head, K and V)."""
        lo, hi = self._rows
        self.written[self._step] += (hi - lo) * self.head_dim

    def instrument(self, func, symbol, before_run, ret_value, *args) -> int:
        layer = self.symbols.get(symbol) if before_run else None
        if layer is not None:
            heads = self.scales.shape[2]
            lo, hi = self._rows
            for j in range(2):
                for h in range(heads):
                    x = args[1 + j * heads + h].numpy()[0, 0, lo:hi]
                    v = x / self.scales[layer, j, h]  # fp32 / fp32: the staging's one IEEE division
                    # round_half_even(v) in [-128, 127] exactly when -128.5 <= v < 127.5 (NaN fails both)
                    self.counts[self._step][layer, j, h] += int(np.count_nonzero(~((v >= -128.5) & (v < 127.5))))
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    def profile(self, step: str) -> dict:
        """`lm.profile()[step]`'s counters: kv_saturated [L][2][H_kv] (K, V), kv_values_written."""
        return {"kv_saturated": self.counts[step].tolist(), "kv_values_written": self.written[step]}

    def warn(self, stacklevel: int = 4) -> None:
        """KVSaturationWarning for each layer and KV head past WARN_FRACTION over the sequence (prefill and
        decodes since), not warned about before."""
        sat = self.counts["prefill"] + self.counts["decode"]
        written = self.written["prefill"] + self.written["decode"]
        if not written:
            return
        fraction = sat / written  # [L, 2, H_kv]
        new = [
            (layer, h)
            for layer in range(sat.shape[0])
            for h in range(sat.shape[2])
            if (sat[layer, 0, h] + sat[layer, 1, h]) > WARN_FRACTION * 2 * written and (layer, h) not in self.warned
        ]
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
