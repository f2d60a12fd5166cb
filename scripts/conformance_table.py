#!/usr/bin/env python3
"""Run the conformance suite (tests/conformance) and write its table into docs/conformance.md.

    python scripts/conformance_table.py          # the CI set (what `python -m pytest` checks)
    python scripts/conformance_table.py --full   # the full set (NPU_CONFORMANCE=full), its own table

The counts come from the run: each case's verdict is its test's outcome against the independent
references, and where it ran is its build report's; the README's pytest run then fails when the
committed table differs from what the cases give."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    env = dict(os.environ, NPU_CONFORMANCE_WRITE="1")
    if "--full" in sys.argv[1:]:
        env["NPU_CONFORMANCE"] = "full"
    else:
        env.pop("NPU_CONFORMANCE", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance"]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
