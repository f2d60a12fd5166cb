"""Both steps of an LLM in one Relax VM executable: entry functions "prefill" and "decode", and "llm_meta"
(the linking itself is link.py's, shared with the diffusion pipeline).

Each step runs the NPU flow through codegen on its own (build.run_stages: its kv_cache stage needs the
step's metadata, its report is its own), then the two are merged into one module and lowered for the
CPU once, so one `tvm_npu.export_library` writes one library:

- `prefill(input_ids [1, S], position [1], ...)` and `decode(input_ids [1, 1], position [1], ...)`: the
  two steps' `main`s. When one step model at seq_len 1 serves both, `prefill` calls `decode`.
- `llm_meta() -> str`: the LLM's metadata as JSON (what `tvm_npu.llm.load` and the C++ host app need:
  the step info, prefill bucket, NPU configuration, placements, region layers).

Each region is renamed `<step>_<symbol>`. Their weight regions are usually the same bytes ([N][K]
weights do not depend on the row count): the runtime keeps one copy of each in memory, and the library
holds them once: a decode region whose weights a prefill region carries is written with its weights by
reference (docs/llm.md, "The artifact").
"""

from __future__ import annotations

from .. import link as linker

META_FUNCTION = "llm_meta"
FORMAT = 2  # of the LLM artifact (llm/bundle.py); 1 was a tar of two libraries
STEPS = ("prefill", "decode")
step_prefix = linker.prefix


def build_steps(pairs: list, cfg, kv: dict | None) -> tuple[dict, dict]:
    """Run the NPU flow through codegen on each (step, module, info) of `pairs`: ({step: (entry
    function, runtime modules, kernels)}, {step: BuildReport}). `kv` is {"state_space": k} for a resident
    cache (each step's metadata is added), None for a host-held one."""
    return linker.build_entries(pairs, cfg, kv)


def link(built: dict, meta: dict):
    """One executable from build_steps's entry functions and the metadata (see the module docstring)."""
    aliases = {"prefill": "decode"} if "prefill" not in built else None
    return linker.link(built, STEPS, META_FUNCTION, meta, aliases)
