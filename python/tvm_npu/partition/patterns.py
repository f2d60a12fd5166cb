"""Stage 2 — patterns: the NPU's pattern table, registered under the "npu." prefix.

Each entry is (composite name, Relax dataflow pattern, annotations, check). The composite names are the
contract with codegen (backend/lower/ registers a lowering under each): "npu.<op>..." runs on the fp16
datapath, "npu.q<op>..." is an int8 op matched in the QDQ form TVM's ONNX frontend gives for quantized
models (dequantize -> op -> quantize). The checks (`checks.py`) run the `constraint_*` functions of
`constraints.py`, whose docstrings are the reasons a user reads when an op stays on the CPU.
"""

from __future__ import annotations

import functools
import itertools

from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import is_const, is_op, is_tuple, wildcard

from ..contract.config import get_config
from . import checks, group_norm_check, matmul_check, norm_checks, resize_check, rope_check
from .attention_checks import check_softmax_masked
from .dense_w4a8_check import check_dense_w4a8

PREFIX = "npu"
ACTIVATIONS = ("relu", "clip")


def _dq(data):
    return is_op("relax.dequantize")(data, is_const(), is_const())


def _group_dq():
    """A group-wise quantized weight (ir/group_quant.py): (float(codes) [- take(float(zero points))]) *
    take(float(scales)), every leaf a constant. Its lowering keeps the int4 codes where CONV2D computes
    them exactly (format 1.4, w_dtype int4 / uint4), else folds it like any constant weight."""
    codes = is_op("relax.astype")(is_const())

    def per_group():  # the float32 table's astype is gone after rewrite/identity_casts.py
        return is_op("relax.take")(is_op("relax.astype")(is_const()) | is_const(), is_const())

    return is_op("relax.multiply")(is_op("relax.subtract")(codes, per_group()) | codes, per_group())


def _const_expr():
    """A weight or bias given as a constant, possibly transposed, reshaped or dequantized (per channel or
    per group; folded by ir.values.eval_const at compile time, so the NPU function keeps its weights
    inside)."""
    base = is_const() | _dq(is_const()) | _group_dq()
    return base | is_op("relax.permute_dims")(base) | is_op("relax.reshape")(base, wildcard())


def _activation(pattern, act: str | None):
    if act == "relu":
        return is_op("relax.nn.relu")(pattern)
    if act == "clip":
        return is_op("relax.clip")(pattern, wildcard(), wildcard())
    return pattern


def _entry(name, pattern, annotations, check):
    annotations = dict(annotations, root=pattern)
    return (f"{PREFIX}.{name}", pattern, annotations, check)


def _whole(name: str, check, run: checks.PartitionRun):
    """`check` bound to `run`, refusing first a match whose intermediate value is also read outside it (a
    dense's output before its fused relu, read by a softmax too): FuseOpsByPattern would make that
    composite return both values, but an NPU command writes only its final one. A smaller entry then
    takes the op, and the fused part runs on its own. A check that raises refuses its match
    (NPU_E_INTERNAL): an unforeseen graph costs an op its NPU placement, never the build."""

    @functools.wraps(check)
    def checked(ctx) -> bool:
        try:
            if run.refused_qdq(ctx.annotated_expr["op"]):
                return False  # its QDQ parameters were refused (NPU_E_QUANT_SCALE): the group runs on the CPU
            return not has_leaking_intermediate_variables(ctx) and check(run, ctx)
        except Exception as err:  # pylint: disable=broad-except  # any bug: the op stays on the CPU
            return checks.refuse_on_error(run, ctx, name, err)

    return checked


