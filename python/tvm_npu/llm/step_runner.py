"""One compiled step (prefill or decode): its Relax VM, its NPU modules and what one call cost on them.

The cache is not held here: a call takes the cache tensors and returns the new ones (the step model's
outputs), so a call that fails leaves the caller's cache as it was.
"""

from __future__ import annotations

import time

import numpy as np
import tvm
from tvm import relax

from .. import runtime


class StepRunner:
    """A compiled step model: `run(ids [1, S], position, cache)` -> (logits [S, vocab], new cache).

    `regions` is the build report's region summaries (symbol -> {"command_layers", "layers", ...}),
    kept to weigh each command's MACs by its layer's dtype for the MAC utilization."""

    def __init__(self, executable, info: dict, regions: dict, config: dict):
        self.executable = executable
        self.info = info
        self.regions = regions
        self.config = config
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        self.modules = runtime.npu_modules(self.vm)
        self.last: dict = {}  # the counters of the last call (see `_counters`)

    def run(self, ids: np.ndarray, position: int, cache: list) -> tuple[np.ndarray, list]:
        for m in self.modules:
            m["reset_profile"]()
        args = [tvm.runtime.tensor(ids), tvm.runtime.tensor(np.array([position], np.int64)), *cache]
        start = time.perf_counter()
        out = self.vm["main"](*args)
        logits = out[0].numpy()[0]
        self.last = self._counters(time.perf_counter() - start)
        return logits, [out[i] for i in range(1, len(out))]

    def _counters(self, host_s: float) -> dict:
        """What the last call cost on the NPU regions (the cycle model; CPU ops are not in the cycles):
        cycles, DDR bytes read + written, MACs and MAC slots (an fp16 MAC fills fp16_rate_div int8
        slots, as tools/profiler.py counts them), and the host's wall time."""
        cycles = ddr = macs = slot_macs = 0
        for m in self.modules:
            prof = runtime.profile_of(m)
            if not prof["calls"]:
                continue
            total = prof["total"]
            cycles += total["total_cycles"]
            ddr += total["ddr_read_bytes"] + total["ddr_write_bytes"]
            macs += total["macs"]
            region = self.regions.get(prof["symbol"], {})
            dtypes = {lay["name"]: lay["dtype"] for lay in region.get("layers", [])}
            notes = region.get("command_layers", [])
            for r in prof["last"]["records"]:
                dtype = dtypes.get(notes[r["index"]]) if r["index"] < len(notes) else None
                slot_macs += r["macs"] * (self.config["fp16_rate_div"] if dtype == "float16" else 1)
        return {"cycles": cycles, "ddr_bytes": ddr, "macs": macs, "slot_macs": slot_macs, "host_s": host_s}


def add_counters(a: dict, b: dict) -> dict:
    """The counters of two calls together (the chunks of one prefill)."""
    return {k: a.get(k, 0) + b[k] for k in b}
