"""Stage 1 — import: ONNX models into Relax, with the weights as constants.

`from_onnx` is TVM's ONNX frontend plus tvm_npu's own converters for what TVM lowers in a way the NPU
patterns cannot see (Clip becomes two TIR calls in TVM 0.27; here it stays one `R.clip`, so relu6
fuses into the convolution before it; constant Pad stays one `R.nn.pad`, so a zero pad can fold into
the convolution after it), LSTM and ConvInteger, which TVM's frontend lacks (onnx_lstm.py; ConvInteger
as an int32 convolution for the CPU), QOperator-format
quantized models (QLinearConv, QLinearMatMul) are rewritten into the QDQ format the NPU patterns match
(onnx_qlinear.py), and group-wise quantized weights (MatMulNBits, blocked DequantizeLinear, int4
initializers) are read by blockwise.py. onnxruntime's contrib ops (SimplifiedLayerNormalization,
the skip norms, RotaryEmbedding, GatherBlockQuantized) are frontend/contrib's, one file each,
dispatched by domain; so are ONNX's own Attention (which TVM reads as com.microsoft's) and
RotaryEmbedding (23), expanded into standard ops before the import.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ..contract.errors import NPUError
from ..ir.graph import BLOCK_BUILDER_LOCK
from ..ir.values import constant_value
from . import contrib, shape_fold, static_fold
from .blockwise import DequantizeLinear, MatMulNBits, widen_int4_initializers
from .lstm import LSTM
from .onnx_attributes import check_model
from .qlinear import qoperator_to_qdq


class Clip(onnx_frontend.Clip):
    """Clip with constant bounds lo <= hi as one R.clip (TVM emits maximum + minimum as call_tir)."""

    @classmethod
    def _as_clip(cls, x, lo, hi):
        if str(x.ty.dtype) != "float32":
            return None
        bounds = []
        for bound, default in ((lo, np.finfo(np.float32).min), (hi, np.finfo(np.float32).max)):
            if bound is None:
                bounds.append(float(default))
                continue
            value = constant_value(bound)
            if value is None or value.size != 1 or not np.isfinite(value).all():
                return None
            bounds.append(float(value.reshape(-1)[0]))
        if bounds[0] > bounds[1]:
            # ONNX clips as min(max(x, lo), hi), every output hi; R.clip gives lo then: TVM's two ops
            return None
        return relax.op.clip(x, *bounds)

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        lo = inputs[1] if len(inputs) > 1 else None
        hi = inputs[2] if len(inputs) > 2 else None
        clip = cls._as_clip(inputs[0], lo, hi)
        return clip if clip is not None else super()._impl_v13(bb, inputs, attr, params)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._impl_v13(bb, inputs, attr, params)


class Pad(onnx_frontend.Pad):
    """A float constant-mode Pad (opset 11+) as one R.nn.pad: TVM emits a call_tir of topi.nn.pad,
    which no rewrite can read, and rewrite.fuse_pad_into_conv folds a zero R.nn.pad into the
    convolution after it. Other modes, crops (negative pads) and integer tensors keep TVM's lowering."""

    @classmethod
    def _lower_pad(cls, bb, inputs, attr, params, allowed_modes):
        x = inputs[0]
        if attr.get("mode", b"constant").decode("utf-8") == "constant" and str(x.ty.dtype).startswith("float"):
            before, after, value = cls._parse_pads_and_axes(inputs, params)
            if min(before + after) >= 0:
                width = [int(p) for pair in zip(before, after) for p in pair]  # per axis: before, after
                return relax.op.nn.pad(x, width, "constant", float(value))
        return super()._lower_pad(bb, inputs, attr, params, allowed_modes)


