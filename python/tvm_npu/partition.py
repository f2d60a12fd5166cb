"""Stage 3 — partition: split the NPU-supported parts of a Relax module into NPU functions.

FuseOpsByPattern groups each supported op chain into a composite ("npu.conv2d_bias_relu", ...) and
MergeCompositeFunctions merges neighbouring composites into one function per NPU region, marked
Codegen="npu"; everything else stays in `main` for TVM's CPU pipeline. Every rejection a constraint
makes is collected, so the report can say why each op stayed on the CPU.
"""

from __future__ import annotations

import tvm
from tvm import relax

from . import patterns
from .config import NPUConfig, get_config
from .constraints import checking


def prepare(mod: tvm.IRModule) -> tvm.IRModule:
    """Make weights visible to the patterns: fold constant subgraphs (e.g. transposed Gemm weights)
    and inline constant bindings, so a weight is a Constant inside its composite instead of a
    run-time argument of the NPU function."""
    return tvm.transform.Sequential([
        relax.transform.FoldConstant(),
        relax.transform.CanonicalizeBindings(),
    ])(mod)


def partition_for_npu(mod: tvm.IRModule, config: NPUConfig | str | None = None,
                      rejections: list | None = None) -> tvm.IRModule:
    """Partition `mod` for the NPU.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module with static or dynamic shapes; unsupported parts stay on the CPU.
    config : NPUConfig or str, optional
        The NPU whose limits the constraints check (default "npu-ref").
    rejections : list, optional
        When given, receives a `constraints.Rejection` for every match a constraint refused.

    Returns
    -------
    tvm.IRModule
        `main` calling one function per NPU region (attribute Codegen="npu").
    """
    patterns.register()
    log = rejections if rejections is not None else []
    with checking(get_config(config), log):
        mod = prepare(mod)
        mod = relax.transform.FuseOpsByPattern(patterns.npu_patterns(), bind_constants=True,
                                               annotate_codegen=False)(mod)
        mod = relax.transform.MergeCompositeFunctions()(mod)
    return mod
