"""Build the C++ host app (apps/host_app, npu_host) with CMake for the tests that run it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build_host_app(build: Path) -> Path:
    """npu_host built in `build`, linked with the runtime library Python uses (TVM_NPU_RUNTIME_LIB: a
    development or sanitizer build) or the installed one."""
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed: pip install '.[test]' brings it")
    lib = [f"-DTVM_NPU_RUNTIME_LIB={os.environ['TVM_NPU_RUNTIME_LIB']}"] if "TVM_NPU_RUNTIME_LIB" in os.environ else []
    subprocess.run(
        [
            "cmake",
            "-S",
            str(ROOT / "apps" / "host_app"),
            "-B",
            str(build),
            f"-DPython3_EXECUTABLE={sys.executable}",
            *lib,
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, capture_output=True)
    return build / "npu_host"