class _SamePadPool:
    """SAME_UPPER / SAME_LOWER auto_pad as the explicit pads ONNX defines: output = ceil(input / stride),
    the odd pixel of padding after (UPPER) or before (LOWER) — TVM 0.27 gives a SAME_LOWER MaxPool
    floor(input / stride) outputs, and ignores an AveragePool's dilations there."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        mode = attr.get("auto_pad", b"NOTSET").decode("utf-8")
        dims = inputs[0].ty.shape.values[2:] if inputs[0].ty.shape is not None else []
        if mode in ("SAME_UPPER", "SAME_LOWER") and all(isinstance(d, tvm.tirx.IntImm) for d in dims):
            kernel = list(attr["kernel_shape"])
            strides = list(attr.get("strides", [1] * len(kernel)))
            dilations = list(attr.get("dilations", [1] * len(kernel)))
            before, after = [], []
            for n, k, s, d in zip((int(d) for d in dims), kernel, strides, dilations):
                total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
                small, big = total // 2, total - total // 2
                before.append(big if mode == "SAME_LOWER" else small)
                after.append(small if mode == "SAME_LOWER" else big)
            attr = dict(attr, auto_pad=b"NOTSET", pads=before + after)
        return super()._impl_v1(bb, inputs, attr, params)


class MaxPool(_SamePadPool, onnx_frontend.MaxPool):
    pass


class AveragePool(_SamePadPool, onnx_frontend.AveragePool):
    pass


class ConvInteger(onnx_frontend.OnnxOpConverter):
    """ConvInteger (which TVM 0.27's frontend lacks) in int32: conv(x - x_zero_point, w - w_zero_point),
    each operand widened to int32 first, so every product and sum is exact (|x - z| <= 255). Padding
    with 0 after the subtraction is padding with x_zero_point, as ONNX defines it. It runs on the CPU:
    the NPU's int8 datapath takes an int8 weight with zero point 0 and requantizes its output, and
    ConvInteger's output is the raw int32 sum."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, w = inputs[0], inputs[1]

        def centred(value, zero_point, shape):
            value = relax.op.astype(value, "int32")
            if zero_point is None:
                return bb.normalize(value)
            zero_point = bb.normalize(relax.op.astype(zero_point, "int32"))
            return bb.normalize(relax.op.subtract(value, relax.op.reshape(zero_point, shape)))

        x_zp = inputs[2] if len(inputs) > 2 else None
        w_zp = inputs[3] if len(inputs) > 3 else None
        rank = len(x.ty.shape)
        # x_zero_point is a scalar; w_zero_point a scalar or one per output channel (axis 0 of w).
        data = centred(x, x_zp, [1] * rank)
        weight = centred(w, w_zp, [-1] + [1] * (rank - 1))
        return onnx_frontend.Conv._impl_v11(bb, [data, weight, None], attr, params)


CONVERTERS = {
    "Clip": Clip,
    "Pad": Pad,
    "LSTM": LSTM,
    "ConvInteger": ConvInteger,
    "MaxPool": MaxPool,
    "AveragePool": AveragePool,
    "DequantizeLinear": DequantizeLinear,
    "MatMulNBits": MatMulNBits,
    **contrib.converters(),  # onnxruntime's contrib ops, by "domain::op_type" (frontend/contrib)
}


@contextlib.contextmanager
def _npu_converters():
    """TVM's converter map with tvm_npu's converters in it, for the duration of one import (a patch of a
    TVM module global: the caller holds ir.graph.BLOCK_BUILDER_LOCK)."""
    original = onnx_frontend._get_convert_map

    def patched():
        table = original()
        table.update(CONVERTERS)
        return table

    onnx_frontend._get_convert_map = patched
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


def initializers_as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the graph inputs that are also initializers.

    Older exporters (opset < 9 conventions, keep_initializers_as_inputs=True) list every weight as a
    graph input too; ONNX then lets a caller override it, so an importer could make each weight a
    run-time parameter and keep it off the NPU. tvm_npu treats them as the constants they are."""
    names = {init.name for init in model.graph.initializer}
    if not any(i.name in names for i in model.graph.input):
        return model
    model = copy.deepcopy(model)
    kept = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def _load(model) -> onnx.ModelProto:
    """A ModelProto from a path or serialized bytes; NPUError(ERR_INVALID_MODEL) when unreadable."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        what = f"ONNX model ({len(model)} bytes)"
        load = lambda: onnx.load_model_from_string(bytes(model))  # noqa: E731
    else:
        what = f"ONNX model {str(model)!r}"
        load = lambda: onnx.load(model)  # noqa: E731
    try:
        loaded = load()
    except Exception as err:  # onnx raises DecodeError, OSError, ...
        raise NPUError("ERR_INVALID_MODEL", f"cannot read {what}: {err}") from None
    if not loaded.graph.node and not loaded.graph.output:
        raise NPUError("ERR_INVALID_MODEL", f"cannot read {what}: no graph (truncated?)")
    return loaded


read_model = _load  # the same reading (and coded errors) for the other entry points that take a path


def from_onnx(model: onnx.ModelProto | str | bytes, shape_dict: dict | None = None) -> tvm.IRModule:
    """Import an ONNX model (a ModelProto, a path or the serialized bytes); weights become constants of
    `main`, also when an older exporter listed them as graph inputs too.

    Raises NPUError(ERR_INVALID_MODEL) for a file or bytes that are not a valid ONNX model
    (malformed, truncated or failing the ONNX checker).
    """
    if isinstance(model, (str, bytes, bytearray, memoryview)) or hasattr(model, "__fspath__"):
        model = _load(model)
    if not isinstance(model, onnx.ModelProto):
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"from_onnx takes an onnx.ModelProto, a path to a .onnx file or its bytes, not {type(model).__name__}",
        )
    try:
        # onnxruntime's ops of ONNX's domain (SimplifiedLayerNormalization) are unknown to the checker
        onnx.checker.check_model(contrib.checkable(model))
    except (onnx.checker.ValidationError, ValueError) as err:
        raise NPUError("ERR_INVALID_MODEL", f"invalid ONNX model: {err}") from None
    model = qoperator_to_qdq(initializers_as_constants(model))
    # attribute values the importer cannot give the meaning of: a coded error
    check_model(model, {key: op.spec for key, op in contrib.CONTRIB_OPS.items()})
    model = contrib.expand(model)  # ONNX's Attention (TVM reads it as com.microsoft's), RotaryEmbedding
    if shape_dict is not None:  # static shapes given for symbolic inputs: as if the file declared them
        fixed = shape_fold.with_shapes(model, shape_dict)
        model, shape_dict = (model, shape_dict) if fixed is None else (fixed, None)
    if shape_dict is not None or not shape_fold.inputs_static(model):
        return _import(model, shape_dict)
    # Every input static: values computed from shapes alone (a causal mask, an attention scale) are
    # constants (frontend/static_fold.py).
    model = static_fold.folded(model)
    # Shape arithmetic TVM cannot read (a Reshape of a computed shape fails the
    # import; a Slice of computed bounds, torch's chunk / split, imports of unknown shape and fails the
    # build) is folded into constants and the model imported again (frontend/shape_fold.py).
    try:
        mod = _import(model, None)
    except NPUError as err:
        if not str(err).startswith("ERR_OP_NOT_SUPPORTED: TVM's ONNX importer cannot import this model ("):
            raise
        try:
            return _import(shape_fold.folded(model), None)
        except NPUError:
            raise err from None
    if shape_fold.unknown_shapes(mod):
        mod = _import(shape_fold.folded(model), None)
    return mod


