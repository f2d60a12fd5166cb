"""Stage 5 — codegen: the "relax.ext.npu" hook that RunCodegen calls.

For every function marked Codegen="npu" it runs lower -> plan -> encode and wraps the resulting command
stream (weights included) in a runtime module of kind "npu". TVM calls the hook with only (functions,
options, constant_names), so a build hands its NPUConfig and the dicts that collect its plans to the hook
inside RunCodegen's options (`run_codegen`): one build's codegen never sees another's, even when two
run at once. A plain `RunCodegen()` compiles for the default preset.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax

from .. import runtime
from ..contract import stream
from ..contract.config import NPUConfig, get_config
from ..contract.errors import SRAMFragmentationWarning
from ..partition import report
from .lower import lower_function
from .plan import sram_usage
from .plan.cost_model import estimate
from .plan.planner import plan
from .verify import verify

log = logging.getLogger(__name__)

# The key of the options RunCodegen passes to the hook under which a build puts its CodegenRun.
OPTION = "tvm_npu.run"


@dataclass(frozen=True)
class CodegenRun:
    """What one build compiles its regions for, and where it collects them for reports."""

    config: NPUConfig
    streams: dict | None = None  # symbol -> the planned Stream
    layers: dict | None = None  # symbol -> report.region_layers(...): the layers, command -> layer map
    compiled: dict | None = None  # symbol -> compile_region(...) done already (fallback.compile_regions)


def run_codegen(
    mod: tvm.IRModule,
    config: NPUConfig,
    streams: dict | None = None,
    layers: dict | None = None,
    compiled: dict | None = None,
) -> tvm.IRModule:
    """RunCodegen for `config`: every NPU region becomes a runtime module.

    Parameters
    ----------
    mod : tvm.IRModule
        The partitioned module (partition.partition_for_npu).
    config : NPUConfig
        The NPU to compile for.
    streams, layers : dict, optional
        When given, receive symbol -> planned Stream and symbol -> report.region_layers(...).
    compiled : dict, optional
        symbol -> compile_region's result for regions compiled already (not compiled again).

    Returns
    -------
    tvm.IRModule
        `main` calling the regions' runtime modules (attribute external_mods).
    """
    # tvm-ffi passes a Python object through a Map as it is (an opaque object), so the hook gets the
    # CodegenRun itself: no registry of live builds is needed to find it.
    options = {"npu": {OPTION: CodegenRun(config, streams, layers, compiled)}}
    return relax.transform.RunCodegen(options)(mod)


def compile_region(func, config: NPUConfig):
    """One NPU region -> (lowered graph, planned stream, encoded blob)."""
    graph = lower_function(func)
    planned = plan(config, graph)
    # The planner's safety net: a hazard or a bad address is a compiler bug, caught here rather than
    # as a wrong answer on the device (cheap: linear in the stream's length).
    verify(planned)
    blob = stream.encode(planned)
    log.info(
        "npu region %s: %d layers, %d commands, %d weight bytes",
        graph.symbol,
        len(graph.layers),
        len(planned.commands),
        len(planned.weights),
    )
    _log_sram(config, graph, planned)
    return graph, planned, blob


def _log_sram(config: NPUConfig, graph, planned) -> None:
    """The region's SRAM use in the compile log (cost-model cycles per command; sram_usage.py), and a
    warning for each place fragmentation cost the plan something (fragmentation.py)."""
    info = getattr(planned, "info", {})
    if "sram_allocations" not in info:
        return  # planned elsewhere (a KV-cache attention step, kv_plan.py): no allocation list
    durations = [end - start for _, start, end in estimate(config, planned.commands).schedule]
    use = sram_usage.usage(
        info["sram_allocations"],
        info["layer_first_command"],
        [c.note for c in planned.commands],
        durations,
        config.sram_bytes,
    )
    order = [layer.name for layer in graph.layers if layer.name in use["layers"]]  # the layers' order
    order += [n for n in use["layers"] if n not in order]
    for name, u in [(f"region {graph.symbol}", use), *((f"layer {n}", use["layers"][n]) for n in order)]:
        log.info(
            "npu %s: SRAM peak %d of %d B (%.1f%%), time-weighted %.1f%%; at the peak %d B free, "
            "largest free block %d B",
            name,
            u["peak_bytes"],
            config.sram_bytes,
            100 * u["peak_utilization"],
            100 * u["time_weighted_utilization"],
            u["free_bytes_at_peak"],
            u["largest_free_block_at_peak"],
        )
    for finding in info.get("sram_fragmentation", ()):  # in the log beside the numbers; the warning says it once
        log.info("npu %s", finding["message"])
        warnings.warn(finding["message"], SRAMFragmentationWarning, stacklevel=2)


@tvm_ffi.register_global_func("relax.ext.npu", override=True)
def _relax_ext_npu(functions, options, constant_names):  # noqa: ARG001 - signature fixed by RunCodegen
    run = options.get(OPTION) if options is not None else None
    if run is None:  # RunCodegen() without run_codegen's options
        run = CodegenRun(get_config())
    modules = []
    for func in functions:
        done = (run.compiled or {}).get(str(func.attrs["global_symbol"]))
        graph, planned, blob = done if done is not None else compile_region(func, run.config)
        symbol = graph.symbol
        if run.streams is not None:
            run.streams[symbol] = planned
        if run.layers is not None:
            run.layers[symbol] = report.region_layers(run.config, graph, planned)
        modules.append(runtime.create_module(symbol, blob))
    return modules
