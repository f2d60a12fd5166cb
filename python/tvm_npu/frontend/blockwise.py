"""Group-wise (blocked) quantized weights, as the tools people use write them: onnxruntime's MatMulNBits
(com.microsoft; its 4-bit quantizer and the onnxruntime-genai model builder) and ONNX DequantizeLinear with
`block_size` (opset 21) on int4 / uint4 / int8 / uint8 initializers. TVM 0.27's ONNX frontend imports
neither, nor any INT4 / UINT4 initializer.

Both become the same Relax: the integer codes stay a constant of their own (int8 or uint8, one code per
element), and each element is dequantized as ``(float(q) - float(z)) * s`` with its group's scale `s` and
zero point `z` taken along the quantized axis (``take(scale, k // block_size)``). The subtraction is exact
(codes and zero points are small integers) and the multiply rounds once: the value ONNX's
DequantizeLinear and onnxruntime's MatMulNBits dequantization define. The matmul that reads the weight is
an ordinary ``R.matmul``, so TVM's CPU build runs the model exactly as written, which is the reference the
NPU is held to (issue 21).

What cannot be read exactly is an import error naming the node and the tensor (ERR_INVALID_MODEL for a
malformed model, ERR_OP_NOT_SUPPORTED for a form with another meaning), never a guess.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ..contract.errors import NPUError
from ..ir.group_quant import WEIGHT_PREFIX, group_dequantize
from ..ir.values import constant_value

# Initializer types TVM's importer cannot hold, and the type holding the same values one per byte.
_WIDENED = {TensorProto.INT4: np.int8, TensorProto.UINT4: np.uint8}


def widen_int4_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each INT4 / UINT4 initializer stored as INT8 / UINT8 holding the same values (exact:
    every operator reads the values, not the storage). A DequantizeLinear of int8 codes computes what one
    of the int4 codes computes; its zero point, int4 too, widens alike."""
    if not any(init.data_type in _WIDENED for init in model.graph.initializer):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.data_type in _WIDENED:
            values = numpy_helper.to_array(init).astype(_WIDENED[init.data_type])
            init.CopyFrom(numpy_helper.from_array(values, init.name))
    return out


def weight_name(op: str, attr: dict) -> str:
    """The name hint of the weight an `op` node (its converter's `attr`) imports."""
    node = str(attr.get("tvm_custom", {}).get("name", ""))
    return f"{WEIGHT_PREFIX}{op}__" + "".join(c if c.isalnum() else "_" for c in node).strip("_")


def _const(expr, what: str, where: str) -> np.ndarray:
    value = constant_value(expr)
    if value is None:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{where}: {what} is computed at run time; the importer reads quantized weights as initializers: "
            "make it a constant of the model",
        )
    return value


def _finite_scales(scales: np.ndarray, where: str) -> None:
    bad = ~np.isfinite(scales)
    if bad.any():
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"{where}: the scales tensor has {int(bad.sum())} NaN or infinite values (first at flat index "
            f"{int(np.flatnonzero(bad)[0])}): re-quantize the weights",
        )


class DequantizeLinear(onnx_frontend.DequantizeLinear):
    """DequantizeLinear with `block_size` (opset 21): group-wise scales and zero points along `axis`, each
    holding ceil(dim / block_size) entries there (ONNX: the last block may be partial). Without
    `block_size`, TVM's converter."""

    @classmethod
    def _impl_v21(cls, bb, inputs, attr, params):
        block = int(attr.get("block_size", 0))
        if block == 0:
            return super()._impl_v21(bb, inputs, attr, params)
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        rank = len(x.ty.shape)
        axis = int(attr.get("axis", 1))
        axis = axis + rank if axis < 0 else axis
        where = f"DequantizeLinear (block_size {block}, axis {axis})"
        if block < 0 or not 0 <= axis < rank:
            raise NPUError("ERR_INVALID_MODEL", f"{where}: block_size must be > 0 and axis within rank {rank}")
        want = [int(d) for d in x.ty.shape]
        want[axis] = -(-want[axis] // block)
        for name, t in (("scale", scale), ("zero point", zp)):
            if t is not None and [int(d) for d in t.ty.shape] != want:
                raise NPUError(
                    "ERR_INVALID_MODEL",
                    f"{where}: the {name} has shape {[int(d) for d in t.ty.shape]}, blocked quantization of "
                    f"x {[int(d) for d in x.ty.shape]} needs {want}",
                )
        if constant_value(scale) is not None:
            _finite_scales(constant_value(scale), where)
        out_dtype = attr.get("output_dtype", 0)
        out = scale.ty.dtype if not out_dtype else onnx.helper.tensor_dtype_to_np_dtype(out_dtype).name
        weight = group_dequantize(x, scale, zp, block, axis, int(x.ty.shape[axis]), out)
        return bb.emit(weight, weight_name("DequantizeLinear", attr))


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """Codes of `packed` (uint8 [..., bytes]), low bits first within each byte: [..., bytes * 8 / bits]."""
    if bits == 8:
        return packed
    lo, hi = packed & 0x0F, packed >> 4
    return np.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], -1)


