"""Rotary position embedding ("rope", ROPE of docs/npu.md section 2, format 1.4): x * cos + rotate_half(x) *
sin over the rows of x's last axis (its rows view [1, rows, 1, D]). The cos / sin table is `rope_rows` rows
that x's row r reads row r % rope_rows of: constants go to the weight region as fp16 rows (cos rows, then
sin rows, each aligned, loaded like weights); run-time tables are the layer's second and third inputs."""

from __future__ import annotations

import numpy as np

from ...contract.errors import NPUError
from ...ir.values import constant_value, static_shape
from ...partition.rope_check import rope_operands
from ...partition.transformer_constraints import rope_table_rows
from .composite import Composite
from .graph import Layer, rows_view
from .registry import lowers


def _annotations(comp: Composite) -> dict:
    """The pattern's annotations, found again in the composite's body (the check saw the same ops)."""
    mul = comp.calls["multiply"]
    rot = comp.calls["concat"][0]
    rs = next(m for m in mul if any(comp.resolve(a).same_as(rot) for a in m.args))
    xc = next(m for m in mul if not m.same_as(rs))
    neg = comp.calls["negative"][0]
    hi = comp.resolve(neg.args[0])
    lo = next(s for s in comp.calls["strided_slice"] if not s.same_as(hi))
    return {"xc": xc, "rs": rs, "rot": rot, "hi": hi, "lo": lo}


def _table(comp: Composite, expr):
    value = constant_value(expr)
    return value if value is not None else constant_value(comp.params.get(expr, expr))


@lowers("rope")
def lower_rope(comp: Composite) -> Layer:
    """One ROPE layer; constraint_rope_form / constraint_rope_tables admitted the form and the tables."""
    layer = comp.layer("rope")
    layer.act = "none"
    call = comp.calls["add"][-1]
    x, cos, sin, _, _, _ = rope_operands(_annotations(comp), comp.resolve)
    shape, t_shape = static_shape(call), static_shape(cos)
    d = shape[-1]
    layer.rope_rows = rope_table_rows(shape, t_shape)
    tables = [_table(comp, t) for t in (cos, sin)]
    view = rows_view(shape)
    layer.inputs = [comp.tensor(x, view, "ROWS")]
    if tables[0] is not None and tables[1] is not None:  # cos rows then sin rows, fp16 (section 2)
        layer.const = np.concatenate([np.asarray(t, np.float32).reshape(-1, d) for t in tables]).astype(np.float16)
    elif tables[0] is None and tables[1] is None:
        layer.inputs += [comp.tensor(t, rows_view(t_shape), "ROWS") for t in (cos, sin)]
    else:  # constraint_rope_tables refused this already; here it is a compiler bug
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{comp.region.graph.label}: a rope table is half constant")
    layer.out = comp.tensor(comp.out_var, view, "ROWS", shape)
    layer.out_elems = int(np.prod(view))
    return layer
