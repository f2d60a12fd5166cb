"""Static-shape import of diffusers exports (docs/diffusion.md): the text encoder, the UNet and the VAE
decoder of a Stable-Diffusion-shaped pipeline, as torch.onnx writes them, at one batch (1, or 2 for
classifier-free guidance) and one latent size.

An export is static (every input of fixed shape, the usual user export) or has diffusers' conversion
script's dynamic axes (batch, height, width). `from_onnx` fixes the symbolic dims to the batch and latent
asked for, checks a static export against them (its latent input's dims are the UNet's sample size),
checks that the latent goes through the network (shape inference: a UNet's skip connections need a
latent divisible by its down-sampling factor), and imports with tvm_npu.from_onnx, which folds the
shape arithmetic (the timestep's broadcast, the GEGLU's chunk) once every input is static
(frontend/shape_fold.py, with decoder_fold.py's folding).
"""

from __future__ import annotations

import numbers
import os

import onnx
import tvm
from onnx import shape_inference

from ..contract.errors import NPUError
from . import decoder_fold
from . import onnx as onnx_import


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise NPUError("ERR_INVALID_CONFIG", f"{what}={value!r}: give a positive integer")
    return int(value)


def _latent_hw(latent) -> tuple[int, int] | None:
    if latent is None:
        return None
    if isinstance(latent, (tuple, list)) and len(latent) == 2:
        return _positive(latent[0], "latent height"), _positive(latent[1], "latent width")
    size = _positive(latent, "latent")
    return size, size


def _latent_input(graph: onnx.GraphProto) -> onnx.ValueInfoProto | None:
    """The first 4-D graph input (the UNet's `sample`, the VAE decoder's `latent_sample`: NCHW)."""
    weights = {t.name for t in graph.initializer}
    return next((vi for vi in graph.input if vi.name not in weights and len(vi.type.tensor_type.shape.dim) == 4), None)


def _fix(vi: onnx.ValueInfoProto, axis: int, value: int | None, what: str, option: str) -> None:
    """Set a symbolic dim to `value`, or check a static one against it."""
    dim = vi.type.tensor_type.shape.dim[axis]
    if dim.HasField("dim_value"):
        if value is not None and dim.dim_value != value:
            raise NPUError(
                "ERR_SHAPE_MISMATCH",
                f"input {vi.name!r} is exported with {what} {dim.dim_value} (static), not the {value} asked "
                f"for: export the model again at {what} {value}, with dynamic axes, or pass {option}={dim.dim_value}",
            )
        return
    if value is None:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"input {vi.name!r} has a symbolic {what} ({dim.dim_param or '?'}): pass {option}= to fix it",
        )
    dim.Clear()
    dim.dim_value = value


def specialize(model: onnx.ModelProto, batch: int | None = None, latent=None) -> onnx.ModelProto:
    """`model` (changed in place) with its batch (dim 0 of every input) and its latent's height and width
    (dims 2, 3 of its first 4-D input) fixed; NPUError for what does not match or stays symbolic."""
    batch = None if batch is None else _positive(batch, "batch")
    hw = _latent_hw(latent)
    weights = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in weights]
    image = _latent_input(model.graph)
    if image is not None:
        _fix(image, 0, batch, "batch", "batch")
        for axis, what in ((2, "latent height"), (3, "latent width")):
            _fix(image, axis, None if hw is None else hw[axis - 2], what, "latent")
    elif hw is not None:
        raise NPUError("ERR_INVALID_CONFIG", "latent= given, but the model has no 4-D (NCHW latent) input")
    for vi in inputs:
        dims = vi.type.tensor_type.shape.dim
        if vi is not image and len(dims) and not dims[0].HasField("dim_value"):
            _fix(vi, 0, batch, "batch", "batch")
        for k, dim in enumerate(dims):
            if not dim.HasField("dim_value"):
                raise NPUError(
                    "ERR_OP_NOT_SUPPORTED",
                    f"input {vi.name!r} dim {k} ({dim.dim_param or '?'}) is symbolic and is neither the batch "
                    "nor the latent's height / width: export it at a static size",
                )
    del model.graph.value_info[:]
    for out in model.graph.output:  # their symbolic dims would contradict the fixed ones: unknown instead
        for dim in out.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    _check_shapes(model)
    return model


def _check_shapes(model: onnx.ModelProto) -> None:
    """Strict shape inference: a latent the network cannot take (a skip connection's Concat of two
    different sizes) is a coded error here, not a failure inside TVM."""
    try:
        shape_inference.infer_shapes(decoder_fold.light_copy(model), strict_mode=True, data_prop=True)
    except Exception as err:  # noqa: BLE001 - onnx raises InferenceError, ValidationError, ...
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise NPUError(
            "ERR_SHAPE_MISMATCH",
            f"the model does not take these input shapes ({first}); a UNet needs a latent divisible by its "
            "down-sampling factor (2 ** (number of down blocks - 1), 8 for Stable Diffusion)",
        ) from None


def from_onnx(
    model: onnx.ModelProto | str | os.PathLike | bytes, batch: int | None = None, latent=None
) -> tvm.IRModule:
    """Import a diffusers export (text encoder, UNet or VAE decoder) at static shapes.

    Parameters
    ----------
    model : onnx.ModelProto, path or bytes
        The export (not changed).
    batch : int, optional
        The batch (1, or 2 for classifier-free guidance); needed when the export's batch is symbolic,
        checked against it when static.
    latent : int or (int, int), optional
        The latent's height and width (the UNet's sample size; image size / 8 for Stable Diffusion);
        needed when symbolic, checked when static.

    Raises
    ------
    NPUError
        ERR_INVALID_CONFIG for a batch / latent that is not a positive integer or is missing for a
        symbolic dim; ERR_SHAPE_MISMATCH when a static export's size differs from the one asked for or
        the network cannot take the latent; ERR_OP_NOT_SUPPORTED for another symbolic dim;
        ERR_INVALID_MODEL for a file that is not ONNX.
    """
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    else:
        model = onnx_import.read_model(model)
    return onnx_import.from_onnx(specialize(model, batch, latent))