class MatMulNBits(onnx_frontend.OnnxOpConverter):
    """onnxruntime's MatMulNBits (com.microsoft): ``Y = A @ dequantize(B).T + bias`` with B's codes packed
    along K (low bits first), one scale and zero point per `block_size` codes of each of the N rows.

    Read exactly: bits 4 and 8; block_size a power of two >= 16; zero points packed uint8 (default
    2^(bits-1)) or of A's type (onnxruntime then computes ``q * s - z * s``, which the import writes as
    ``(q - z) * s``: the same value up to one rounding); bias. accuracy_level sets the lowest precision
    onnxruntime may compute in (4: activations quantized to int8 per block); the import always computes
    in float32, at least as exact as any level, and the NPU runs it as W4A16 (fp16 activations). Level 4
    is not W4A8: onnxruntime quantizes each block of A at run time with a scale from that block's own
    range, where the NPU's int8 activations have one calibrated scale per tensor (a QDQ model's
    QuantizeLinear: that form runs as W4A8). Refused: g_idx (act-order), other bit widths."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        K, N = int(attr["K"]), int(attr["N"])
        bits, block = int(attr.get("bits", 4)), int(attr["block_size"])
        where = f"MatMulNBits (K {K}, N {N}, bits {bits}, block_size {block})"
        if bits not in (4, 8):
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{where}: bits {bits}; tvm_npu reads 4- and 8-bit weights")
        if block < 16 or block & (block - 1):
            raise NPUError("ERR_INVALID_MODEL", f"{where}: block_size must be a power of two >= 16")
        if len(inputs) > 4 and inputs[4] is not None:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{where}: g_idx (act-order group indices) is not supported: quantize without act order",
            )
        a = inputs[0]
        blocks = -(-K // block)
        packed = _const(inputs[1], "the packed weight B", where)
        if packed.dtype != np.uint8 or packed.shape != (N, blocks, block * bits // 8):
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{where}: B is {packed.dtype} {list(packed.shape)}, expected uint8 {[N, blocks, block * bits // 8]}",
            )
        scales = _const(inputs[2], "the scales", where)
        if scales.size != N * blocks:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{where}: the scales tensor has {scales.size} values, expected N x blocks = {N * blocks}",
            )
        _finite_scales(scales, where)
        codes = _unpack(packed.reshape(N, -1), bits)[:, :K]
        zp = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
        zeros = None
        if zp is None:
            zeros = np.full((N, blocks), 1 << (bits - 1), np.uint8)
        else:
            value = _const(zp, "the zero points", where)
            if value.dtype == np.uint8:
                per_row = -(-blocks * bits // 8)
                if value.size != N * per_row:
                    raise NPUError(
                        "ERR_INVALID_MODEL",
                        f"{where}: packed zero points have {value.size} bytes, expected {N * per_row}",
                    )
                zeros = _unpack(value.reshape(N, per_row), bits)[:, :blocks]
            elif value.size == N * blocks:
                zeros = value.reshape(N, blocks).astype(np.float32)
            else:
                raise NPUError(
                    "ERR_INVALID_MODEL",
                    f"{where}: zero points of A's type have {value.size} values, expected {N * blocks}",
                )
        codes, scales = (
            relax.const(np.ascontiguousarray(codes)),
            relax.const(scales.reshape(N, blocks).astype(np.float32)),
        )
        weight = bb.emit(
            group_dequantize(codes, scales, relax.const(zeros), block, 1, K, a.ty.dtype),
            weight_name("MatMulNBits", attr),
        )
        out = bb.normalize(relax.op.matmul(a, relax.op.permute_dims(weight, [1, 0])))
        if len(inputs) > 5 and inputs[5] is not None:
            out = bb.normalize(relax.op.add(out, inputs[5]))
        return out


def inferable(graph: onnx.GraphProto) -> tuple[list, list]:
    """(nodes, stub inputs): `graph`'s nodes with each MatMulNBits replaced by a MatMul of its input A and
    a stub graph input [K, N] of its scales' type, which onnx's shape inference (knowing no com.microsoft
    op) gives the output's type and shape. Without it, nothing after the first MatMulNBits has a type, and
    the importer cannot see the Casts to the type a tensor already has (after each attention softmax)."""
    types = {t.name: t.data_type for t in graph.initializer}
    nodes, stubs = [], []
    for node in graph.node:
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft" or len(node.input) < 3:
            nodes.append(node)
            continue
        attrs = {a.name: a.i for a in node.attribute}
        stub = f"{node.output[0]}__matmulnbits_stub"
        stubs.append(
            onnx.helper.make_tensor_value_info(
                stub, types.get(node.input[2], TensorProto.FLOAT), [attrs.get("K", 0), attrs.get("N", 0)]
            )
        )
        nodes.append(onnx.helper.make_node("MatMul", [node.input[0], stub], [node.output[0]], name=node.name))
    return nodes, stubs
