"""`tvm-npu`: the command line. Subcommands grow with the tools issue (compile, run, profile, ...)."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import PRESETS
from .errors import NPUError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tvm-npu", description="tvm_npu: TVM's NPU backend")
    parser.add_argument("--verbose", "-v", action="store_true", help="log every compiler stage")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile a small CNN for the NPU, run it, compare with TVM's CPU")
    demo.add_argument("--config", default="npu-ref", choices=sorted(PRESETS), help="NPU configuration")
    demo.add_argument("--out", default="npu_demo", help="folder for report.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    try:
        if args.command == "demo":
            from .demo import run_demo

            return 0 if run_demo(args.config, args.out)["ok"] else 1
    except NPUError as err:
        print(f"tvm-npu: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
