"""Supported-operator rules: small `constraint_*` functions whose docstrings are the user-facing reasons.

A constraint returns None when the op is acceptable, or a short detail string when it is not; the
rejection is recorded with the constraint's reason code and docstring, so the partition report can say
exactly why an op stayed on the CPU and what to change. The limits come from the partition's NPUConfig,
which the checks (checks.py) pass in: no constraint reads state of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tvm.ir.prim.expr import FloatImm, IntImm
from tvm.relax import Var

from ..contract.config import NPUConfig
from ..ir.group_quant import group_parts, npu_group_layout
from ..ir.values import constant_value, dtype_of, static_shape


@dataclass(frozen=True)
class ModelIO:
    """What the quantized-staging checks need to know about `main` (docs/npu.md section 2, format 1.3)."""

    inputs: frozenset  # parameters of main read by exactly one binding
    outputs: frozenset  # vars that main returns and nothing else reads (directly or in its result tuple)


@dataclass
class Rejection:
    """One op the pattern table matched but a constraint refused."""

    var: str  # the Relax variable bound to the op's result
    op: str
    pattern: str
    code: str
    reason: str
    detail: str
    # The op's constant weight (int8 codes or float values), when it has one: fusion renames vars, so
    # the report finds the op again inside an NPU composite by its weight.
    weight: object = None


# --- constraints: docstring = reason shown to the user; first word of the code = reason code ---


def constraint_float32(exprs):
    """NPU_E_DTYPE: tensors must be float32 (run on the NPU's fp16 datapath); int8 arrives with QDQ."""
    bad = [dtype_of(e) for e in exprs if dtype_of(e) != "float32"]
    return f"dtype {bad[0]}" if bad else None


def constraint_static_shape(exprs):
    """NPU_E_DYNAMIC_SHAPE: every shape must be static; symbolic dimensions stay on the CPU."""
    return "symbolic or unknown shape" if any(static_shape(e) is None for e in exprs) else None


def constraint_rank(exprs, cfg: NPUConfig):
    """NPU_E_RANK: tensors must have rank 1 to max_rank (4); scalar (rank-0) tensors stay on the CPU."""
    ranks = [len(static_shape(e)) for e in exprs]
    if min(ranks) == 0:  # no stored row (docs/npu.md section 3) to lay it out in
        return "a rank-0 tensor"
    return f"rank {max(ranks)} > {cfg.max_rank}" if max(ranks) > cfg.max_rank else None


def constraint_conv_layout(call):
    """NPU_E_LAYOUT: conv2d must use data layout NCHW or NHWC, kernel layout OIHW, OHWI or HWIO."""
    a = call.attrs
    if a.data_layout not in ("NCHW", "NHWC") or a.kernel_layout not in ("OIHW", "OHWI", "HWIO"):
        return f"data_layout {a.data_layout}, kernel_layout {a.kernel_layout}"
    if a.out_layout != a.data_layout:
        return f"out_layout {a.out_layout} differs from data_layout {a.data_layout}"
    return None


def constraint_stride(call):
    """NPU_E_STRIDE: convolution strides must be 1 or 2."""
    strides = [int(s) for s in call.attrs.strides]
    return f"strides {strides}" if any(s not in (1, 2) for s in strides) else None


def constraint_groups(call):
    """NPU_E_GROUPS: convolution groups must be 1 or depthwise (groups == input channels == output
    channels); other grouped convolutions stay on the CPU."""
    groups = int(call.attrs.groups)
    if groups == 1:
        return None
    layout = str(call.attrs.data_layout)
    cin = static_shape(call.args[0])[layout.index("C")]
    cout = static_shape(call)[layout.index("C")]
    return None if groups == cin == cout else f"groups {groups} with {cin} -> {cout} channels"


def constraint_int8_activations(exprs, wide: bool = False):
    """NPU_E_QUANT_DTYPE: quantized activations must be int8, or uint8 with a constant zero point (it runs
    as int8 with the zero point minus 128), or int16 for elementwise ops and requantizations (an LSTM's
    16-bit cell state)."""
    allowed = ("int8", "int16") if wide else ("int8",)
    bad = [dtype_of(e) for e in exprs if dtype_of(e) not in allowed]
    return (
        f"dtype {bad[0]}" + ("" if wide or bad[0] != "int16" else " (int16 only in elementwise ops)") if bad else None
    )


def constraint_per_tensor(qcalls):
    """NPU_E_QUANT_SCALE: activation scales and zero points must be per-tensor constants."""
    for call in qcalls:
        for arg in call.args[1:3]:
            value = constant_value(arg)
            if value is None or value.size != 1:
                return "per-channel or non-constant activation quantization"
    return None


def _quantized_dtype(call) -> str:
    """The integer dtype of a quantize's output or of a dequantize's input."""
    return str(call.attrs.out_dtype) if call.op.name == "relax.quantize" else dtype_of(call.args[0])


# A zero point the NPU stores (uint8 as int8 with the zero point minus 128; int16 has none).
_ZERO_POINT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (0, 0)}


