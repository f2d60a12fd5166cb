"""Stage 5 — codegen: the "relax.ext.npu" hook that RunCodegen calls.

For every function marked Codegen="npu" it runs lower -> plan -> encode and wraps the resulting command
stream (weights included) in a runtime module of kind "npu". The NPUConfig comes from the build (see
build.py); without one, the default preset is used.
"""

from __future__ import annotations

import contextlib
import logging

import tvm_ffi

from . import runtime, stream
from .config import NPUConfig, get_config
from .lower import lower_function
from .plan import plan

log = logging.getLogger(__name__)

_STATE = {"config": None, "streams": None}


@contextlib.contextmanager
def compiling(config: NPUConfig, streams: dict | None = None):
    """Compile NPU regions for `config`; when given, `streams` collects symbol -> Stream for reports."""
    saved = dict(_STATE)
    _STATE.update(config=config, streams=streams)
    try:
        yield
    finally:
        _STATE.update(saved)


def compile_function(func, config: NPUConfig) -> tuple[str, stream.Stream, bytes]:
    """One NPU region -> (symbol, planned stream, encoded blob)."""
    graph = lower_function(func)
    planned = plan(config, graph)
    blob = stream.encode(planned)
    log.info("npu region %s: %d layers, %d commands, %d weight bytes", graph.symbol,
             len(graph.layers), len(planned.commands), len(planned.weights))
    return graph.symbol, planned, blob


@tvm_ffi.register_global_func("relax.ext.npu", override=True)
def _relax_ext_npu(functions, options, constant_names):  # noqa: ARG001 - signature fixed by RunCodegen
    config = _STATE["config"] or get_config()
    modules = []
    for func in functions:
        symbol, planned, blob = compile_function(func, config)
        if _STATE["streams"] is not None:
            _STATE["streams"][symbol] = planned
        modules.append(runtime.create_module(symbol, blob))
    return modules
