"""Supported-operator rules of the transformer ops (format 1.4): attention's softmax scale and mask, LayerNorm
and RMSNorm, the matmul of two activations, and rotary position embedding. Same form as constraints.py: each
`constraint_*` returns None or a short detail, and its docstring is the user-facing reason the partition
report prints.
"""

from __future__ import annotations

import numpy as np

from ..contract.config import NPUConfig
from ..ir.values import constant_value, static_shape
from .constraints import FP16_MAX

# A mask value SOFTMAX may round to fp16: |m| <= 16 moves by at most 2^-7, an output factor below 1%.
MASK_ROUNDING_SAFE = 16.0
# exp(-110) is 0 in fp32 (below the smallest subnormal, about e^-103.3), as exp(-inf) is.
EXP_UNDERFLOW = 110.0


def softmax_scale(const, divide: bool, in_shape=None, shape=None):
    """(the fp32 factor SOFTMAX multiplies by, None), or (None, why not): x * c, or x / c as x * (1 / c);
    x must have the softmax's shape (a factor of a higher rank would broadcast x)."""
    if in_shape != shape:
        return None, f"x {list(in_shape)} broadcast to {list(shape)}"
    value = constant_value(const)
    if value is None or value.dtype != np.float32 or value.size != 1:
        return None, "the factor is not one float32 constant"
    c = np.float32(value.reshape(-1)[0])
    with np.errstate(divide="ignore", over="ignore"):
        s = np.float32(1.0) / c if divide else c
    if not (np.isfinite(c) and np.isfinite(s) and c != 0 and s != 0):
        return None, f"factor {'1 / ' if divide else ''}{float(c):.6g}"
    return float(s), None


def softmax_mask(const, shape, scale: float, in_shape=None):
    """(the mask rows [R, E] SOFTMAX reads, as fp16, None), or (None, why not), for a constant mask added
    to scores of `in_shape` giving `shape` (constraint_softmax_mask states the rules)."""
    if in_shape is not None and list(in_shape) != list(shape):
        return None, f"scores {list(in_shape)} broadcast to {list(shape)}"
    value = constant_value(const)
    if value is None or value.dtype != np.float32:
        return None, "the mask is not a float32 constant"
    ms, rows_of = list(value.shape), shape[-2] if len(shape) >= 2 else 1
    rows = ms[-2] if len(ms) >= 2 else 1
    if not ms or len(ms) > len(shape) or ms[-1] != shape[-1] or any(d != 1 for d in ms[:-2]):
        return None, f"mask {ms} for scores {list(shape)}"
    if rows not in (1, rows_of):
        return None, f"mask {ms}: {rows} rows for {rows_of} query rows"
    m = value.reshape(rows, shape[-1]).astype(np.float64)
    if np.isnan(m).any() or (m == np.inf).any():
        return None, "the mask holds NaN or +inf"
    finite = np.isfinite(m)
    with np.errstate(over="ignore"):
        exact = finite & (m.astype(np.float16).astype(np.float64) == m)
    bound = 2 * FP16_MAX * abs(scale) + FP16_MAX + EXP_UNDERFLOW
    huge = finite & (m < -bound)
    ok = ~finite | exact | (np.abs(m) <= MASK_ROUNDING_SAFE) | huge
    if not ok.all():
        return None, f"mask value {m[~ok][0]:.6g}"
    if not (~finite | huge).any():  # a bias (a dense's, say), not a mask: the bias fusion keeps it
        return None, "the mask hides no element (no -inf, no large negative)"
    normal = finite & ~huge
    for r in range(rows):
        if not normal[r].any() and finite[r].any():
            return None, f"mask row {r} hides every element, some with a finite value"
    return np.where(huge, -np.inf, m).astype(np.float16), None


def constraint_softmax_scale(const, divide: bool, in_shape, shape):
    """NPU_E_SOFTMAX_SCALE: the factor on a softmax's input (x * c, or x / c as TVM imports a division by
    sqrt(d)) must be one finite, non-zero float32 constant whose fp32 reciprocal (for a division) is finite
    and non-zero, and must not broadcast x to a larger shape: SOFTMAX multiplies each element by one fp32
    factor, and x / c becomes x * (1 / c), within 1 fp32 ulp (docs/npu.md section 2)."""
    return softmax_scale(const, divide, in_shape, shape)[1]


