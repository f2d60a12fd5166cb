"""tvm_npu: a bring-your-own-codegen NPU backend for Apache TVM (Relax) with a bit-exact reference NPU.

    import tvm, tvm_npu
    ex = tvm.compile(mod, target="npu", relax_pipeline="npu")      # or tvm_npu.build(mod, params=...)
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point of the `tvm.backends` group: TVM calls it at `import tvm`.

    Defined before any import, because `import tvm` inside this package re-enters it through the
    entry point while the package is still initialising.
    """
    from .pipeline import register

    register()


from .errors import NPUError, CODES  # noqa: F401  (first: registers the error kind with tvm-ffi)
from .config import NPUConfig, NPU_REF, NPU_SMALL, PRESETS, get_config  # noqa: F401
from .frontend import from_onnx  # noqa: F401
from .partition import partition_for_npu  # noqa: F401
from .report import BuildReport  # noqa: F401
from .quantize import quantize, QuantReport  # noqa: F401
from .accuracy import layer_sqnr, format_sqnr_table  # noqa: F401
from .profile import profile, to_csv as profile_to_csv  # noqa: F401
from .trace import write_chrome_trace  # noqa: F401
from .build import build, npu_pipeline  # noqa: F401
from .estimate import estimate  # noqa: F401
from .energy import EnergyModel  # noqa: F401
from .sweep import sweep, SweepResult  # noqa: F401
from .session import AsyncModel, StreamingSession  # noqa: F401
from .runtime import load_module  # noqa: F401
from . import codegen as _codegen  # noqa: F401  (registers "relax.ext.npu")

__version__ = "0.1.0"

_autoload()