def constraint_quant_params(qcalls):
    """NPU_E_QUANT_SCALE: quantization scales must be finite and > 0, and zero points within the
    integer dtype's range (int8 -128..127, uint8 0..255, int16 only 0): the NPU's integer rescaling
    has no form for a zero, negative, NaN or infinite scale. Such a QDQ group runs on the CPU, as TVM
    computes it."""
    for call in qcalls:
        scale, zp = constant_value(call.args[1]), constant_value(call.args[2])
        if scale is None or zp is None:
            continue  # constraint_per_tensor gives the reason
        bad = [float(s) for s in np.asarray(scale, np.float64).reshape(-1) if not (math.isfinite(s) and s > 0)]
        if bad:
            return f"scale {bad[0]:g} of {call.op.name.removeprefix('relax.')}"
        dtype = _quantized_dtype(call)
        lo, hi = _ZERO_POINT_RANGE.get(dtype, (-(2**63), 2**63 - 1))
        out = [int(z) for z in np.asarray(zp).reshape(-1) if not lo <= int(z) <= hi]
        if out:
            return f"zero point {out[0]} of {dtype} {call.op.name.removeprefix('relax.')} (range {lo}..{hi})"
    return None


def constraint_symmetric_weights(dq, out_axis: int):
    """NPU_E_QUANT_WEIGHT: int8 weights must be symmetric (zero point 0; uint8 weights: zero point 128,
    as quantize_static's per-channel ones), per-tensor or per-channel along the output channels."""
    codes, zps = constant_value(dq.args[0]), constant_value(dq.args[2])
    if codes is None or codes.dtype != "int8":
        return f"weight dtype {None if codes is None else codes.dtype}"
    if zps.any():
        return "non-zero weight zero point"
    scales = constant_value(dq.args[1])
    axis = int(dq.attrs.axis) % codes.ndim
    if scales is not None and scales.size > 1 and axis != out_axis:
        # The requantization applies one scale per output channel (docs/npu.md section 2).
        return f"per-channel weight scales along axis {axis}, not the output channels (axis {out_axis})"
    return None


def constraint_int4_weights(weight, resolve):
    """NPU_E_QUANT_WEIGHT: group-wise int4 weights under int8 activations (W4A8) must be what CONV2D's
    w_dtype int4 / uint4 computes exactly: integer 4-bit codes (int4 -8..7, or uint4 0..15 with uint4 zero
    points), one fp16-normal scale (and zero point) per group of 32, 64 or 128 along K, K a multiple of the
    group."""
    expr, perms = resolve(weight), []
    while getattr(getattr(expr, "op", None), "name", "") == "relax.permute_dims":
        perms.append(expr.attrs.axes)
        expr = resolve(expr.args[0])
    parts = group_parts(expr, resolve)
    if parts is None:
        return "the weight is not a constant group-wise dequantization"
    layout = npu_group_layout(*parts, perms)
    return layout if isinstance(layout, str) else None


