"""tvm_npu: a bring-your-own-codegen NPU backend for Apache TVM (Relax) with a bit-exact reference NPU.

    import tvm, tvm_npu
    ex = tvm.compile(mod, target="npu", relax_pipeline="npu")      # or tvm_npu.build(mod, params=...)

The package is laid out by pipeline stage (docs/architecture.md); imports run one way, down it:
tools, dse -> build -> backend -> partition -> quantization -> rewrite -> frontend -> ir, runtime,
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


from .contract import CODES, NPU_REF, NPU_SMALL, PRESETS, NPUConfig, NPUError, get_config  # noqa: E402, F401  (first: registers the error kind with tvm-ffi)
from .frontend import from_onnx  # noqa: E402, F401
from .quantization import QuantReport, quantize  # noqa: E402, F401
from .partition import BuildReport, partition_for_npu  # noqa: E402, F401
from .backend import codegen as _codegen  # noqa: E402, F401  (registers "relax.ext.npu")
from .backend.plan.energy import EnergyModel  # noqa: E402, F401
from .runtime import load_module  # noqa: E402, F401
from .build import build, npu_pipeline  # noqa: E402, F401
from .dse import SweepResult, estimate, sweep  # noqa: E402, F401
from .tools import (AsyncModel, StreamingSession, format_sqnr_table, layer_sqnr, profile,  # noqa: E402, F401
                    to_csv as profile_to_csv, write_chrome_trace)

import importlib.metadata as _metadata  # noqa: E402

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("tvm_npu")
except _metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"

_autoload()
