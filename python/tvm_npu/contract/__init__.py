"""The NPU's binary contract (docs/npu.md): error codes, the hardware configuration, the command
stream format.

`spec` holds the contract once, as data; `layout` packs and unpacks its records; `generate` writes the
C++ headers and the docs/npu.md tables from it. errors, config and stream read it.

The lowest layer: every other stage may import it; it imports nothing of the package.
"""

from .config import NPU_REF, NPU_SMALL, PRESETS, NPUConfig, get_config
from .errors import CODES, NPUError, NPUFallbackWarning