def _with_bias_and_act(name, root, annotations, check, quantized: bool, bias_pattern):
    """root[+bias][+act][->quantize] — one entry each, fewest ops first (later = higher priority)."""
    out = []
    for with_bias in (False, True):
        for act in (None,) + ACTIVATIONS:
            pat, ann, full = root, dict(annotations), name
            if with_bias:
                ann["bias"] = bias = bias_pattern()
                pat = is_op("relax.add")(pat, bias)
                full += "_bias"
            if act:
                pat = _activation(pat, act)
                ann["act"] = pat
                full += f"_{act}"
            if quantized:
                pat = is_op("relax.quantize")(pat, is_const(), is_const())
                ann["quantize"] = pat
            out.append((with_bias + bool(act), _entry(full, pat, ann, check)))
    return [e for _, e in sorted(out, key=lambda item: item[0])]


def _qbias():
    b = _dq(is_const())
    return b | is_op("relax.reshape")(b, wildcard())


def _weighted(name: str, op, data, weight, check, quantized: bool):
    """The patterns of an op with a constant weight (conv2d, dense), with its fused bias and activation."""
    annotations = {"data": data, "weight": weight, "op": op}
    return _with_bias_and_act(name, op, annotations, check, quantized, _qbias if quantized else _const_expr)


def conv2d_patterns(quantized: bool):
    data = _dq(wildcard()) if quantized else wildcard()
    weight = _dq(is_const()) if quantized else _const_expr()
    conv = is_op("relax.nn.conv2d")(data, weight)
    return _weighted("qconv2d" if quantized else "conv2d", conv, data, weight, checks.check_conv2d, quantized)


def dense_patterns(quantized: bool):
    data = _dq(wildcard()) if quantized else wildcard()
    if quantized:
        w = _dq(is_const())
        weight = w | is_op("relax.permute_dims")(w)
    else:
        weight = _const_expr()
    mm = is_op("relax.matmul")(data, weight)
    return _weighted("qdense" if quantized else "dense", mm, data, weight, checks.check_dense, quantized)


def dense_w4a8_patterns():
    """A dense of int8 activations and group-wise int4 weights (W4A8, format 1.4) in its QDQ form:
    quantize(matmul(dequantize(x), W)[+ bias][+ act]), W a group-wise dequantization (`_group_dq`), under a
    transpose or not; the bias any constant (float: the NPU adds it in fp32, in units of x's scale)."""
    w = _group_dq()
    weight = w | is_op("relax.permute_dims")(w)
    data = _dq(wildcard())
    mm = is_op("relax.matmul")(data, weight)
    annotations = {"data": data, "int4_weight": weight, "op": mm}
    return _with_bias_and_act("qdense_w4", mm, annotations, check_dense_w4a8, True, _const_expr)


def _binary(op: str, name: str, quantized: bool, check):
    """op(a, b)[+act][->quantize]: one entry per fused activation."""
    a, b = (_dq(wildcard()), _dq(wildcard())) if quantized else (wildcard(), wildcard())
    call = is_op(op)(a, b)
    out = []
    for act in (None,) + ACTIVATIONS:
        pat = _activation(call, act)
        ann = {"op": call, "lhs": a, "rhs": b}
        if act:
            ann["act"] = pat
        if quantized:
            pat = is_op("relax.quantize")(pat, is_const(), is_const())
            ann["quantize"] = pat
        out.append(_entry(("q" if quantized else "") + name + (f"_{act}" if act else ""), pat, ann, check))
    return out


def add_patterns(quantized: bool):
    return _binary("relax.add", "add", quantized, checks.check_add)


ELTWISE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")


def eltwise_patterns(quantized: bool):
    """Binary ops with a broadcast second operand (ELTWISE); the same-shape tensor add keeps its own
    entry ("npu.add", opcode ADD), registered after these so it wins."""
    return [
        e for name in ELTWISE_OPS for e in _binary(f"relax.{name}", f"eltwise_{name}", quantized, checks.check_eltwise)
    ]


UNARY_OPS = {
    "sigmoid": "relax.sigmoid",
    "tanh": "relax.tanh",
    "gelu": "relax.nn.gelu",
    "leaky_relu": "relax.nn.leakyrelu",
    "silu": "relax.nn.silu",  # also torch's x * sigmoid(x) (rewrite/fuse_silu.py)
    "gelu_tanh": "relax.nn.gelu_tanh",  # ONNX Gelu approximate="tanh"; decomposed: rewrite/fuse_gelu_tanh.py
}


