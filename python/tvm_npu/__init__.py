"""tvm_npu: a bring-your-own-codegen NPU backend for Apache TVM (Relax) with a bit-exact reference NPU.

    import tvm, tvm_npu
    ex = tvm.compile(mod, target="npu", relax_pipeline="npu")      # or tvm_npu.build(mod, params=...)

The package is laid out by pipeline stage (docs/architecture.md); imports run one way, down it:
tools -> llm, dse -> build -> backend -> partition -> quantization -> rewrite -> frontend -> ir, runtime,
models -> contract.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point of the `tvm.backends` group: TVM calls it at `import tvm`.

    Defined before any import, because `import tvm` inside this package re-enters it through the
    entry point while the package is still initialising.
    """
    from .pipeline import register

    register()


# contract first: it registers the NPUError kind with tvm-ffi before anything can raise it.
from .contract import CODES, NPU_REF, NPU_SMALL, PRESETS, NPUConfig, NPUError, NPUFallbackWarning, get_config
from .frontend import from_onnx
from .quantization import QuantReport, quantize
from .partition import BuildReport, partition_for_npu
from .backend import codegen as _codegen  # noqa: F401  (registers "relax.ext.npu")
from .backend.plan.energy import EnergyModel
from .runtime import Model, export_library, load_module
from .build import build, npu_pipeline
from .dse import SweepResult, estimate, sweep
from . import llm  # tvm_npu.llm.compile: prefill / decode of a decoder (docs/llm.md)
from .tools import (
    AsyncModel,
    StreamingSession,
    format_sqnr_table,
    layer_sqnr,
    profile,
    to_csv as profile_to_csv,
    write_chrome_trace,
)

import importlib.metadata as _metadata

# The public API: the names a user script reaches as tvm_npu.<name>.
__all__ = [
    "CODES",
    "NPU_REF",
    "NPU_SMALL",
    "PRESETS",
    "AsyncModel",
    "BuildReport",
    "EnergyModel",
    "Model",
    "NPUConfig",
    "NPUError",
    "NPUFallbackWarning",
    "QuantReport",
    "StreamingSession",
    "SweepResult",
    "build",
    "estimate",
    "export_library",
    "format_sqnr_table",
    "from_onnx",
    "get_config",
    "layer_sqnr",
    "llm",
    "load_module",
    "npu_pipeline",
    "partition_for_npu",
    "profile",
    "profile_to_csv",
    "quantize",
    "sweep",
    "write_chrome_trace",
]

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("tvm_npu")
except _metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"

_autoload()
