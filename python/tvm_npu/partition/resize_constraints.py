"""The constraints of a nearest-neighbour upsampling by integer factors (relax.image.resize2d; ONNX Resize, torch's
F.interpolate(scale_factor=2, mode="nearest"), diffusers' Upsample2D), run on the NPU as addressing: no
command computes anything, POOL 1x1 max copies (exact: the one tap is the result) write each input pixel
into its fH * fW places of the output through the output pixel and row strides (docs/npu.md section 3,
channel slices; backend/plan/upsample_plan.py).

Which input pixel an output pixel takes is the coordinate transformation and the rounding method
together, so the names are not trusted: `index_map` evaluates TVM's formulas (topi.image.resize, which
the CPU build runs) on every output row and column, and the op runs on the NPU only where the result is
floor(out / f) exactly, e.g. asymmetric + floor (torch's export) or half_pixel + round_prefer_floor.
"""

from __future__ import annotations

import numpy as np

from ..contract.config import NPUConfig
from ..ir.values import constant_value, static_shape

# The largest factor per axis: fH * fW POOL copies per tile, and POOL's pixel stride f * C * elem.
MAX_FACTOR = 8
SLICE_ALIGNMENT = 16  # POOL's output address rule (docs/npu.md section 3): one SRAM beat


def _round(x: np.ndarray, method: str, mode: str) -> np.ndarray:
    """topi.image.resize.get_closest_index, in float32 as TVM computes it ("" is TVM's default)."""
    if method == "":
        method = "round" if mode == "align_corners" else "floor"
    eps = np.float32(1e-5)
    if method == "round":
        if np.any(np.abs(x - np.floor(x)) == np.float32(0.5)):
            raise ValueError("a tie")  # TVM's round and numpy's differ on ties: do not guess
        return np.round(x)
    if method == "round_prefer_floor":
        return np.ceil(x - np.float32(0.5))
    if method == "round_prefer_ceil":
        return np.floor(x + np.float32(0.5))
    if method == "floor":
        return np.floor(x + eps)
    if method == "ceil":
        return np.ceil(x - eps)
    raise ValueError(method)


def index_map(size_in: int, size_out: int, mode: str, method: str) -> np.ndarray | None:
    """The input index of every output index along one axis, as topi.image.resize's nearest_neighbor
    computes it (get_inx, get_closest_index, then the clamp into the axis); None for a transformation
    that reads the region of interest or extrapolates (tf_crop_and_resize) or that TVM does not know."""
    out = np.arange(size_out, dtype=np.float32)
    scale = np.float32(size_in) / np.float32(size_out)
    if mode == "asymmetric" and method in ("floor", "") and size_out % size_in == 0:
        idx = np.arange(size_out) // (size_out // size_in)  # TVM's integer division for this case
    else:
        if mode == "half_pixel":
            x = (out + np.float32(0.5)) * scale - np.float32(0.5)
        elif mode == "align_corners":
            x = np.float32(size_in - 1) / np.float32(max(size_out - 1, 1)) * out if size_out > 1 else out * 0
        elif mode == "asymmetric":
            x = scale * out
        elif mode == "pytorch_half_pixel":
            x = (out + np.float32(0.5)) * scale - np.float32(0.5) if size_out > 1 else out * 0
        elif mode == "tf_half_pixel_for_nn":
            x = (out + np.float32(0.5)) * scale
        else:
            return None
        try:
            idx = _round(x.astype(np.float32), method, mode)
        except ValueError:
            return None
    return np.clip(idx.astype(np.int64), 0, size_in - 1)


def factors(x, call) -> tuple | None:
    """(fH, fW) when the output's H and W are integer multiples of x's, else None."""
    (_, _, h, w), (_, _, oh, ow) = static_shape(x), static_shape(call)
    if oh % h or ow % w:
        return None
    return oh // h, ow // w


def constraint_resize_method(call):
    """NPU_E_RESIZE: only nearest-neighbour resizing runs on the NPU (as addressing: every output pixel is
    a copy of one input pixel); linear and cubic interpolation stay on the CPU."""
    method = str(call.attrs.method)
    return None if method == "nearest_neighbor" else f"method {method}"