def unary_patterns(quantized: bool):
    """Activations on the vector unit (UNARY); hardswish in the form TVM imports ONNX HardSwish."""
    out = []
    for name in list(UNARY_OPS) + ["hardswish"]:
        data = _dq(wildcard()) if quantized else wildcard()
        ann = {"data": data}
        if name == "hardswish":  # x * (clip(x + 3, 0, 6) / 6)
            # TVM's QDQ import dequantizes x once per use: the check makes sure both are the same x.
            x2 = ann["data_b"] = _dq(wildcard()) if quantized else data
            ann["hs_add"] = add = is_op("relax.add")(x2, is_const())
            ann["hs_clip"] = clip = is_op("relax.clip")(add, wildcard(), wildcard())
            ann["hs_div"] = div = is_op("relax.divide")(clip, is_const())
            call = is_op("relax.multiply")(data, div)
        else:
            call = is_op(UNARY_OPS[name])(data)
        pat = ann["op"] = call
        if quantized:
            pat = ann["quantize"] = is_op("relax.quantize")(call, is_const(), is_const())
        out.append(_entry(("q" if quantized else "") + name, pat, ann, checks.check_unary))
    return out


def requantize_patterns():
    """quantize(dequantize(x)): a tensor brought to another scale or width (int8 <-> int16) — in a
    quantized LSTM, the 16-bit cell state requantized to int8 for tanh's table."""
    data = _dq(wildcard())
    q = is_op("relax.quantize")(data, is_const(), is_const())
    return [_entry("qrequantize", q, {"data": data, "quantize": q, "op": q}, checks.check_requantize)]


# Quantized staging (format 1.3): a model input's quantize and a model output's dequantize, run by the
# runtime as it stages the region's I/O (no command), each with or without a reshape between it and the
# model's tensor. backend/lower/staging.py and regions.py know them by these names.
QUANTIZE_INPUTS = (f"{PREFIX}.qinput", f"{PREFIX}.qinput_reshape")
IO_COMPOSITES = QUANTIZE_INPUTS + (f"{PREFIX}.qoutput", f"{PREFIX}.qoutput_reshape")


def _io_entry(name, root, ann, check):
    return _entry(name, root, dict(ann, op=ann.get("quantize", ann.get("dequantize"))), check)


def io_patterns() -> tuple[list, list]:
    """(plain, with a reshape): the plain entries go lowest, so they only see a quantize or dequantize
    that no int8 op took (a dequantize inside a QDQ op is that op's); those with a reshape go highest, so
    the fp16 reshape entry does not take the model's float reshape first (their checks refuse silently
    what is not a model input or output, and leave it to the others)."""
    q = is_op("relax.quantize")(wildcard(), is_const(), is_const())
    dq = is_op("relax.dequantize")(wildcard(), is_const(), is_const())
    # Not a QDQ reshape (dequantize -> reshape -> quantize), nor a constant's reshape (a bias): those are
    # other entries' (a pattern-only match, without the checks, must not take them either).
    r_in = is_op("relax.reshape")(~is_op("relax.dequantize")(wildcard(), wildcard(), wildcard()), wildcard())
    q_r = is_op("relax.quantize")(r_in, is_const(), is_const())
    dq2 = is_op("relax.dequantize")(~is_const(), is_const(), is_const())
    r_out = is_op("relax.reshape")(dq2, wildcard())
    plain = [
        _io_entry("qinput", q, {"quantize": q}, checks.check_quantize_input),
        _io_entry("qoutput", dq, {"dequantize": dq}, checks.check_dequantize_output),
    ]
    reshaped = [
        _io_entry("qinput_reshape", q_r, {"quantize": q_r, "reshape": r_in}, checks.check_quantize_input),
        _io_entry("qoutput_reshape", r_out, {"dequantize": dq2, "reshape": r_out}, checks.check_dequantize_output),
    ]
    return plain, reshaped


