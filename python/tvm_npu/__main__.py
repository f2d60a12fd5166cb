"""`python -m tvm_npu ...` is the `tvm-npu` command line."""

from .tools.cli import main

raise SystemExit(main())