def constraint_softmax_mask(const, shape, scale: float, in_shape):
    """NPU_E_MASK: the constant added to a softmax's input must be an additive attention mask SOFTMAX
    reproduces exactly: float32, not broadcasting the scores to a larger shape, its last axis the row's
    length, one row or one per query row (the second-to-last axis of the scores) and 1 on every axis
    before; each value -inf, exact in fp16, within +-16 (fp16 rounding moves it by at most 2^-7), or a
    large negative (below -(2 * 65504 * |scale| + 65504 + 110), e.g. -1e9 or float32's lowest) that
    SOFTMAX reads as -inf, whose exp is 0 either way; it must hide an element (-inf or a large negative:
    a constant that hides none is a bias, left to the op before); and every mask row keeps an element, or
    hides all of them with -inf (a row of only -inf is NaN in TVM and on the NPU; one hidden by finite
    values is not, and on the NPU would be)."""
    return softmax_mask(const, shape, scale, in_shape)[1]


def constraint_norm_axes(call):
    """NPU_E_AXIS: layer_norm and rms_norm must normalize over the last axis alone (a matrix's rows: NORM
    works on rows; a 4-D tensor is then stored as rows of its last axis, ROWS, and a region whose conv or
    pool needs it as an NCHW map is cut there, layouts.py); several axes or another axis stay on the CPU."""
    rank = len(static_shape(call))
    axes = [int(a) % max(rank, 1) for a in call.attrs.axes]
    if axes != [rank - 1]:
        return f"axes {[int(a) for a in call.attrs.axes]} of a rank-{rank} tensor"
    return None


def constraint_norm_params(call):
    """NPU_E_NORM: gamma (and layer_norm's beta) must be float32 constants holding one value per element
    of the row (NORM reads them, unrounded, from the weight region), and epsilon finite and >= 0; a gamma
    or beta computed at run time stays on the CPU. layer_norm's center and scale must be True: TVM's own CPU
    kernels apply beta and gamma whatever the flags say, so a False flag has no single meaning to follow."""
    if call.op.name == "relax.nn.layer_norm" and not (bool(call.attrs.center) and bool(call.attrs.scale)):
        return f"center={bool(call.attrs.center)}, scale={bool(call.attrs.scale)}"
    eps = float(call.attrs.epsilon)
    if not np.isfinite(eps) or eps < 0:
        return f"epsilon {eps}"
    row = static_shape(call)[-1]
    for name, arg in zip(("gamma", "beta"), call.args[1:]):
        value = constant_value(arg)
        if value is None or value.dtype != np.float32 or value.size != row:
            shape = static_shape(arg)
            what = "not a constant" if value is None else f"{value.dtype} {list(value.shape)}"
            return f"{name} {list(shape) if shape is not None else '?'}: {what} (the row has {row} elements)"
    return None


# --- matmul of two activations (MATMUL, docs/npu.md section 4, format 1.4) ---


def constraint_matmul_rank(a_shape, b_shape):
    """NPU_E_RANK: a matmul of two activations must multiply batches of matrices of rank 3 or 4, both of the
    same rank (MATMUL's batch); 2-D and mixed-rank products stay on the CPU."""
    if len(a_shape) in (3, 4) and len(b_shape) == len(a_shape):
        return None
    return f"ranks {len(a_shape)} and {len(b_shape)}"


def constraint_matmul_float(a, b):
    """NPU_E_QUANT_MATMUL: a matmul of int8 (dequantized) activations runs on the NPU only in the QDQ form
    quantize(matmul(dequantize(a), dequantize(b))), B as it is or with its last two axes swapped, both
    operands int8 with per-tensor scales (MATMUL's int8 form, format 1.4); a dequantized operand in any
    other form (next to a float operand, a float result, B repeated for grouped-query attention) stays on
    the CPU: running the dequantized values through fp16 would not be the int8 model's integer arithmetic."""
    dq = [e for e in (a, b) if getattr(getattr(e, "op", None), "name", "") == "relax.dequantize"]
    return "a dequantized operand" if dq else None


