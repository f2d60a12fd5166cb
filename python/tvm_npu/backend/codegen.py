"""Stage 5 — codegen: the "relax.ext.npu" hook that RunCodegen calls.

For every function marked Codegen="npu" it runs lower -> plan -> encode and wraps the resulting command
stream (weights included) in a runtime module of kind "npu". The NPUConfig comes from the build (see
build.py); without one, the default preset is used.
"""

from __future__ import annotations

import contextlib
import logging

import tvm_ffi

from ..partition import report
from .. import runtime
from ..contract import stream
from ..contract.config import NPUConfig, get_config
from .lower import lower_function
from .plan.planner import plan
from .verify import verify

log = logging.getLogger(__name__)

_STATE = {"config": None, "streams": None, "layers": None}


@contextlib.contextmanager
def compiling(config: NPUConfig, streams: dict | None = None, layers: dict | None = None):
    """Compile NPU regions for `config`; when given, `streams` collects symbol -> Stream and `layers`
    symbol -> report.region_layers(...) (the layers and command -> layer map) for reports."""
    saved = dict(_STATE)
    _STATE.update(config=config, streams=streams, layers=layers)
    try:
        yield
    finally:
        _STATE.update(saved)


def compile_region(func, config: NPUConfig):
    """One NPU region -> (lowered graph, planned stream, encoded blob)."""
    graph = lower_function(func)
    planned = plan(config, graph)
    # The planner's safety net: a hazard or a bad address is a compiler bug, caught here rather than
    # as a wrong answer on the device (cheap: linear in the stream's length).
    verify(planned)
    blob = stream.encode(planned)
    log.info("npu region %s: %d layers, %d commands, %d weight bytes", graph.symbol,
             len(graph.layers), len(planned.commands), len(planned.weights))
    return graph, planned, blob


@tvm_ffi.register_global_func("relax.ext.npu", override=True)
def _relax_ext_npu(functions, options, constant_names):  # noqa: ARG001 - signature fixed by RunCodegen
    config = _STATE["config"] or get_config()
    modules = []
    for func in functions:
        graph, planned, blob = compile_region(func, config)
        symbol = graph.symbol
        if _STATE["streams"] is not None:
            _STATE["streams"][symbol] = planned
        if _STATE["layers"] is not None:
            _STATE["layers"][symbol] = report.region_layers(config, graph, planned)
        modules.append(runtime.create_module(symbol, blob))
    return modules
