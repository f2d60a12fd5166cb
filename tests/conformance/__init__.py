"""The differential conformance suite (issue 19): generated cases per op family (fam_*.py), the ONNX
models they build (net.py), the runner that builds them for the NPU and judges them against independent
references (runner.py), and docs/conformance.md's table (table.py). See docs/conformance.md."""
