"""NPU error codes (docs/npu.md section 7, from tvm_npu/contract/spec.py), raised in Python as NPUError.

The C++ runtime throws the same codes through tvm-ffi with the error kind ``NPUError``; registering the
class below makes tvm-ffi raise it in Python, so a user catches one exception type whichever side failed.
"""

from __future__ import annotations

import tvm_ffi

from . import spec

CODES = {e["name"]: e["value"] for e in spec.ERRORS}


@tvm_ffi.register_error("NPUError")
class NPUError(RuntimeError):
    """An NPU error. ``code`` is the code's name (e.g. ``"ERR_SRAM_OVERFLOW"``).

    Raised by the compiler with ``NPUError(code, message)``, and by the runtime (through tvm-ffi) with a
    single message that starts with the code.
    """

    def __init__(self, code: str, message: str | None = None):
        if message is None:  # From tvm-ffi: "ERR_XXX: what happened".
            head = code.split(":", 1)[0].strip()
            self.code = head if head in CODES else "ERR_BAD_STREAM"
            super().__init__(code)
        else:
            if code not in CODES:
                raise ValueError(f"unknown NPU error code {code}")
            self.code = code
            super().__init__(f"{code}: {message}")

    @property
    def value(self) -> int:
        return CODES[self.code]


class NPUFallbackWarning(UserWarning):
    """Part of a model runs on the CPU although the NPU could have taken it: the compiler failed on an
    NPU region unexpectedly (reason NPU_E_INTERNAL in the build report, with the error). The build
    still gives the right answer; the warning asks for a bug report. Turn it into an error with
    ``warnings.simplefilter("error", tvm_npu.NPUFallbackWarning)``."""


class SRAMFragmentationWarning(UserWarning):
    """The SRAM planner's first-fit placement lost something to fragmentation: an intermediate went to
    DDR, or a layer ran smaller tiles than the cost model preferred, although SRAM had enough free bytes
    in total (no contiguous block; backend/plan/fragmentation.py). The build is correct, only slower.
    Each warning names the layer and the bytes; ``tvm-npu profile`` and the HTML report show SRAM use."""
