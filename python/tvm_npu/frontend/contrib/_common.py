"""What the contrib converters share: the node's name for errors, static shapes, the float32 check."""

from __future__ import annotations

from ...contract.errors import NPUError
from ...ir.values import static_shape


def where(op: str, attr: dict) -> str:
    """ "SkipLayerNormalization node 'name'" for error messages (registry.routed names every node)."""
    return f"{op} node {attr.get('tvm_custom', {}).get('name', '?')!r}"


def shape_of(expr, what: str, place: str) -> list[int]:
    """The static shape of `expr`; ERR_OP_NOT_SUPPORTED naming `what` when a dimension is symbolic."""
    shape = static_shape(expr)
    if shape is None:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{place}: the {what} has no static shape; give the model's inputs fixed shapes (shape_dict)",
        )
    return [int(d) for d in shape]


def require_float32(expr, what: str, place: str) -> None:
    dtype = str(expr.ty.dtype)
    if dtype != "float32":
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{place}: the {what} is {dtype}; tvm_npu imports this op in float32 (export the model in fp32)",
        )
