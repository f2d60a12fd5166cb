"""onnxruntime's contrib ops (com.microsoft, and the few onnxruntime defines in ONNX's domain), which
TVM 0.27's ONNX frontend does not import: one converter per file, each registering itself in
registry.CONTRIB_OPS with `@contrib_op(domain, op_type, spec)`, its `spec` the attribute / input / output
entry onnx_attributes.check_model applies before the import (docs/llm_import.md lists what each op means
as imported and what is refused).

A new op is one new file in this folder: every module here is imported below, so nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import CONTRIB_OPS, checkable, contrib_op, converters, routed

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CONTRIB_OPS", "checkable", "contrib_op", "converters", "routed"]