def softmax_patterns(quantized: bool = False):
    """Softmax over a matrix's rows (SOFTMAX), alone or with attention's scale and additive mask fused
    (format 1.4); `quantized`: its int8 form, quantize(softmax(dequantize(x) ...)) (format 1.4)."""

    def rooted(name, call, ann, check):
        if quantized:
            call = ann["quantize"] = is_op("relax.quantize")(call, is_const(), is_const())
        return _entry(("q" if quantized else "") + name, call, ann, check)

    data = _dq(wildcard()) if quantized else wildcard()
    call = is_op("relax.nn.softmax")(data)
    out = [rooted("softmax", call, {"op": call, "data": data}, checks.check_softmax)]
    # With a factor and / or an additive constant mask (format 1.4), larger forms last (they win):
    # x + mask, x * c, x / c (TVM's import of a division by sqrt(d)), then both.
    for scale, masked in ((None, True), ("multiply", False), ("divide", False), ("multiply", True), ("divide", True)):
        x = _dq(wildcard()) if quantized else wildcard()
        ann = {"data": x}
        pre = x
        if scale is not None:
            ann["scale_c"] = is_const()
            pre = ann["scale_op"] = is_op(f"relax.{scale}")(x, ann["scale_c"])
        if masked:
            ann["mask_c"] = is_const()
            pre = ann["mask_add"] = is_op("relax.add")(pre, ann["mask_c"])
        ann["op"] = sm = is_op("relax.nn.softmax")(pre)
        out.append(rooted("softmax_masked" if masked else "softmax_scaled", sm, ann, check_softmax_masked))
    return out


NORM_OPS = {"layer_norm": "relax.nn.layer_norm", "rms_norm": "relax.nn.rms_norm"}


def norm_patterns(quantized: bool = False):
    """LayerNorm and RMSNorm over a matrix's rows (NORM); `quantized`: the int8 form quantize(norm(dequantize
    (x))) (format 1.4). gamma and beta match anything: the check refuses a non-constant one with its
    reason rather than letting the op fall to the CPU unexplained."""
    out = []
    for name, op in NORM_OPS.items():
        data = _dq(wildcard()) if quantized else wildcard()
        params = [wildcard(), wildcard()] if name == "layer_norm" else [wildcard()]
        call = root = is_op(op)(data, *params)
        ann = {"op": call, "data": data}
        if quantized:
            root = ann["quantize"] = is_op("relax.quantize")(call, is_const(), is_const())
        out.append(_entry(("q" if quantized else "") + name, root, ann, norm_checks.check_norm))
    return out


def group_norm_patterns():
    """GroupNorm as rewrite/fuse_group_norm.py writes it: reshape(x, [N, G, L]) -> layer_norm -> reshape back
    -> multiply by gamma -> add beta [-> silu] (GN_STATS and GN_APPLY, format 1.7; the SiLU fused into
    GN_APPLY). Everything but x matches anything: the check refuses what the commands do not compute, with
    its reason. Without silu first: the fused entry, later in the table, wins."""
    out = []
    for silu in (False, True):
        data = wildcard()
        rows = is_op("relax.reshape")(data, wildcard())
        norm = is_op("relax.nn.layer_norm")(rows, wildcard(), wildcard())
        back = is_op("relax.reshape")(norm, wildcard())
        scale = is_op("relax.multiply")(back, wildcard())
        root = shift = is_op("relax.add")(scale, wildcard())
        if silu:
            root = is_op("relax.nn.silu")(shift)
        ann = {"op": norm, "data": data, "rows": rows, "back": back, "scale": scale, "shift": shift}
        name = "group_norm_silu" if silu else "group_norm"
        out.append(_entry(name, root, ann, group_norm_check.check_group_norm))
    return out


