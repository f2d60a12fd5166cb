"""Registration with TVM: the "npu" target tag, the "npu" Relax pipeline and the pattern table.

Called once, from the `tvm.backends` entry point at `import tvm` (see `tvm_npu._autoload`).
"""

from __future__ import annotations

import warnings

import tvm
from tvm import relax

from . import runtime
from .contract.errors import NPUError
from .partition import patterns

TARGET_TAG = {"kind": "llvm", "keys": ["npu", "cpu"]}

# Set once: what it guards (TVM's tag, pattern and pipeline registries) is process-wide by nature.
_DONE = []


def register() -> None:
    """Register everything once (idempotent)."""
    if _DONE:
        return
    _DONE.append(True)
    try:
        runtime.load_library()  # registers the "npu" module loader, needed to load exported artifacts
    except NPUError as err:  # compiling still fails with this message when the library is needed
        warnings.warn(str(err), stacklevel=2)
    tvm.target.tag.register_tag("npu", TARGET_TAG, override=True)
    patterns.register()
    if "npu" not in relax.pipeline.PIPELINE_MAP:
        relax.register_pipeline("npu")(_npu_pipeline)


def _npu_pipeline(*args, **kwargs):
    """build.npu_pipeline, imported when TVM asks for it: register() may run while tvm_npu.build is
    still importing (`import tvm_npu.build` first imports TVM, whose entry point calls register)."""
    from .build import npu_pipeline

    return npu_pipeline(*args, **kwargs)
