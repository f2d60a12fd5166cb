"""The source map: which layer each command of each NPU region came from, kept in the library.

The command stream has no room for it (its bytes are the contract, docs/npu.md section 6), so the map
is a side table: a Relax function `npu_source_map() -> str` added next to `main`, whose JSON survives
`export_library` and `load_module` like any constant of the VM. `tvm-npu disasm` (tools/disasm.py)
reads it to say, per command, the layer and pattern it belongs to:

    {"format": 1, "regions": {symbol: {"layers": [{"name", "composite", "kind"}, ...],
                                       "command_layers": [layer name per command, "" for END]}}}
"""

from __future__ import annotations

import json

import tvm
from tvm import relax

from ..ir.graph import BLOCK_BUILDER_LOCK

FUNCTION = "npu_source_map"
FORMAT = 1


def source_map(layers: dict) -> dict:
    """The map of a build's regions from codegen's symbol -> report.region_layers(...)."""
    regions = {
        sym: {
            "layers": [{k: lay.get(k, "") for k in ("name", "composite", "kind")} for lay in info.get("layers", [])],
            "command_layers": list(info.get("command_layers", [])),
        }
        for sym, info in layers.items()
    }
    return {"format": FORMAT, "regions": regions}


def attach(mod: tvm.IRModule, layers: dict) -> tvm.IRModule:
    """`mod` with the function `npu_source_map` returning the map of `layers` (nothing added when the
    build has no NPU region, or a function of that name exists already)."""
    if not layers or any(gv.name_hint == FUNCTION for gv in mod.get_global_vars()):
        return mod
    with BLOCK_BUILDER_LOCK:
        bb = relax.BlockBuilder()
        with bb.function(FUNCTION, []):
            bb.emit_func_output(tvm.ir.StringImm(json.dumps(source_map(layers), sort_keys=True)))
        func = bb.get()[FUNCTION]
    mod = mod.clone()  # a pass leaves its input as it was
    mod[FUNCTION] = func
    return mod
