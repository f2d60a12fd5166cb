"""The table of onnxruntime's contrib ops tvm_npu imports, and how their nodes reach their converters.

TVM 0.27's ONNX importer looks a converter up by `op_type` alone and never reads a node's domain, so the
same name in two domains (ONNX's RotaryEmbedding (opset 23) and com.microsoft's, whose inputs come in
another order) would reach one converter. `routed` renames each node of a registered (domain, op_type)
to its `dispatch_name` ("com.microsoft::RotaryEmbedding") for the import, so each converter only ever
sees its own domain's nodes.

onnxruntime defines a few of its ops in the ONNX domain (SimplifiedLayerNormalization; the
onnxruntime-genai model builder writes it there), which onnx.checker refuses as unknown ops:
`checkable` gives the checker a copy with those nodes moved to com.microsoft, which it does not check,
so everything else in the model is checked as strictly as before.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import onnx
from onnx import helper

from ..onnx_attributes import consumed

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class ContribOp:
    """One registered op: its converter (an onnx_frontend.OnnxOpConverter; None: the op keeps the
    converter frontend/onnx.py's CONVERTERS gives its op_type, and only its entry is checked here) and
    its attribute, input and output handling (an onnx_attributes.OnnxOp, applied by
    onnx_attributes.check_model before the import)."""

    domain: str
    op_type: str
    converter: type | None
    spec: object

    @property
    def dispatch_name(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"


CONTRIB_OPS: dict[tuple[str, str], ContribOp] = {}


def contrib_op(domain: str, op_type: str, spec):
    """Class decorator: register `cls` as the converter of (domain, op_type) nodes ("" is ONNX's domain);
    `contrib_op(...)(None)` registers only the entry."""

    def register(cls):
        CONTRIB_OPS[(domain, op_type)] = ContribOp(domain, op_type, cls, spec)
        return cls

    return register


def _domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def entry(node: onnx.NodeProto) -> ContribOp | None:
    """The registered op of `node`, or None."""
    return CONTRIB_OPS.get((_domain(node), node.op_type))


def _routed(node: onnx.NodeProto) -> ContribOp | None:
    op = entry(node)
    return op if op is not None and op.converter is not None else None


def converters() -> dict[str, type]:
    """{dispatch name: converter} for TVM's converter map."""
    return {op.dispatch_name: op.converter for op in CONTRIB_OPS.values() if op.converter is not None}


def _unknown(node: onnx.NodeProto) -> bool:
    """A registered ONNX-domain node of an op onnx does not define (onnxruntime's); ONNX's own (Attention)
    stay checked."""
    return _domain(node) == "" and entry(node) is not None and not onnx.defs.has(node.op_type, "")


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy for onnx.checker with the registered ONNX-domain nodes onnx does not know moved to
    com.microsoft (the checker does not check other domains' nodes; onnx_attributes.check_model does)."""
    if not any(_unknown(n) for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if _unknown(node):
            node.domain = MS_DOMAIN
    if not any(o.domain == MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return out


@contextlib.contextmanager
def routed(model: onnx.ModelProto):
    """`model` itself, for the importer, with each registered node renamed to its dispatch name, given
    its first output's name when it has none (converters name the node in their errors), its optional
    outputs that nothing reads dropped (TVM's importer wants no more outputs than a converter gives) and
    the attributes its converter's `annotate` adds; every edited node is restored on exit. In place, so
    a large model's weights are not copied once more; the caller holds ir.graph.BLOCK_BUILDER_LOCK."""
    saved = []
    used = None
    try:
        for node in model.graph.node:
            op = _routed(node)
            if op is None:
                continue
            used = consumed(model) if used is None else used
            before = onnx.NodeProto()
            before.CopyFrom(node)
            saved.append((node, before))
            node.op_type = op.dispatch_name
            node.name = node.name or node.output[0]
            names = [n if i == 0 or n in used else "" for i, n in enumerate(node.output)]
            while len(names) > 1 and not names[-1]:
                names.pop()
            del node.output[:]
            node.output.extend(names)
            annotate = getattr(op.converter, "annotate", None)
            for name, value in (annotate(node, model.graph) if annotate else {}).items():
                node.attribute.append(helper.make_attribute(name, value))
        yield model
    finally:
        for node, before in saved:
            node.CopyFrom(before)
