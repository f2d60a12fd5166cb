"""The reason recorded when tvm_npu itself fails on a graph: a pattern check that raised (checks.py) or
an NPU region the backend could not compile (unpartition.py). Not a constraint of any pattern: the op
would have run on the NPU had the compiler not failed, so it is listed apart in SUPPORTED_OPS.md."""

from __future__ import annotations

import logging


def constraint_internal_error(err: BaseException):
    """NPU_E_INTERNAL: the compiler failed unexpectedly on this NPU region (a bug in tvm_npu; please report
    it with the detail): the region runs on the CPU instead, and the build warns with
    tvm_npu.NPUFallbackWarning."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")


def log_internal_error(logger: logging.Logger, err: BaseException, what: str, detail: str) -> None:
    """Log that the compiler failed on `what`: one line at WARNING (what runs on the CPU, and why), so a
    build that goes on is not buried in tracebacks; the traceback at DEBUG, for the bug report
    (`logging.getLogger("tvm_npu").setLevel(logging.DEBUG)` shows it)."""
    logger.warning("%s: %s", what, detail)
    logger.debug("%s: the traceback of %s", what, detail, exc_info=err)
