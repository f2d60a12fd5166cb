"""onnxruntime's contrib ops (com.microsoft, and the few onnxruntime defines in ONNX's domain), which
TVM 0.27's ONNX frontend does not import: one converter per file, each registering itself in
registry.CONTRIB_OPS with `@contrib_op(domain, op_type, spec)`, its `spec` the attribute / input / output
entry onnx_attributes.check_model applies before the import (docs/llm_import.md lists what each op means
as imported and what is refused).

A new op is one new file in this folder: every module here is imported below, so nothing else changes.

ONNX's own ops that TVM 0.27 lacks or misreads (Attention, RotaryEmbedding (23)) register an entry with
no converter and an `expand(model)` that rewrites their nodes into the standard ops they are defined by;
`expand` below runs them before the import.
"""

from __future__ import annotations

import importlib
import pkgutil

import onnx

from .registry import CONTRIB_OPS, checkable, contrib_op, converters, routed

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")


def expand(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with ONNX's own ops that TVM 0.27 misreads or lacks (Attention, which it reads as
    com.microsoft's; RotaryEmbedding (23)) rewritten into the standard ops they are defined by; before
    from_onnx's import and the decoder import. `model` itself when it has none."""
    from . import attention, onnx_rotary_embedding

    for form in (onnx_rotary_embedding, attention):
        model = form.expand(model)
    return model


__all__ = ["CONTRIB_OPS", "checkable", "contrib_op", "converters", "expand", "routed"]