def _half(data):
    """A strided_slice of `data`, with or without its strides argument."""
    args = [wildcard(), wildcard(), wildcard()]
    return is_op("relax.strided_slice")(data, *args) | is_op("relax.strided_slice")(data, *args, wildcard())


def rope_patterns():
    """Rotary position embedding, rotate-half form (ROPE, fp16): x * cos + concat(-x[h:], x[:h]) * sin. The
    slices' axes and bounds, and the tables, are the check's: a form it does not run (odd D, another axis)
    is refused with its reason; the interleaved form has other ops and does not match."""
    x, cos, sin = wildcard(), wildcard(), wildcard()
    hi, lo = _half(x), _half(x)
    neg = is_op("relax.negative")(hi)
    rot = is_op("relax.concat")(is_tuple([neg, lo]))
    xc = is_op("relax.multiply")(x, cos)
    rs = is_op("relax.multiply")(rot, sin)
    add = is_op("relax.add")(xc, rs)
    # The refusal is reported on the negation, the one op no other pattern claims: the add, a multiply
    # or a slice may still run on the NPU alone, or report its own reason.
    ann = {"op": neg, "add": add, "xc": xc, "rs": rs, "rot": rot, "hi": hi, "lo": lo}
    return [_entry("rope", add, ann, rope_check.check_rope)]


def matmul_patterns(repeated: bool):
    """A matmul of two activations (MATMUL, fp16): B as it is, or transposed by a permute_dims of its last
    two axes; `repeated`: B repeated over query heads for grouped-query attention (reshape ->
    broadcast_to -> reshape, folded into b_group). A dequantized operand is matched so that its check can
    refuse it with a reason (MATMUL has no int8 form)."""
    out = []
    for transposed in (False, True):
        # A constant B (also transposed, reshaped or dequantized) is a weight: dense's, never MATMUL's.
        a, src = _dq(wildcard()) | wildcard(), _dq(wildcard()) | ~_const_expr()
        ann, b = {}, src
        if repeated:
            ann["split"] = split = is_op("relax.reshape")(src, wildcard())  # ONNX Unsqueeze imports as reshape
            ann["broadcast"] = bcast = is_op("relax.broadcast_to")(split, wildcard())
            ann["repeat"] = b = is_op("relax.reshape")(bcast, wildcard())
        if transposed:
            ann["transpose"] = b = is_op("relax.permute_dims")(b)
        call = is_op("relax.matmul")(a, b)
        name = "matmul" + ("_gqa" if repeated else "") + ("_bt" if transposed else "")
        out.append(_entry(name, call, dict(ann, op=call), matmul_check.check_matmul))
    return out


def matmul_head_patterns():
    """A matmul of two activations (MATMUL, fp16) with attention's head split of either operand
    (reshape [B, S, H * D] -> [B, S, H, D] -> permute_dims: Q and V, and K^T as [0, 2, 3, 1]) and / or the
    merge of its product's heads (permute_dims [0, 2, 1, 3] -> reshape [B, S, H * D]) inside: MATMUL reads
    and writes each head as a column slice of the rows (format 1.8), so neither needs a copy. Entries
    with fewer parts first (a later entry wins)."""
    out = []
    forms = [f for f in itertools.product((False, True), repeat=3) if any(f)]
    for a_split, b_split, merged in sorted(forms, key=sum):
        ann: dict = {}
        a, b = wildcard(), ~_const_expr()
        if a_split:
            ann["a_reshape"] = r = is_op("relax.reshape")(wildcard(), wildcard())
            ann["a_split"] = a = is_op("relax.permute_dims")(r)
        if b_split:
            ann["b_reshape"] = r = is_op("relax.reshape")(wildcard(), wildcard())
            ann["b_split"] = b = is_op("relax.permute_dims")(r)
        call = root = is_op("relax.matmul")(a, b)
        if merged:
            ann["merge_perm"] = perm = is_op("relax.permute_dims")(call)
            ann["merge"] = root = is_op("relax.reshape")(perm, wildcard())
        out.append(_entry("matmul_heads", root, dict(ann, op=call), matmul_check.check_matmul_heads))
    return out


