"""GatherBlockQuantized (com.microsoft): a Gather from a block-quantized table, the quantized embedding
of onnxruntime's quantizers. The table is dequantized as onnxruntime does, ``(float(q) - float(z)) * s``
with one scale and zero point per `block_size` elements along `quantize_axis`, and gathered along
`gather_axis`: an index in [-n, n) picks a slice (negative counts back), any other index gives zeros
(unlike Gather). Imported as the group-wise dequantization of ir/group_quant.py (the codes stay an
int8 / uint8 constant) and a ``relax.take``; the output has the scales' type.

Tables: int4 / uint4 (bits 4; zero points of the same type, default 0) with any gather and quantize axis;
uint8 with bits 2, 4 or 8, packed along the last axis, low bits first (gather_axis 0, quantize_axis the
last; zero points packed alike along the blocks, default 2^(bits - 1)). Refused: float8 / float4 tables,
a table, scales or zero points computed at run time.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ...ir.group_quant import group_dequantize
from ...ir.values import constant_value
from ..onnx_attributes import OnnxOp, imported
from ._common import shape_of, where
from .registry import MS_DOMAIN, contrib_op

SPEC = OnnxOp(
    ("relax.take", "relax.astype", "relax.subtract", "relax.multiply", "relax.where"),
    {
        "bits": imported("4 for int4 / uint4 tables; 2, 4 or 8 for a packed uint8 table (else ERR_INVALID_MODEL)"),
        "block_size": imported("a power of two >= 16 (else ERR_INVALID_MODEL); default 128"),
        "gather_axis": imported("the axis gathered (negative counts back); default 0"),
        "quantize_axis": imported("the axis of the blocks (negative counts back); default 1"),
    },
    {
        "data": imported("an int4, uint4 or uint8 initializer"),
        "indices": imported("int32 / int64, any rank, constant or computed; out of range gives zeros"),
        "scales": imported("float32 / float16, data's shape with ceil(dim / block_size) blocks on quantize_axis"),
        "zero_points": imported("data's type, the scales' shape (uint8: packed along the blocks); a constant"),
    },
    {"output": imported("the gathered, dequantized slices, of the scales' type")},
)

_DATA_TYPE = "tvm_npu_data_type"  # set by registry.routed: the int4 / uint4 types are widened before TVM


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 [..., n] holding 8 / bits codes per byte, low bits first -> uint8 [..., n * 8 / bits]."""
    if bits == 8:
        return packed
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], -1)


def _axis(value: int, rank: int, name: str, place: str) -> int:
    if not -rank <= value < rank:
        raise NPUError("ERR_INVALID_MODEL", f"{place}: {name} {value} outside the table's rank {rank}")
    return value % rank


def _gather(bb, table, indices, axis: int, size: int, rank: int, out_dtype: str):
    """take(table, indices, axis) with onnxruntime's index rule: negative indices count back, indices
    outside [-size, size) give zeros."""
    op, e = relax.op, bb.normalize
    value = constant_value(indices)
    if value is not None and ((value >= -size) & (value < size)).all():
        return op.take(table, relax.const(np.where(value < 0, value + size, value).astype(np.int64), "int64"), axis)
    idx = e(op.astype(indices, "int64"))
    n = relax.const(size, "int64")
    wrapped = e(op.where(e(op.less(idx, relax.const(0, "int64"))), e(op.add(idx, n)), idx))
    valid = e(op.logical_and(e(op.greater_equal(wrapped, relax.const(0, "int64"))), e(op.less(wrapped, n))))
    rows = e(op.take(table, e(op.where(valid, wrapped, relax.const(0, "int64"))), axis))
    idx_shape = [int(d) for d in indices.ty.shape]
    mask = e(op.reshape(valid, [1] * axis + idx_shape + [1] * (rank - axis - 1)))
    return op.where(mask, rows, relax.const(0.0, out_dtype))


@contrib_op(MS_DOMAIN, "GatherBlockQuantized", SPEC)
class GatherBlockQuantized(onnx_frontend.OnnxOpConverter):
    """The dequantized table, gathered."""

    @staticmethod
    def annotate(node, graph) -> dict:
        table = next((i for i in graph.initializer if i.name == node.input[0]), None)
        return {_DATA_TYPE: table.data_type if table is not None else 0}

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where("GatherBlockQuantized", attr)
        data, indices, scales = inputs[0], inputs[1], inputs[2]
        kind = int(attr.get(_DATA_TYPE, 0))
        codes = constant_value(data)
        if codes is None or kind == 0:
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{place}: the table is computed at run time; make it a constant")
        if kind not in (TensorProto.INT4, TensorProto.UINT4, TensorProto.UINT8):
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{place}: a {TensorProto.DataType.Name(kind)} table; the import reads int4, uint4 and uint8 tables",
            )
        bits, block = int(attr.get("bits", 4)), int(attr.get("block_size", 128))
        if block < 16 or block & (block - 1):
            raise NPUError("ERR_INVALID_MODEL", f"{place}: block_size {block}; it must be a power of two >= 16")
        rank = codes.ndim
        gather = _axis(int(attr.get("gather_axis", 0)), rank, "gather_axis", place)
        quant = _axis(int(attr.get("quantize_axis", 1)), rank, "quantize_axis", place)
        packed = kind == TensorProto.UINT8
        if packed and (bits not in (2, 4, 8) or gather != 0 or quant != rank - 1 or rank < 2):
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{place}: a uint8 table takes bits 2, 4 or 8 (got {bits}), gather_axis 0 and quantize_axis the "
                f"last of rank >= 2 (got {gather}, {quant} of rank {rank})",
            )
        if not packed and bits != 4:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: bits {bits}; an int4 / uint4 table has bits 4")
        if packed:
            codes = _unpack(codes, bits)
        dim = codes.shape[quant]
        want = list(codes.shape)
        want[quant] = -(-dim // block)
        if shape_of(scales, "scales", place) != want:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{place}: the scales are {shape_of(scales, 'scales', place)}, a table of {list(codes.shape)} in "
                f"blocks of {block} along axis {quant} needs {want}",
            )
        out_dtype = str(scales.ty.dtype)
        if out_dtype not in ("float32", "float16"):
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{place}: {out_dtype} scales; the import takes float32 or float16")
        zeros = cls._zeros(inputs[3] if len(inputs) > 3 else None, packed, bits, want, place)
        table = group_dequantize(
            relax.const(np.ascontiguousarray(codes)), scales, zeros, block, quant, dim, out_dtype, emit=bb.normalize
        )
        return _gather(bb, table, indices, gather, codes.shape[gather], rank, out_dtype)

    @staticmethod
    def _zeros(zp, packed: bool, bits: int, want: list, place: str):
        if zp is None:
            return relax.const(np.full(want, 1 << (bits - 1), np.uint8)) if packed else None
        value = constant_value(zp)
        if value is None:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED", f"{place}: the zero points are computed at run time (make them constant)"
            )
        per_byte = 8 // bits if packed else 1
        stored = [*want[:-1], -(-want[-1] // per_byte)] if packed else want
        if list(value.shape) != stored:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: the zero points are {list(value.shape)}, expected {stored}")
        if packed:
            value = _unpack(value, bits)[..., : want[-1]]
        return relax.const(np.ascontiguousarray(value))