def constraint_resize_layout(call):
    """NPU_E_LAYOUT: a resize runs on the NPU on a 4-D NCHW map (the import's layout), its output dtype
    unset or the input's."""
    if str(call.attrs.layout) != "NCHW":
        return f"layout {call.attrs.layout}"
    out_dtype = call.attrs.out_dtype
    if out_dtype is not None and str(out_dtype) not in ("", "void", str(call.args[0].ty.dtype)):
        return f"out_dtype {out_dtype}"
    return None


def constraint_resize_factor(x, call):
    """NPU_E_RESIZE: a nearest resize runs on the NPU when it upsamples H and W by integer factors (1 to 8
    each, not both 1; torch's scale_factor=2 is 2 and 2), N and C unchanged, and its coordinate
    transformation and rounding method map output index o to input index floor(o / f) in both axes,
    evaluated on every index as TVM computes it (asymmetric + floor as torch exports it; half_pixel with
    round_prefer_floor or round_prefer_ceil; tf_half_pixel_for_nn + floor at factor 2). align_corners,
    tf_crop_and_resize, other rounding, downsampling and fractional factors (1.5x) stay on the CPU."""
    shape, out = static_shape(x), static_shape(call)
    if len(shape) != 4 or len(out) != 4:
        return f"rank {len(shape)}, not a 4-D map"
    if out[:2] != shape[:2]:
        return f"{list(shape)} -> {list(out)} changes N or C"
    f = factors(x, call)
    if f is None:
        return f"{shape[2]}x{shape[3]} -> {out[2]}x{out[3]} is not an integer upsampling"
    if f == (1, 1) or max(f) > MAX_FACTOR:
        return f"factors {f[0]}x{f[1]}"
    mode, method = str(call.attrs.coordinate_transformation_mode), str(call.attrs.rounding_method)
    for axis, size, k in (("H", shape[2], f[0]), ("W", shape[3], f[1])):
        got = index_map(size, size * k, mode, method)
        if got is None:
            return f"coordinate_transformation_mode {mode}"
        want = np.arange(size * k) // k
        bad = np.nonzero(got != want)[0]
        if bad.size:
            o = int(bad[0])
            return (
                f"{mode} with rounding {method or 'default'} maps output {axis} {o} to input {int(got[o])}, "
                f"not floor({o} / {k}) = {int(want[o])}"
            )
    return None


def constraint_resize_channels(x, elem: int):
    """NPU_E_RESIZE: an upsampled map's pixel (C channels) must fill whole 16-byte SRAM beats (C a multiple
    of 8 in fp16, of 16 in int8): each copy writes the output at an offset of whole input pixels, and a
    POOL output address is a multiple of 16 bytes (docs/npu.md section 3)."""
    c = static_shape(x)[1]
    return None if c * elem % SLICE_ALIGNMENT == 0 else f"{c} channels of {elem} bytes"


def constraint_resize_fits(x, call, elem: int, cfg: NPUConfig):
    """NPU_E_SRAM: an upsampling's smallest tile must fit SRAM: two buffers of one input row and two of the
    fH output rows it becomes, each with the fH - 1 rows and fW - 1 pixels more that its copies' footprints
    reach past the tile (rows x stride from a copy's first byte). A larger map runs on the CPU; a
    configuration with more SRAM keeps it on the NPU."""
    c, w = static_shape(x)[1], static_shape(x)[3]
    fh, fw = factors(x, call)
    a = cfg.alignment
    row_in, row_out = -(-w * c * elem // a) * a, -(-w * fw * c * elem // a) * a
    out_buf = -(-((2 * fh - 1) * row_out + (fw - 1) * c * elem) // a) * a
    need = 2 * row_in + 2 * out_buf
    return f"{need} bytes > {cfg.sram_bytes}" if need > cfg.sram_bytes else None


def constraint_resize_same_quantization(dq, q):
    """NPU_E_QUANT_SCALE: an int8 upsampling copies codes: its output's scale and zero point must be its
    input's (dequantize -> resize -> quantize with one set of parameters); else it stays on the CPU."""
    a = [float(np.asarray(constant_value(x)).reshape(-1)[0]) for x in dq.args[1:3]]
    b = [float(np.asarray(constant_value(x)).reshape(-1)[0]) for x in q.args[1:3]]
    return None if a == b else f"scale / zero point {a} -> {b}"


# Every constraint of this module, for the generated supported-ops table.
ALL_CONSTRAINTS = [
    constraint_resize_method,
    constraint_resize_layout,
    constraint_resize_factor,
    constraint_resize_channels,
    constraint_resize_fits,
    constraint_resize_same_quantization,
]