def qmatmul_patterns():
    """An int8 x int8 matmul of two activations (MATMUL's int8 form, format 1.4) in its QDQ form:
    quantize(matmul(dequantize(a), dequantize(b))), B as it is or transposed by a permute_dims of its last
    two axes (attention's P x V and Q x K^T of a quantized model). No grouped-query repeat: that form, and
    every other dequantized operand, is the fp16 entries' to refuse (NPU_E_QUANT_MATMUL)."""
    out = []
    for transposed in (False, True):
        a, b = _dq(wildcard()), _dq(wildcard())
        ann: dict = {"lhs": a, "rhs": b}
        rhs = b
        if transposed:
            ann["transpose"] = rhs = is_op("relax.permute_dims")(b)
        call = is_op("relax.matmul")(a, rhs)
        q = is_op("relax.quantize")(call, is_const(), is_const())
        name = "qmatmul" + ("_bt" if transposed else "")
        out.append(_entry(name, q, dict(ann, op=call, quantize=q), matmul_check.check_matmul))
    return out


def pool_patterns(quantized: bool):
    out = []
    for op, name in (
        ("relax.nn.max_pool2d", "max_pool2d"),
        ("relax.nn.avg_pool2d", "avg_pool2d"),
        ("relax.mean", "global_avg_pool"),
    ):
        data = _dq(wildcard()) if quantized else wildcard()
        pool = is_op(op)(data)
        pat, ann = pool, {"op": pool, "data": data}
        if quantized:
            pat = is_op("relax.quantize")(pool, is_const(), is_const())
            ann["quantize"] = pat
        out.append(_entry(("q" if quantized else "") + name, pat, ann, checks.check_pool))
    return out


def resize_patterns(quantized: bool):
    """A nearest-neighbour upsampling by integer factors (relax.image.resize2d; ONNX Resize), run as POOL 1x1
    copies into the output's strided places (backend/plan/upsample_plan.py); `quantized`: its QDQ form,
    quantize(resize(dequantize(x))) with one set of parameters. Its size argument matches anything: the
    check refuses what is not an exact floor(o / f) mapping, with its reason."""
    data = _dq(wildcard()) if quantized else wildcard()
    call = is_op("relax.image.resize2d")(data, wildcard())
    pat, ann = call, {"op": call, "data": data}
    if quantized:
        pat = ann["quantize"] = is_op("relax.quantize")(call, is_const(), is_const())
    return [_entry("qresize" if quantized else "resize", pat, ann, resize_check.check_resize)]


def reshape_patterns(quantized: bool):
    """A reshape that keeps the stored rows is a view: no command, the output aliases the input."""
    data = _dq(wildcard()) if quantized else wildcard()
    reshape = is_op("relax.reshape")(data, wildcard())
    pat, ann = reshape, {"op": reshape, "data": data}
    if quantized:
        pat = is_op("relax.quantize")(reshape, is_const(), is_const())
        ann["quantize"] = pat
    return [_entry("qreshape" if quantized else "reshape", pat, ann, checks.check_reshape)]


def permute_view_patterns():
    """A permute_dims between an NCHW map and its pixels as rows, when those are the same bytes: a view.
    fp16 only for now: an int8 model's permute stays on the CPU (no NPU pattern)."""
    data = wildcard()
    perm = is_op("relax.permute_dims")(data)
    return [_entry("permute_view", perm, {"op": perm, "data": data}, checks.check_permute_view)]


# Concatenations of up to this many tensors are matched (DenseNet-121's widest joins 24).
MAX_CONCAT_INPUTS = 32


def concat_patterns(quantized: bool):
    """A channel concatenation: no data moves on the NPU — its inputs are written into its channels."""
    out = []
    for k in range(2, MAX_CONCAT_INPUTS + 1):
        fields = [_dq(wildcard()) if quantized else wildcard() for _ in range(k)]
        concat = is_op("relax.concat")(is_tuple(fields))
        pat, ann = concat, {"op": concat}
        if quantized:
            pat = is_op("relax.quantize")(concat, is_const(), is_const())
            ann["quantize"] = pat
        out.append(_entry("qconcat" if quantized else "concat", pat, ann, checks.check_concat))
    return out


