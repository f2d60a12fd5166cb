"""The reason recorded when tvm_npu itself fails on a graph: a pattern check that raised (checks.py) or
an NPU region the backend could not compile (unpartition.py). Not a constraint of any pattern: the op
would have run on the NPU had the compiler not failed, so it is listed apart in SUPPORTED_OPS.md."""


def constraint_internal_error(err: BaseException):
    """NPU_E_INTERNAL: the compiler failed unexpectedly on this NPU region (a bug in tvm_npu; please report
    it with the detail): the region runs on the CPU instead, and the build warns with
    tvm_npu.NPUFallbackWarning."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")
