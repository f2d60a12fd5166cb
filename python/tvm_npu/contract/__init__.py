"""The NPU's binary contract (docs/npu.md): error codes, the hardware configuration, the command
stream format.

`spec` holds the contract once, as data; `layout` packs and unpacks its records; `generate` writes the
C++ headers and the docs/npu.md tables from it. errors, config and stream read it.

The lowest layer: every other stage may import it; it imports nothing of the package.
"""

from .lazy import lazy_exports

# Imported on first use: errors.py imports tvm-ffi (seconds), which the CLI's --help never needs.
_LAZY = {
    **{name: (".config", name) for name in ("NPU_REF", "NPU_SMALL", "PRESETS", "NPUConfig", "get_config")},
    **{name: (".errors", name) for name in ("CODES", "NPUError", "NPUFallbackWarning", "SRAMFragmentationWarning")},
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
__all__ = sorted(_LAZY)
