"""One compiled step (prefill or decode): its entry function in the LLM's VM, its NPU modules and what one
call cost on them.

Two kinds of step (docs/llm.md, "The cache on the NPU"):
- resident (the default): the cache is the state of the step's attention regions, shared with the other
  step through their state space; a call takes the ids and the position only.
- host-held: a call takes the cache tensors and returns the new ones (the step model's outputs), so a
  call that fails leaves the caller's cache as it was.
"""

from __future__ import annotations

import time

import numpy as np
import tvm

from .. import runtime

KV_SYMBOL = "tvm_npu_kv_attention_"  # backend/kv_cache.py's region symbols, then the layer


class StepRunner:
    """A compiled step model: `run(ids [1, S], position, cache)` -> (logits [S, vocab], new cache).

    `function` is the step's entry function of `vm` (the LLM's one VM), `modules` the NPU modules of `vm`
    and `prefix` the symbol prefix of this step's regions (llm/one_library.py). `regions` is the build
    report's region summaries (symbol -> {"command_layers", "layers", ...}), kept to weigh each command's
    MACs by its layer's dtype for the MAC utilization."""

    def __init__(
        self,
        vm,
        function: str,
        modules: list,
        prefix: str,
        info: dict,
        regions: dict,
        config: dict,
        resident=False,
        kv_scales=None,
    ):
        self.function = vm[function]
        self.info = info
        self.regions = regions
        self.config = config
        self.resident = resident
        self.kv_scales = kv_scales  # an int8 cache's [layers][2][kv_heads] scales; None for fp16
        self.modules = [m for m in modules if runtime.profile_of(m)["symbol"].startswith(prefix)]
        # The attention regions by layer: their state slots (2i, 2i + 1) are layer i's keys and values.
        self.kv_modules = {}
        for m in self.modules:
            symbol = runtime.profile_of(m)["symbol"][len(prefix) :]
            if symbol.startswith(KV_SYMBOL):
                self.kv_modules[int(symbol[len(KV_SYMBOL) :])] = m
        # What the calls since `begin()` cost: host wall time and KV bytes summed here, the cycle-model
        # counters summed by each module (its profile's "total"), read only by `counters()`: reading a
        # module's profile costs more host time than a decode step's NPU work.
        self._host_s = 0.0
        self._kv_bytes = 0

    def begin(self) -> None:
        """Start counting: `counters()` covers the calls from here on."""
        for m in self.modules:
            m["reset_profile"]()
        self._host_s, self._kv_bytes = 0.0, 0

    def run(self, ids: np.ndarray, position: int, cache: list) -> tuple[np.ndarray, list]:
        args = [tvm.runtime.tensor(ids), tvm.runtime.tensor(np.array([position], np.int64))]
        args += [] if self.resident else cache
        start = time.perf_counter()
        out = self.function(*args)
        logits = out[0].numpy()[0]
        self._host_s += time.perf_counter() - start
        if self.resident:  # K and V rows [0, position + S) read per layer and KV head, D * 2 or D bytes each
            i, el = self.info, 1 if self.kv_scales is not None else 2
            self._kv_bytes += 2 * i["layers"] * i["kv_heads"] * (position + ids.shape[1]) * i["head_dim"] * el
        return logits, [out[i] for i in range(1, len(out))]

    def reset_state(self) -> None:
        """Zero the resident cache (every module of the state space sees it)."""
        for m in self.kv_modules.values():
            m["reset_state"]()

    def state(self, layers: int, shape: tuple) -> list[np.ndarray]:
        """The resident cache as float32 copies [key 0, value 0, key 1, ...] of `shape` each (an int8
        cache's codes times their head's scale, as the MATMULs read them)."""
        out = []
        for i in range(layers):
            for j, slot in enumerate((2 * i, 2 * i + 1)):
                raw = bytes(self.kv_modules[i]["get_state"](slot))
                if self.kv_scales is None:
                    out.append(np.frombuffer(raw, np.float16).astype(np.float32).reshape(shape))
                    continue
                codes = np.frombuffer(raw, np.int8).astype(np.float32).reshape(shape)
                out.append(codes * np.asarray(self.kv_scales[i][j], np.float32)[None, :, None, None])
        return out

    def counters(self) -> dict:
        """What the calls since `begin()` cost on the NPU regions (the cycle model; CPU ops are not in the
        cycles): cycles, DDR bytes read + written, MACs and MAC slots (an fp16 MAC fills fp16_rate_div int8
        slots, as tools/profiler.py counts them), the host's wall time and, with the cache resident, the KV
        bytes read."""
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
            for index, command_macs in enumerate(total["command_macs"]):
                dtype = dtypes.get(notes[index]) if index < len(notes) else None
                slot_macs += command_macs * (self.config["fp16_rate_div"] if dtype == "float16" else 1)
        out = {"cycles": cycles, "ddr_bytes": ddr, "macs": macs, "slot_macs": slot_macs, "host_s": self._host_s}
        if self.resident:
            out["kv_bytes"] = self._kv_bytes
        return out
