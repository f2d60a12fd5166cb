"""The NPU's binary contract (docs/npu.md): error codes, the hardware configuration, the command
stream format.

The lowest layer: every other stage may import it; it imports nothing of the package.
"""

from .errors import CODES, NPUError
from .config import NPU_REF, NPU_SMALL, PRESETS, NPUConfig, get_config