def constraint_qmatmul_accumulator(k: int, a_zp: int, b_zp: int):
    """NPU_E_QUANT_MATMUL: an int8 matmul of two activations must keep its int32 accumulator exact: k *
    (128 + abs(a_zp)) * (128 + abs(b_zp)) below 2^31 (k at most 131,071 with zero points 0, 32,767 at -128 and
    -128; docs/npu.md section 2). A longer k stays on the CPU."""
    bound = k * (128 + abs(a_zp)) * (128 + abs(b_zp))
    return f"k {k} with zero points {a_zp}, {b_zp}: {bound} >= 2^31" if bound >= 2**31 else None


def constraint_matmul_batch(a_shape, b_shape, out_shape):
    """NPU_E_BROADCAST: a matmul's second operand must have each batch dimension equal to the first's or 1
    (MATMUL reads one B per output batch, by address); a first operand broadcast over the second's batches
    stays on the CPU."""
    if list(a_shape[:-2]) != list(out_shape[:-2]):
        return f"first operand batch {list(a_shape[:-2])} is broadcast to {list(out_shape[:-2])}"
    bad = [(x, y) for x, y in zip(a_shape[:-2], b_shape[:-2]) if y not in (x, 1)]
    return f"batch dims {list(b_shape[:-2])} against {list(a_shape[:-2])}" if bad else None