def slice_patterns(quantized: bool):
    """A slice of whole leading rows is a view at a row offset: no command."""
    out = []
    for extra in (3, 4):  # axes, begin, end [, strides]
        data = _dq(wildcard()) if quantized else wildcard()
        sl = is_op("relax.strided_slice")(data, *[wildcard() for _ in range(extra)])
        pat, ann = sl, {"op": sl, "data": data}
        if quantized:
            pat = is_op("relax.quantize")(sl, is_const(), is_const())
            ann["quantize"] = pat
        out.append(_entry("qslice_rows" if quantized else "slice_rows", pat, ann, checks.check_slice))
    return out


def table() -> list:
    """The (name, pattern, annotations, check) entries, lowest priority first: quantized entries come
    last, they are larger and must win. Each check takes a checks.PartitionRun and the match context;
    `bind` makes them what FuseOpsByPattern calls."""
    return list(_table())


@functools.cache  # the patterns are immutable TVM objects: built once, shared by every build and thread
def _table() -> tuple:
    # Lowest: a permute the matmul entries fold (a head split, K^T) gives their reason when they refuse.
    entries = permute_view_patterns()
    entries += matmul_patterns(repeated=False)  # a constant B is dense's (checks refuse it here)
    for quantized in (False, True):
        entries += eltwise_patterns(quantized) + concat_patterns(quantized) + slice_patterns(quantized)
        entries += reshape_patterns(quantized) + pool_patterns(quantized) + add_patterns(quantized)
        entries += resize_patterns(quantized)
        entries += unary_patterns(quantized)
        entries += conv2d_patterns(quantized) + dense_patterns(quantized)
    entries += dense_w4a8_patterns()
    plain_io, reshaped_io = io_patterns()
    # The repeated-B matmul outranks the reshape view, which would otherwise take its repeat's reshape.
    entries += matmul_patterns(repeated=True) + qmatmul_patterns() + matmul_head_patterns()
    return tuple(
        plain_io
        + requantize_patterns()
        + entries
        + softmax_patterns()
        + softmax_patterns(quantized=True)
        + norm_patterns()
        + norm_patterns(quantized=True)
        + group_norm_patterns()
        + rope_patterns()
        + reshaped_io
    )


def bind(run: checks.PartitionRun) -> list:
    """The table for one partition, highest priority first (the order FuseOpsByPattern wants), with every
    check a closure over `run`: its configuration, rejection log and model I/O travel with the
    partition, not through module state, so partitions in several threads stay apart.

    Parameters
    ----------
    run : checks.PartitionRun
        The configuration the constraints check against, where rejections go, and `main`'s I/O.

    Returns
    -------
    list
        (name, pattern, annotations, check) entries for `relax.transform.FuseOpsByPattern`.
    """
    return [(name, pat, ann, _whole(name, check, run)) for name, pat, ann, check in reversed(_table())]


# Process-wide by nature, like the TVM registry it guards: set once, at import (tvm_npu.pipeline).
_REGISTERED = []


def register():
    """Register the table with TVM, once per process, for scripts that take TVM's registered patterns
    (`get_patterns_with_prefix("npu")`) into their own FuseOpsByPattern: their checks use the default
    configuration and log nothing (partition_for_npu binds its own, see `bind`). TVM's registry appends,
    so registering more than once would make every partition try each pattern again."""
    if not _REGISTERED:
        register_patterns(bind(checks.PartitionRun(get_config()))[::-1])
        _REGISTERED.append(True)


def npu_patterns():
    """Registered NPU patterns, highest priority first (the order FuseOpsByPattern wants)."""
    return get_patterns_with_prefix(PREFIX)