def constraint_same_shape(lhs, rhs):
    """NPU_E_BROADCAST: both operands of the ADD command must be tensors of the same static shape
    (broadcast and constant operands run as ELTWISE instead, see eltwise)."""
    if constant_value(lhs) is not None or constant_value(rhs) is not None:
        return "constant operand"
    a, b = static_shape(lhs), static_shape(rhs)
    return None if a == b else f"shapes {list(a)} and {list(b)}"


def constraint_pool(call):
    """NPU_E_POOL: pooling must be NCHW/NHWC, strides 1 or 2, no dilation, no ceil mode, and an average
    pool must divide by the full window (no padding, or count_include_pad); mean only over H and W,
    keepdims."""
    if call.op.name == "relax.mean":
        axes = sorted(int(a) % 4 for a in call.attrs.axis) if call.attrs.axis is not None else None
        if len(static_shape(call.args[0])) != 4 or axes != [2, 3] or not call.attrs.keepdims:
            return "mean is not a global average pool over H and W with keepdims"
        return None
    a = call.attrs
    if str(a.layout) not in ("NCHW", "NHWC") or str(a.out_layout) != str(a.layout):
        return f"layout {a.layout}"
    strides = [int(s) for s in a.strides]
    if any(s not in (1, 2) for s in strides):
        return f"strides {strides}"
    dilation = [int(d) for d in a.dilation]
    if any(d != 1 for d in dilation):  # POOL has no dilation operand (docs/npu.md section 6)
        return f"dilation {dilation}"
    if bool(a.ceil_mode):
        return "ceil_mode"
    if call.op.name == "relax.nn.avg_pool2d" and any(int(p) for p in a.padding) and not bool(a.count_include_pad):
        return "padded average pool that excludes the padding from the divisor"
    return None