def constraint_matmul_fits(k: int, n: int, transposed: bool, cfg: NPUConfig, elem: int = 2):
    """NPU_E_SRAM: a matmul of two activations keeps one batch of its second operand whole in SRAM: twice
    (double-buffered), with two rows of the first operand and two of the output, it must fit (MATMUL's tiles
    split the rows of the first operand, not the second operand, format 1.4). A larger one runs on the CPU;
    a configuration with more SRAM keeps it on the NPU."""
    line = lambda elems: -(-elems * elem // cfg.alignment) * cfg.alignment  # noqa: E731 (an SRAM row)
    rows, cols = (n, k) if transposed else (k, n)
    need = 2 * (rows * line(cols) + line(k) + line(n))
    return (
        f"B batch [{rows}, {cols}]: {need} bytes double-buffered > {cfg.sram_bytes}" if need > cfg.sram_bytes else None
    )


def constraint_matmul_transpose(axes, rank: int):
    """NPU_E_LAYOUT: a permute_dims on a matmul's second operand must swap its last two axes only (MATMUL's
    b_transposed); other permutations stay on the CPU."""
    want = list(range(rank - 2)) + [rank - 1, rank - 2]
    return None if [int(x) for x in axes] == want else f"axes {[int(x) for x in axes]}"


def constraint_repeat_kv(src_shape, mid_shape, rep_shape, b_shape):
    """NPU_E_BROADCAST: a key/value repeat for grouped-query attention must be [B, H_kv, T, D] ->
    [B, H_kv, 1, T, D] -> broadcast [B, H_kv, g, T, D] -> [B, H_kv * g, T, D] (query head h reads KV head
    h / g, MATMUL's b_group); other repeats stay on the CPU."""
    if len(src_shape) == 4 and len(rep_shape) == 5 and len(b_shape) == 4:
        bt, hk, t, d = src_shape
        g = rep_shape[2]
        expected = ([bt, hk, 1, t, d], [bt, hk, g, t, d], [bt, hk * g, t, d])
        if (list(mid_shape), list(rep_shape), list(b_shape)) == expected:
            return None
    return f"{list(src_shape)} -> {list(mid_shape)} -> {list(rep_shape)} -> {list(b_shape)}"


# --- attention's head split and merge as MATMUL addressing (head slices, format 1.8) ---

HEAD_SPLIT_AXES = ([0, 2, 1, 3], [0, 2, 3, 1])  # [B, H, S, D] (Q, V); [B, H, D, S] (K^T)


def constraint_head_split(src_shape, split_shape, axes, transposed_ok: bool):
    """NPU_E_LAYOUT: attention's head split runs on the NPU as addressing only in the exporter's form: a
    reshape of [B, S, H * D] to [B, S, H, D] (the last axis split into H heads of D), static shapes, then
    permute_dims [0, 2, 1, 3] (Q, V; for the second operand, also [0, 2, 3, 1]: K^T), so that MATMUL reads
    head h at column h * D of the rows in place (format 1.8); another split stays on the CPU."""
    axes = [int(a) for a in axes] if axes is not None else None
    ok_axes = HEAD_SPLIT_AXES if transposed_ok else HEAD_SPLIT_AXES[:1]
    if src_shape is None or split_shape is None or len(src_shape) != 3 or len(split_shape) != 4:
        return f"reshape {src_shape} -> {split_shape}"
    b, s, c = src_shape
    if list(split_shape[:2]) != [b, s] or split_shape[2] * split_shape[3] != c:
        return f"reshape {list(src_shape)} -> {list(split_shape)} does not split the last axis into [H, D]"
    return None if axes in [list(a) for a in ok_axes] else f"permute_dims axes {axes}"


def constraint_head_merge(heads_shape, axes, out_shape):
    """NPU_E_LAYOUT: attention's head merge runs on the NPU as MATMUL addressing only as permute_dims
    [0, 2, 1, 3] of the [B, H, S, D] product, then a reshape to [B, S, H * D], static shapes (each head's
    output written at column h * D of the rows, format 1.8); another merge stays on the CPU."""
    axes = [int(a) for a in axes] if axes is not None else None
    if heads_shape is None or out_shape is None or len(heads_shape) != 4 or axes != [0, 2, 1, 3]:
        return f"permute_dims axes {axes} of {heads_shape}"
    b, h, s, d = heads_shape
    return None if list(out_shape) == [b, s, h * d] else f"reshape [{b}, {s}, {h}, {d}] -> {list(out_shape)}"


def constraint_head_bytes(head_dim: int, elem: int = 2):
    """NPU_E_LAYOUT: a head split or merged by MATMUL addressing must be whole SRAM beats: head_dim *
    element bytes a multiple of 16 (head_dim a multiple of 8 in fp16: SD-1.5's 40, 80 and 160 are), since
    MATMUL's head-slice addresses are multiples of 16 bytes (format 1.8); a narrower head (e.g. 4 fp16 = 8
    bytes) keeps its split or merge on the CPU."""
    return None if (head_dim * elem) % 16 == 0 else f"head of {head_dim} x {elem} = {head_dim * elem} bytes"


# --- rotary position embedding (ROPE, docs/npu.md section 2, format 1.4) ---


def _ints(values) -> list:
    return [int(v) for v in values]


def rope_slices(x_shape, hi, lo) -> str | None:
    """Why the two slices of a rotate_half are not x[..., D/2:] and x[..., :D/2] over the last axis (None:
    they are). `hi`, `lo`: the strided_slice calls (x, axes, begin, end[, strides])."""
    rank, d = len(x_shape), x_shape[-1]
    h = d // 2
    for name, call, begin, ends in (("x[h:]", hi, h, None), ("x[:h]", lo, 0, (h,))):
        axes = [a % rank for a in _ints(call.args[1])]
        b, e = _ints(call.args[2]), _ints(call.args[3])
        steps = _ints(call.args[4]) if len(call.args) > 4 else [1]
        end_ok = e[0] >= d if ends is None else e[0] in ends
        if axes != [rank - 1] or steps != [1] or b != [begin] or not end_ok:
            return f"{name} is strided_slice(axes {axes}, begin {b}, end {e}, steps {steps}) of {list(x_shape)}"
    return None


def constraint_rope_form(x_shape, hi, lo, concat_axis: int, same_x: bool):
    """NPU_E_ROPE: a rotary position embedding runs on the NPU in the rotate-half form over the last axis
    only: x * cos + concat(-x[..., D/2:], x[..., :D/2], axis=-1) * sin with D even (Hugging Face Llama's
    rotate_half, as TVM imports it from ONNX); an odd D, the interleaved form (GPT-J's pairs 2i, 2i+1), a
    rotation over another axis, or halves taken from another tensor stay on the CPU."""
    rank = len(x_shape)
    if not same_x:
        return "the halves are not slices of the tensor multiplied by cos"
    if x_shape[-1] % 2 or x_shape[-1] < 2:
        return f"D = {x_shape[-1]} is odd"
    if concat_axis % rank != rank - 1:
        return f"concat over axis {concat_axis} of a rank-{rank} tensor"
    return rope_slices(x_shape, hi, lo)


def rope_table_rows(x_shape, t_shape) -> int | None:
    """The rows of a cos / sin table ROPE reads row r % rows of, for x's rows (x viewed as rows of its last
    axis), or None when broadcasting it over x is not that: its last axis x's, then (right-aligned to x)
    1s followed by x's own dims, so the table repeats whole over x's leading axes."""
    t = [1] * (len(x_shape) - len(t_shape)) + list(t_shape)
    if len(t_shape) > len(x_shape) or t[-1] != x_shape[-1]:
        return None
    lead = t[:-1]
    k = 0
    while k < len(lead) and lead[k] == 1:
        k += 1
    if lead[k:] != list(x_shape[k:-1]):
        return None
    return max(1, int(np.prod(lead[k:], dtype=np.int64)))


def constraint_rope_tables(x_shape, out_shape, cos, sin, cos_shape, sin_shape):
    """NPU_E_ROPE_TABLE: a rotary embedding's cos and sin must have one shape whose broadcast over x leaves x's
    shape: the last axis D, then 1s followed by x's own dims (an [S, D] table against [heads, S, D], or
    [1, 1, S, D] against [B, H, S, D]), so ROPE reads table row r % S for x's row r; and both be float32
    constants with every value in [-1, 1] (rounded to fp16 in SRAM, which moves an output by at most
    2^-12 * (|x_i| + |x_j|), docs/npu.md section 2), or both be computed at run time (the model's cos / sin of
    the positions, staged to fp16 like any input). Other tables stay on the CPU."""
    if list(out_shape) != list(x_shape):
        return f"x {list(x_shape)} is broadcast to {list(out_shape)}"
    if list(cos_shape) != list(sin_shape) or rope_table_rows(x_shape, cos_shape) is None:
        return f"cos {list(cos_shape)}, sin {list(sin_shape)} against x {list(x_shape)}"
    values = [constant_value(t) for t in (cos, sin)]
    if (values[0] is None) != (values[1] is None):
        return "one of cos and sin is a constant, the other computed at run time"
    for name, v in zip(("cos", "sin"), values):
        if v is None:
            continue
        if v.dtype != np.float32:
            return f"{name} is {v.dtype}"
        bad = ~(np.abs(v) <= 1)  # NaN too
        if bad.any():
            return f"{name} holds {float(v[bad].reshape(-1)[0]):.6g}, outside [-1, 1]"
    return None


def constraint_rope_fits(rows: int, d: int, cfg: NPUConfig):
    """NPU_E_SRAM: a rotary embedding keeps its whole cos and sin tables in SRAM (any row of x may read any
    table row): twice each (double-buffered), with two tiles of one row of x and two of the output, they
    must fit. A larger table runs on the CPU; a configuration with more SRAM keeps it on the NPU."""
    line = -(-d * 2 // cfg.alignment) * cfg.alignment
    need = 4 * rows * line + 4 * line
    return f"tables [{rows}, {d}]: {need} bytes > {cfg.sram_bytes}" if need > cfg.sram_bytes else None


def constraint_rope_float(x):
    """NPU_E_QUANT_ROPE: a rotary embedding of an int8 (dequantized) tensor stays on the CPU: ROPE is fp16
    only (format 1.4), and a QDQ model's rotation is the float arithmetic between its CPU dequantize and
    quantize, which the NPU would round to fp16 differently."""
    return "x is dequantized" if getattr(getattr(x, "op", None), "name", "") == "relax.dequantize" else None


# Every constraint of this module, for the generated supported-ops table.
# --- GroupNorm (GN_STATS and GN_APPLY, docs/npu.md sections 2 and 6, format 1.7) ---

GN_RECORD_BYTES = 12  # one group's {count, mean, m2} (docs/npu.md section 6)


def _gn_align(n: int, cfg: NPUConfig) -> int:
    return -(-n // cfg.alignment) * cfg.alignment


def _channel_values(resolve, call, channels: int):
    """(the tensor operand, the C per-channel values) of a multiply / add, or (None, why)."""
    for k in (0, 1):
        arg = resolve(call.args[k])
        value = constant_value(arg)
        if value is None:
            continue
        shape = list(value.shape)
        per_channel = shape in ([channels, 1, 1], [1, channels, 1, 1]) or (channels == 1 and value.size == 1)
        if value.dtype != np.float32 or not per_channel:
            return None, f"{call.op.name.removeprefix('relax.')} by a {value.dtype} constant {shape}, not [C, 1, 1]"
        return call.args[1 - k], value.reshape(-1)
    return None, f"{call.op.name.removeprefix('relax.')} by a tensor computed at run time"


def constraint_group_norm_form(resolve, x, rows, norm, back, scale, shift):
    """NPU_E_GROUP_NORM: a GroupNorm runs on the NPU as the chain the GroupNorm rewrite writes over a 4-D
    NCHW map x [N, C, H, W]: x viewed as [N, G, C / G * H * W] with C a multiple of G, a layer_norm of each
    row over its last axis with gamma 1, beta 0 and epsilon finite and >= 0, the view back to x's shape,
    then a multiply by a float32 constant gamma and an add of a float32 constant beta, one value per channel
    ([C, 1, 1] or [1, C, 1, 1]). Another chain of these ops keeps its ops' own placement."""
    shape = static_shape(x)
    if shape is None or len(shape) != 4:
        return f"x has rank {len(shape) if shape is not None else '?'}, not a 4-D map"
    n, c, h, w = shape
    grouped = static_shape(rows)
    if grouped is None or len(grouped) != 3 or grouped[0] != n or grouped[1] < 1 or c % grouped[1]:
        return f"x {list(shape)} viewed as {list(grouped) if grouped is not None else '?'}, not [N, G, C / G * H * W]"
    if grouped[2] != c // grouped[1] * h * w or list(static_shape(back)) != list(shape):
        return f"x {list(shape)} viewed as {list(grouped)} and back as {list(static_shape(back))}"
    axes = [int(a) for a in norm.attrs.axes]
    if axes not in ([-1], [2]):
        return f"layer_norm over axes {axes}"
    eps = float(norm.attrs.epsilon)
    if not np.isfinite(eps) or eps < 0:
        return f"epsilon {eps}"
    for name, arg, want in zip(("gamma", "beta"), norm.args[1:3], (1.0, 0.0)):
        value = constant_value(resolve(arg))
        if value is None or not np.all(value == want):
            return f"the layer_norm's {name} is not all {want:g}"
    for call in (scale, shift):
        _, why = _channel_values(resolve, call, c)
        if isinstance(why, str):
            return why
    return None


def constraint_group_norm_width(w: int, c: int, cfg: NPUConfig):
    """NPU_E_WIDTH: GN_STATS and GN_APPLY take a map of width W and C channels up to max_width (2048) each;
    the height is not limited (the map is tiled by rows, the statistics merged over the tiles)."""
    worst = max(w, c)
    return f"{'width' if w >= c else 'channels'} {worst} > {cfg.max_width}" if worst > cfg.max_width else None


def constraint_group_norm_fits(w: int, c: int, groups: int, cfg: NPUConfig):
    """NPU_E_SRAM: a GroupNorm's smallest tile must fit SRAM: two input and two output buffers of one fp16
    map row (W * C values), gamma and beta (C fp32 values each) and the G statistics records (12 bytes
    each). A larger map runs on the CPU; a configuration with more SRAM keeps it on the NPU."""
    row = _gn_align(w * c * 2, cfg)
    need = 4 * row + 2 * _gn_align(c * 4, cfg) + _gn_align(groups * GN_RECORD_BYTES, cfg)
    return f"{need} bytes > {cfg.sram_bytes}" if need > cfg.sram_bytes else None


ALL_CONSTRAINTS = [
    constraint_group_norm_form,
    constraint_group_norm_width,
    constraint_group_norm_fits,
    constraint_softmax_scale,
    constraint_softmax_mask,
    constraint_norm_axes,
    constraint_norm_params,
    constraint_matmul_rank,
    constraint_matmul_float,
    constraint_qmatmul_accumulator,
    constraint_matmul_batch,
    constraint_matmul_fits,
    constraint_matmul_transpose,
    constraint_repeat_kv,
    constraint_head_split,
    constraint_head_merge,
    constraint_head_bytes,
    constraint_rope_form,
    constraint_rope_tables,
    constraint_rope_fits,
    constraint_rope_float,
]