def _import(model: onnx.ModelProto, shape_dict: dict | None) -> tvm.IRModule:
    """TVM's importer with tvm_npu's converters, its failures as coded errors."""
    # TVM's importer builds main in a BlockBuilder function scope; under the same lock no other import
    # sees the converter map patched or restored half-way, nor the contrib nodes routed (in place) to
    # their domain's converters.
    with BLOCK_BUILDER_LOCK, contrib.routed(model), _npu_converters():
        model = widen_int4_initializers(model)  # after the routing, which reads the int4 tables' types
        try:
            return onnx_frontend.from_onnx(model, shape_dict=shape_dict, keep_params_in_input=False)
        except tvm.error.OpNotImplemented as err:  # nothing can run it, on the NPU or on TVM's CPU
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"TVM's ONNX importer cannot import this model: "
                f"{' '.join(str(err).split())}; replace the op or export the model without it",
            ) from None
        except NPUError:
            raise
        except Exception as err:  # TVM's converters raise TypeError, ValueError, ... on what they can't read
            first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"TVM's ONNX importer cannot import this model ({type(err).__name__}: {first}); the graph "
                "needs a form TVM's importer reads: give every input a static shape (in the file or by shape_dict=: "
                "tvm_npu then folds the arithmetic itself), fold shape arithmetic into constants (e.g. onnxruntime's "
                "basic graph optimizations, or onnx-simplifier) or replace the op",
            ) from None