def constraint_pool_window_fits(call, elem: int, cfg: NPUConfig):
    """NPU_E_SRAM: one output row of a pool reads a window of input rows; the window, double-buffered with
    the output row, must fit in SRAM (a global pool's window is the whole map). A larger map pools on the
    CPU; a configuration with more SRAM keeps it on the NPU."""
    layout = "NCHW" if call.op.name == "relax.mean" else str(call.attrs.layout)
    (c, h, w), out_w = (
        [static_shape(call.args[0])[layout.index(d)] for d in "CHW"],
        static_shape(call)[layout.index("W")],
    )
    rows = h if call.op.name == "relax.mean" else min(h, int(call.attrs.pool_size[0]))
    line = lambda n: -(-n * c * elem // cfg.alignment) * cfg.alignment  # noqa: E731 (an SRAM row of n pixels)
    need = 2 * rows * line(w) + 2 * line(out_w)
    return (
        f"a window of {rows} rows of {w} x {c}: {need} bytes double-buffered > {cfg.sram_bytes}"
        if need > cfg.sram_bytes
        else None
    )


def constraint_width(widths, cfg: NPUConfig):
    """NPU_E_WIDTH: feature-map width (and a matrix's inner dimension) must be at most max_width (2048)."""
    worst = max(widths)
    return f"width {worst} > {cfg.max_width}" if worst > cfg.max_width else None


def constraint_vector_width(shape, cfg: NPUConfig):
    """NPU_E_WIDTH: an elementwise op (add, subtract, multiply, maximum, minimum, a unary function such
    as GELU or SiLU, a requantization) on a tensor of rank 1 to 3 may be of any width: the NPU stores it
    as rows of its last axis and runs a row wider than max_width (4096 on npu-laptop) as several
    commands over column slices of at most max_width, with the same results. A 4-D tensor is a feature
    map or rows depending on its neighbours, decided with its region: its last axis must be at most
    max_width."""
    if len(shape) != 4 or shape[-1] <= cfg.max_width:
        return None
    return f"width {shape[-1]} of a 4-D tensor > {cfg.max_width}"


# int32 accumulation of int8 x int8 products (each at most 128 * 127 in magnitude) cannot overflow below this.
INT8_MAX_TERMS = (2**31 - 1) // (128 * 127)


def constraint_dense_fits(k: int, n: int, elem: int, cfg: NPUConfig):
    """NPU_E_SRAM: a dense layer's inner dimension K and its output columns N are not limited by max_width
    (the MAC array takes K in passes of mac_rows and the planner streams output columns in blocks), but
    its smallest weight block must fit SRAM: the weights of one block of output columns (mac_cols,
    rounded up to whole alignment-byte lines; a layer of fewer than twice that many columns is one
    block) for the whole of K, with two input rows and two output rows of the block; and for int8, K at
    most 132104, so the int32 accumulator cannot overflow. A larger layer runs on the CPU; a
    configuration with more SRAM keeps it on the NPU."""
    line = lambda nbytes: -(-nbytes // cfg.alignment) * cfg.alignment  # noqa: E731 (an SRAM line)
    if elem == 1 and k > INT8_MAX_TERMS:
        return f"K {k} > {INT8_MAX_TERMS} int8 terms (int32 accumulator)"
    step = math.lcm(cfg.mac_cols, max(1, cfg.alignment // elem))
    block = step if n >= 2 * step else n  # the planner halves a layer into blocks of `step` columns or more
    need = block * line(k * elem) + 2 * line(block * 4) + 2 * line(k * elem) + 2 * line(block * elem)
    if need > cfg.sram_bytes:
        return f"K {k}: a {block}-column weight block needs {need} bytes > {cfg.sram_bytes}"
    return None


def constraint_bias_per_channel(bias, out_channels: int, channel_axis: int, out_rank: int):
    """NPU_E_BIAS: a fused bias must be a constant broadcast along the output channels only."""
    shape = static_shape(bias)
    if shape is None:
        return "bias shape unknown"
    if len(shape) == 1 and shape[0] == out_channels and channel_axis == out_rank - 1:
        return None
    expected = [1] * out_rank
    expected[channel_axis] = out_channels
    if list(shape) == expected:
        return None
    return f"bias shape {list(shape)} is not a per-channel vector of {out_channels}"


def constraint_clip_bounds(act):
    """NPU_E_ACTIVATION: clip bounds must be compile-time numbers, the lower one at most the upper
    one."""
    if act is None or act.op.name != "relax.clip":
        return None
    for bound in act.args[1:]:
        if not isinstance(bound, (IntImm, FloatImm)):
            return f"clip bound {bound} is not a constant"
    lo, hi = (b.value for b in act.args[1:])
    # The NPU clips as min(max(x, lo), hi), hi everywhere when lo > hi; TVM's R.clip gives lo there.
    return f"clip bounds {lo} > {hi}" if lo > hi else None


FP16_MAX = 65504.0


def constraint_fp16_constants(constants):
    """NPU_E_RANGE: a float constant the fp16 datapath reads (a conv or dense weight, an elementwise
    operand) must lie within fp16's range (abs(x) <= 65504): the compiler stores it as fp16,
    where a larger value becomes inf and turns finite answers into inf or NaN. Scale the constant down
    (and the op's input or output up), or the op runs on the CPU in float32."""
    for const in constants:
        value = constant_value(const) if const is not None else None
        if value is None or value.dtype != np.float32 or value.size == 0:
            continue  # int8 codes, or not a constant: nothing converted to fp16 here
        finite = value[np.isfinite(value)]
        big = float(np.abs(finite).max()) if finite.size else 0.0
        if big > FP16_MAX:
            return f"constant {list(value.shape)} holds {big:.6g}"
    return None


NCHW, NHWC, ROWS = "NCHW", "NHWC", "ROWS"  # how the NPU stores a tensor (docs/npu.md section 3; layouts.py)


def rows_of(shape, layout: str = ROWS) -> tuple:
    """(rows, elements per row) of a tensor as the NPU stores it (docs/npu.md section 3): a 4-D NCHW map
    is N*H rows of W*C; ROWS (every other rank, and a 4-D tensor of row-wise ops) is row-major with the
    last dimension as the row."""
    if len(shape) == 4 and layout != ROWS:
        n, c, h, w = shape if layout == NCHW else (shape[0], shape[3], shape[1], shape[2])
        return n * h, w * c
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return rows, int(shape[-1])


def reshape_layouts(src, dst) -> frozenset:
    """The layouts of the 4-D side(s) in which a reshape `src` -> `dst` keeps the stored rows: NCHW when
    the map's spatial dims are 1 x 1 (a larger map interleaves channels into its rows), ROWS when the
    rows of the last axis stay the same."""
    ok = set()
    for layout in (NCHW, ROWS):
        spatial = any(len(s) == 4 and s[2] * s[3] != 1 for s in (src, dst))
        if not (layout == NCHW and spatial) and rows_of(src, layout) == rows_of(dst, layout):
            ok.add(layout)
    return frozenset(ok)


def constraint_reshape_keeps_rows(call):
    """NPU_E_LAYOUT: on the NPU a reshape is free only when it keeps the stored rows: flattening an
    [N, C, 1, 1] map to [N, C], or, for tensors stored as rows of their last axis (every rank but a 4-D
    map; a 4-D tensor of matmuls, softmax, norms, rope), keeping the last axis and the product of the
    others (e.g. [1, S, H, D] -> [1, S, H * D] is not, [1, H, S, D] -> [H, S, D] is); other reshapes move
    data and stay on the CPU."""
    if constant_value(call.args[0]) is not None:
        return "constant input (folded at compile time instead)"
    src, dst = static_shape(call.args[0]), static_shape(call)
    return None if reshape_layouts(src, dst) else f"reshape {list(src)} -> {list(dst)}"


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


# The two permutations between an NCHW map and its pixels as rows ([N, H, W, C], a row per pixel).
PERMUTE_VIEWS = {(0, 2, 3, 1): (NCHW, ROWS), (0, 3, 1, 2): (ROWS, NCHW)}


def permute_view_layouts(call) -> tuple | None:
    """(input layout, output layout) of a permute_dims the NPU runs as a view, or None (PERMUTE_VIEWS)."""
    axes = call.attrs.axes
    key = tuple(int(a) for a in axes) if axes is not None else None
    return PERMUTE_VIEWS.get(key) if len(static_shape(call) or ()) == 4 else None


def constraint_permute_view(call, elem: int, cfg: NPUConfig):
    """NPU_E_LAYOUT: a permute_dims runs on the NPU between an NCHW map and its pixels as rows
    ([N, C, H, W] -> [N, H, W, C], axes [0, 2, 3, 1]: a transformer block's tokens, stored a row per
    pixel) or back (axes [0, 3, 1, 2]). With a pixel's channels filling whole aligned rows (C x element
    bytes a multiple of the alignment, 128 bytes: SD-1.5's 320, 640 and 1280 fp16 channels) the map's
    rows are the pixels' rows: a view, no byte moves. A narrower pixel (the tiny UNet's 32 fp16
    channels, 64 bytes) is copied between the two pitches by strided POOL 1x1 copies, exact
    (backend/plan/restride_plan.py): its bytes must be a multiple of 16 (POOL's pixel stride, C a
    multiple of 8 in fp16), and one map row on each side, twice (ping / pong), must fit in SRAM. Other
    permutations move data another way and stay on the CPU."""
    if constant_value(call.args[0]) is not None:
        return "constant input (folded at compile time instead)"
    if permute_view_layouts(call) is None:
        axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None else "reversed"
        return f"axes {axes} of a rank-{len(static_shape(call) or ())} tensor"
    shape = static_shape(call)
    to_rows = int(call.attrs.axes[1]) == 2
    c, w = (shape[3], shape[2]) if to_rows else (shape[1], shape[3])
    px = c * elem
    if px % cfg.alignment == 0:
        return None
    if px % 16:
        return f"{c} channels of {elem} byte(s): {px} bytes a pixel, neither a multiple of {cfg.alignment} nor of 16"
    band = 2 * (_align(w * px, cfg.alignment) + w * _align(px, cfg.alignment))
    if band > cfg.sram_bytes:
        return f"one map row of {w} pixels at both pitches needs {band} bytes of SRAM, more than {cfg.sram_bytes}"
    return None


def constraint_same_quantization(dq, q):
    """NPU_E_QUANT_SCALE: a quantized reshape or slice must keep its scale and zero point (it moves no
    data)."""
    a = [float(constant_value(x).reshape(-1)[0]) for x in dq.args[1:3]]
    b = [float(constant_value(x).reshape(-1)[0]) for x in q.args[1:3]]
    return None if a == b else f"scale / zero point {a} -> {b}"


# Slice addresses are 16-byte aligned (docs/npu.md section 3); a joined tensor stays resident in SRAM
# while its inputs are written into it, so it may take at most this share of SRAM.
CONCAT_SRAM_SHARE = 4


def constraint_concat(call, inputs: list, elem: int, cfg: NPUConfig):
    """NPU_E_CONCAT: a concatenation runs on the NPU when it stacks matrices along their rows (axis 0 of
    a tensor of rank 2 or 3), or joins 4-D NCHW tensors along the channels (axis 1) with every input's
    channels filling whole 16-byte SRAM beats (multiples of 8 fp16 or 16 int8 channels) and the
    result fitting in a quarter of SRAM (it stays there while its inputs are written into it); every
    input must be a computed tensor (the NPU has no command that writes a constant into the result)."""
    if any(constant_value(t) is not None for t in inputs):
        return "a constant input"
    shape = static_shape(call)
    axis = int(call.attrs.axis) if call.attrs.axis is not None else 0
    if len(shape) in (2, 3) and axis % len(shape) == 0:
        return None  # whole rows: each input is written at its row offset
    if len(shape) != 4 or axis % 4 != 1:
        return f"axis {axis} of a rank-{len(shape)} tensor"
    odd = [static_shape(t)[1] for t in inputs if static_shape(t)[1] * elem % 16]
    if odd:
        return f"input channels {odd} are not multiples of {16 // elem}"
    n, c, h, w = shape
    nbytes = n * h * -(-w * c * elem // cfg.alignment) * cfg.alignment
    limit = cfg.sram_bytes // CONCAT_SRAM_SHARE
    return f"result of {nbytes} bytes > {limit}" if nbytes > limit else None


def _ints(tup) -> list:
    return [int(f.value) for f in tup.fields]


def constraint_slice_rows(call):
    """NPU_E_LAYOUT: on the NPU a slice is free only when it takes whole leading rows (axis 0 of a
    tensor of rank 2 or 3, step 1): it becomes a view at a row offset; other slices move data and stay
    on the CPU."""
    shape = static_shape(call.args[0])
    axes = _ints(call.args[1])
    steps = _ints(call.args[4]) if len(call.args) > 4 else [1]
    if len(shape) not in (2, 3) or axes != [0] or steps != [1]:
        return f"axes {axes}, steps {steps} of a rank-{len(shape)} tensor"
    return None


def constraint_weight_2d(weight):
    """NPU_E_RANK: a matmul's weight must be a 2-D matrix (batched matmul stays on the CPU)."""
    return None if len(static_shape(weight)) == 2 else f"weight rank {len(static_shape(weight))}"


COMMUTATIVE = ("relax.add", "relax.multiply", "relax.maximum", "relax.minimum")


def _b_mode(out, a, b) -> str | None:
    """The b_mode of ELTWISE for a = `a`, b = `b` (docs/npu.md section 6), or None. The channel axis is
    1 of a 4-D NCHW map, else the last (a matrix row, section 3; a 4-D tensor stored as rows)."""
    sa, sb = static_shape(a), static_shape(b)
    if sa != out or constant_value(a) is not None or len(sb) > len(out):
        return None
    const_b = constant_value(b) is not None
    if sb == out:
        return None if const_b else "same"  # a full-size constant would cost a full-size DMA per tile
    full = [1] * (len(out) - len(sb)) + list(sb)
    if all(d == 1 for d in full):
        return "scalar" if const_b else None
    # A 4-D result's channel: axis 1 of an NCHW map, or the last axis of rows / an NHWC map (layouts.py).
    for axis in (1, 3) if len(out) == 4 else (len(out) - 1,):
        if full[axis] == out[axis] and all(d == 1 for i, d in enumerate(full) if i != axis):
            # A tensor b is a region input staged by the runtime: its host form must be one stored row.
            return "channel" if const_b or len(out) != 4 or len(sb) == 4 or axis == 3 else None
    # One channel vector per image ([N, C, 1, 1] of an NCHW map, N > 1: a ResNet block's time embedding at
    # batch N): a tile never spans two images, so each tile reads b at its image's row (plan/emit.py).
    # A tensor only: a constant's one row in the weight slot is the same for every image.
    if len(out) == 4 and len(sb) == 4 and not const_b and full[0] == out[0] > 1 and full[1] == out[1]:
        return "channel" if full[2] == full[3] == 1 else None
    return None


def broadcast_mode(call, lhs, rhs) -> tuple:
    """How ELTWISE runs `call(lhs, rhs)`: (b_mode, swapped), `swapped` when the broadcast operand comes
    first (commutative ops only); or (None, detail)."""
    if constant_value(lhs) is not None and constant_value(rhs) is not None:
        return None, "both operands are constants (folded at compile time instead)"
    out = static_shape(call)
    order = [(lhs, rhs, False)] + ([(rhs, lhs, True)] if call.op.name in COMMUTATIVE else [])
    for a, b, swapped in order:
        mode = _b_mode(out, a, b)
        if mode is not None:
            return mode, swapped
    kinds = ["constant" if constant_value(e) is not None else "tensor" for e in (lhs, rhs)]
    return None, (f"{kinds[0]} {list(static_shape(lhs))} and {kinds[1]} {list(static_shape(rhs))} -> {list(out)}")


def constraint_broadcast(call, lhs, rhs):
    """NPU_E_BROADCAST: the second operand of an elementwise add / subtract / multiply / maximum /
    minimum must be a tensor of the output's shape, a per-channel vector (axis 1 of an NCHW map, as a
    tensor only [C], [1, C] or [1, C, 1, 1], or one per image, a tensor [N, C, 1, 1]; or the
    last axis, of any rank: a 4-D result is then stored as rows of its last axis) or a scalar constant;
    the first operand must have the output's shape (a broadcast first operand only for add, multiply,
    maximum, minimum); not both constants."""
    mode, detail = broadcast_mode(call, lhs, rhs)
    return detail if mode is None else None


def constraint_eltwise_scales(dq_a, dq_b, q, multiply: bool):
    """NPU_E_QUANT_SCALE: an int8 elementwise op's input-to-output scale ratio (s_a * s_b / s_y for
    multiply) must be below 2^30, so its integer multiplier keeps a shift of at least 1."""
    s = [float(constant_value(x.args[1]).reshape(-1)[0]) for x in (dq_a, dq_b, q)]
    ratios = [s[0] * s[1] / s[2]] if multiply else [s[0] / s[2], s[1] / s[2]]
    return f"scale ratio {max(ratios):.3g}" if max(ratios) >= 2.0**30 else None


def reason_code(constraint) -> str:
    return constraint.__doc__.split(":", 1)[0]


def reason_text(constraint) -> str:
    return " ".join(constraint.__doc__.split(":", 1)[1].split())


def constraint_model_input(data, io: ModelIO | None):
    """NPU_E_QUANT_IO: the NPU quantizes only a model input (a parameter of main) that nothing else reads:
    the runtime converts it from float32 as it stages the input (format 1.3). A quantize of a value the
    model computes, on the CPU or on the NPU, runs on the CPU (the NPU has no float-to-integer command)."""
    if io is not None and data in io.inputs:
        return None
    return f"{getattr(data, 'name', 'the input')} is not a model input read only here"


def constraint_model_output(result, io: ModelIO | None):
    """NPU_E_QUANT_IO: the NPU dequantizes only a model output (returned by main and read by nothing
    else): the runtime converts it to float32 as it stages the output (format 1.3). Other dequantizes run
    inside the int8 op that reads them, or on the CPU."""
    return (
        None
        if io is not None and result is not None and result in io.outputs
        else "its result is not only a model output"
    )


def constraint_staged_reshape(reshape, quantized):
    """NPU_E_QUANT_IO: a reshape between a model input or output and its quantize or dequantize joins the
    staging when it keeps the last dimension and the integer tensor is not 4-D (the runtime stages it as
    rows of the last dimension)."""
    a, b = static_shape(reshape.args[0]), static_shape(reshape)
    q = static_shape(quantized)
    if a is None or b is None or q is None or not a or not b or a[-1] != b[-1] or len(q) == 4:
        return f"reshape {None if a is None else list(a)} -> {None if b is None else list(b)}"
    return None


def constraint_softmax_axis(call):
    """NPU_E_AXIS: softmax must run over the last axis (a matrix's rows; a 4-D tensor such as attention's
    [1, H, S, T] scores is then stored as rows of its last axis, ROWS, and a region whose conv or pool
    needs that tensor as an NCHW map is cut there, layouts.py); other axes stay on the CPU."""
    rank = len(static_shape(call))
    axis = int(call.attrs.axis) % max(rank, 1)
    if axis != rank - 1:
        return f"axis {int(call.attrs.axis)} of a rank-{rank} tensor"
    return None


def constraint_softmax_input(data, bound):
    """NPU_E_RANGE: softmax may not read a float32 model input (directly or through a reshape or row
    slice): the runtime rounds it to fp16 as it stages it, which moves a value x by up to abs(x) * 2^-11
    (4 near 10000), and softmax turns a shift d of the difference of two inputs into a factor e^d
    between their outputs (results off by a factor of up to 3000 near 10000). The float input of unknown
    range stays on the CPU; a softmax of a value the NPU computes keeps the fp16 datapath's precision
    (docs/npu.md section 2)."""
    # `bound`: the vars the bindings before the softmax make; a var that none makes is a parameter of main.
    return f"{data.name} is a model input" if isinstance(data, Var) and data not in bound else None


# Every constraint of this module (transformer_constraints.py has its own), for the supported-ops table.
ALL_CONSTRAINTS = [
    constraint_float32,
    constraint_static_shape,
    constraint_rank,
    constraint_conv_layout,
    constraint_stride,
    constraint_groups,
    constraint_width,
    constraint_vector_width,
    constraint_bias_per_channel,
    constraint_clip_bounds,
    constraint_weight_2d,
    constraint_int8_activations,
    constraint_per_tensor,
    constraint_quant_params,
    constraint_symmetric_weights,
    constraint_int4_weights,
    constraint_same_shape,
    constraint_pool,
    constraint_pool_window_fits,
    constraint_reshape_keeps_rows,
    constraint_permute_view,
    constraint_same_quantization,
    constraint_concat,
    constraint_dense_fits,
    constraint_slice_rows,
    constraint_broadcast,
    constraint_eltwise_scales,
    constraint_softmax_axis,
    constraint_softmax_input,
    constraint_fp16_constants,
    constraint_model_input,
    constraint_model_output,
    constraint_staged_reshape,
]
