"""Fold on need: an ONNX model whose every input has a static shape, but whose import still leaves tensors
of unknown shape in `main`, is folded (decoder_fold.fold) and imported again.

Why: torch.onnx's TorchScript exporter writes a tensor's `chunk` / `split` as a Slice whose starts and
ends are computed from Shape -> Gather -> Div (diffusers' GEGLU, the timestep embedding's broadcast),
also at static shapes; TVM's importer turns such a Slice into `R.dynamic_strided_slice` of unknown
shape, and the build then fails inside TVM's legalization ("emit_te now only supports Tensor that has
ShapeExpr shape"). With every input static the arithmetic is constant, and folding it gives a module of
static shapes. Models whose import is static already are not touched, so no existing import changes.
"""

from __future__ import annotations

import onnx
import tvm
from tvm import relax

from . import decoder_fold


def inputs_static(model: onnx.ModelProto) -> bool:
    """Whether every graph input that is not an initializer has a shape of fixed dims."""
    weights = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            return False
    return True


def _static_type(ty) -> bool:
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        return isinstance(shape, relax.ShapeExpr) and all(isinstance(v, tvm.tirx.IntImm) for v in shape.values)
    if isinstance(ty, relax.TupleType):
        return all(_static_type(f) for f in ty.fields)
    return True  # shapes, objects, ...: nothing to legalize from


def unknown_shapes(mod: tvm.IRModule) -> int:
    """How many bindings of `main` (at its top level) have a tensor of unknown or symbolic shape."""
    body = mod["main"].body
    return sum(not _static_type(b.var.ty) for block in body.blocks for b in block.bindings)


def folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` (inputs static) with its shape arithmetic folded into constants."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return decoder_fold.fold(copy)


def with_shapes(model: onnx.ModelProto, shape_dict: dict) -> onnx.ModelProto | None:
    """A copy of `model` with the graph inputs named in `shape_dict` of those shapes (lists of positive
    ints, one per dim of the input); None when `shape_dict` is not that (a symbolic dim, an unknown name,
    another rank: TVM's importer reads it as given)."""
    inputs = {vi.name: vi for vi in model.graph.input}
    for name, shape in shape_dict.items():
        dims = inputs[name].type.tensor_type.shape.dim if name in inputs else None
        ints = isinstance(shape, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
        if dims is None or not ints or len(shape) != len(dims) or min(shape, default=1) < 1:
            return None
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in copy.graph.input:
        for dim, value in zip(vi.type.tensor_type.shape.dim, shape_dict.get(vi.name, ())):
            dim.Clear()
            dim.dim_value = value
    return copy
