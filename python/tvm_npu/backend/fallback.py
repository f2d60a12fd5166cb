"""Stage 5a — per-region fallback: compile every NPU region before RunCodegen, one at a time.

A region whose lowering, planning, verification or encoding fails unexpectedly goes back to the CPU
(partition/unpartition.py), with reason NPU_E_INTERNAL and the error's type and first line in the
report, and a `NPUFallbackWarning`; the other regions stay on the NPU. A model TVM can compile for the
CPU thus always compiles for the NPU too.

The rule for which errors stop the build instead: only the coded refusals of `STOPS`, which docs/npu.md
section 8 promises at compile time and whose message says what to change (a layer or a recurrent state
that fits no tiling of the SRAM; a task over the tensor table). Everything else is a compiler bug as far
as the user is concerned: an uncoded exception, ERR_OP_NOT_SUPPORTED from a lowering (a pattern
accepted what its lowering cannot take) or ERR_BAD_STREAM from verify (a plan with a hazard).
"""

from __future__ import annotations

import logging
import warnings

import tvm
from tvm import relax

from ..contract.config import NPUConfig
from ..contract.errors import NPUError, NPUFallbackWarning
from ..ir.graph import brief
from ..partition.internal import constraint_internal_error, log_internal_error
from ..partition.unpartition import unpartition
from .codegen import compile_region

log = logging.getLogger(__name__)

# Coded errors that fail the build (documented compile-time refusals), never a silent CPU fallback.
STOPS = ("ERR_SRAM_OVERFLOW", "ERR_TASK_TOO_COMPLEX")


def compile_regions(mod: tvm.IRModule, config: NPUConfig, rejections: list, compiled: dict) -> tvm.IRModule:
    """Compile every NPU region of `mod`; un-partition the ones that fail unexpectedly.

    Parameters
    ----------
    mod : tvm.IRModule
        What partition.partition_for_npu made: `main` calling the NPU regions.
    config : NPUConfig
        The NPU whose streams the regions compile to.
    rejections : list
        Receives an NPU_E_INTERNAL Rejection for every op of a region that fell back.
    compiled : dict
        Receives symbol -> compile_region's (graph, planned, blob) of every region that compiled, for
        the relax.ext.npu hook to emit without compiling again.

    Returns
    -------
    tvm.IRModule
        `mod` without the regions that failed (their ops back in `main`, for the CPU).
    """
    failed = {}
    for gv, func in mod.functions.items():
        if not (isinstance(func, relax.Function) and func.attrs is not None and func.attrs.get("Codegen") == "npu"):
            continue
        symbol = str(func.attrs["global_symbol"])
        try:
            compiled[symbol] = compile_region(func, config)
        except NPUError as err:
            if err.code in STOPS:
                raise
            failed[gv] = _fall_back(symbol, err)
        except Exception as err:  # pylint: disable=broad-except  # any bug: this region runs on the CPU
            failed[gv] = _fall_back(symbol, err)
    return unpartition(mod, failed, rejections) if failed else mod


def _fall_back(symbol: str, err: Exception) -> str:
    """Log (one line; the traceback at DEBUG) and warn that region `symbol` runs on the CPU; returns the
    reason's detail."""
    detail = constraint_internal_error(err)
    log_internal_error(log, err, f"npu region {brief(symbol)} falls back to the CPU", detail)
    warnings.warn(
        f"NPU region {brief(symbol)} runs on the CPU: the compiler failed on it (NPU_E_INTERNAL, {detail}); "
        "please report this",
        NPUFallbackWarning,
        stacklevel=2,
    )
    return detail
