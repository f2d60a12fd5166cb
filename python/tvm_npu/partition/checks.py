"""The pattern table's check functions: which constraints (constraints.py) each NPU composite runs, on
which parts of its match.

A check receives FuseOpsByPattern's match context, runs its constraints in order through `_run` (the
first failure is logged as a Rejection with the constraint's reason code and docstring, and refuses the
match), and declares them with `applies(...)`: SUPPORTED_OPS.md is generated from those lists, and a test
keeps each list equal to what the function's code calls. `_quant_checks` adds the checks of an int8
match's QDQ parts.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import tvm
from tvm.ir.prim.expr import FloatImm, IntImm

from ..contract.config import NPUConfig
from ..contract.errors import NPUFallbackWarning
from ..ir.values import constant_value, static_shape
from .attributes import attribute_checks, attribute_constraints
from .constraints import (
    ModelIO,
    Rejection,
    constraint_bias_per_channel,
    constraint_broadcast,
    constraint_clip_bounds,
    constraint_concat,
    constraint_dense_fits,
    constraint_eltwise_scales,
    constraint_float32,
    constraint_fp16_constants,
    constraint_int8_activations,
    constraint_model_input,
    constraint_model_output,
    constraint_per_tensor,
    constraint_permute_view,
    constraint_pool_window_fits,
    constraint_quant_params,
    constraint_rank,
    constraint_reshape_keeps_rows,
    constraint_same_quantization,
    constraint_same_shape,
    constraint_slice_rows,
    constraint_softmax_input,
    constraint_staged_reshape,
    constraint_static_shape,
    constraint_symmetric_weights,
    constraint_vector_width,
    constraint_weight_2d,
    constraint_width,
    reason_code,
    reason_text,
)
from .internal import constraint_internal_error, log_internal_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionRun:
    """One partition: the NPUConfig the constraints check against, the list that receives every
    Rejection (None: nowhere) and `main`'s inputs and outputs for quantized staging (None: none).

    Every check takes it as its first argument: patterns.bind makes the table's checks closures over
    one run, so two partitions running at once never see each other's configuration or log.

    `bad_qdq` collects the ops whose QDQ group constraint_quant_params refused: their float (fp16) entries
    refuse them too, so the whole group runs on the CPU, as TVM computes it (the int8 entries come first
    in the table)."""

    config: NPUConfig
    log: list | None = None
    io: ModelIO | None = None
    bad_qdq: list = field(default_factory=list)

    def refused_qdq(self, op) -> bool:
        """Whether `op`'s QDQ group was refused for its quantization parameters in this run."""
        return any(op.same_as(other) for other in self.bad_qdq)


def _run(run: PartitionRun, ctx, pattern: str, checks) -> bool:
    """Apply (constraint, args) pairs in order; the first failure is logged to `run.log` and rejects the
    match."""
    for constraint, args in checks:
        detail = constraint(*args)
        if detail is not None:
            _log(run, ctx, pattern, constraint, detail)
            if constraint is constraint_quant_params:
                run.bad_qdq.append(ctx.annotated_expr["op"])
            return False
    return True


def refuse_on_error(run: PartitionRun, ctx, pattern: str, err: Exception) -> bool:
    """A check that raised (a bug in tvm_npu, met on a graph it did not foresee): the match is refused
    with NPU_E_INTERNAL and the error, and the build warns; the op runs on the CPU, the build goes on."""
    detail = constraint_internal_error(err)
    log_internal_error(log, err, f"npu pattern {pattern}: its check failed, the op stays on the CPU", detail)
    warnings.warn(
        f"the check of NPU pattern {pattern} failed (NPU_E_INTERNAL, {detail}); the op runs on the CPU; "
        "please report this",
        NPUFallbackWarning,
        stacklevel=2,
    )
    _log(run, ctx, pattern, constraint_internal_error, detail)
    return False


def _log(run: PartitionRun, ctx, pattern: str, constraint, detail: str) -> None:
    """Record in `run.log` why `constraint` refused the match (the op's var, its reason and detail)."""
    if run.log is None:
        return
    if "quantize" in ctx.annotated_expr:
        pattern = "q" + pattern  # the int8 form: its rejection explains an fp16 or CPU fallback
    var = _fused_part(ctx, constraint)
    if var is None:
        var = ctx.value_to_bound_var.get(ctx.annotated_expr["op"])
    run.log.append(
        Rejection(
            var.name if var is not None else "?",
            ctx.annotated_expr["op"].op.name,
            pattern,
            reason_code(constraint),
            reason_text(constraint),
            detail,
            weight_constant(ctx.annotated_expr["op"], ctx.matched_bindings),
        )
    )


def weight_constant(call, bindings: dict):
    """The Constant under a conv / matmul call's weight (through vars, permute_dims, reshape and
    dequantize), or None."""
    if len(call.args) < 2:
        return None
    expr = call.args[1]
    for _ in range(8):
        while isinstance(expr, tvm.relax.Var) and expr in bindings:
            expr = bindings[expr]
        if isinstance(expr, tvm.ir.Constant):
            return expr
        if not (
            isinstance(expr, tvm.relax.Call)
            and getattr(expr.op, "name", "") in ("relax.dequantize", "relax.permute_dims", "relax.reshape")
        ):
            return None
        expr = expr.args[0]
    return None


def _fused_part(ctx, constraint):
    """The var of the op a bias or activation constraint is about (the add or clip that could not
    fuse): the op itself may still run on the NPU without it, so the reason belongs to the part."""
    ann = ctx.annotated_expr
    if constraint is constraint_clip_bounds and "act" in ann:
        return ctx.value_to_bound_var.get(ann["act"])
    if constraint is constraint_bias_per_channel:
        for var, value in ctx.matched_bindings.items():
            if (
                isinstance(value, tvm.relax.Call)
                and getattr(value.op, "name", "") == "relax.add"
                and _resolve(ctx, value.args[0]).same_as(ann["op"])
            ):
                return var
    return None


def _undequantized(ctx, expr):
    """An operand through the match's bindings and a dequantize (the int8 codes behind it)."""
    expr = _resolve(ctx, expr)
    if isinstance(expr, tvm.relax.Call) and getattr(expr.op, "name", "") == "relax.dequantize":
        expr = _resolve(ctx, expr.args[0])
    return expr


def _resolve(ctx, expr):
    """The value behind a dataflow variable of the match (patterns see through bindings)."""
    while not isinstance(expr, tvm.ir.Constant) and expr in ctx.matched_bindings:
        expr = ctx.matched_bindings[expr]
    return expr


def applies(*constraints, int8=()):
    """Declare the constraints a check function runs (in order), and those only its int8 (QDQ) form adds.

    SUPPORTED_OPS.md is generated from these lists (supported_ops.py); a test keeps each list equal to
    the constraints the function's code calls."""

    def mark(check):
        check.constraints = list(constraints)
        check.int8_constraints = list(int8)
        return check

    return mark


# What every NPU op's tensors must be (_check_tensors): float32 or QDQ, static shapes, a rank the NPU takes.
TENSOR_CONSTRAINTS = (constraint_float32, constraint_static_shape, constraint_rank)


def _check_tensors(run: PartitionRun, tensors: list) -> list:
    """The TENSOR_CONSTRAINTS checks of `tensors`, in that order (the first refusal is the reason)."""
    return [
        (constraint_float32, (tensors,)),
        (constraint_static_shape, (tensors,)),
        (constraint_rank, (tensors, run.config)),
    ]


# A conv2d's own attributes (from the attribute table), and the bias and activation a conv2d or dense fuses.
CONV_ATTRS = tuple(attribute_constraints("relax.nn.conv2d"))
POOL_ATTRS = tuple(attribute_constraints("relax.nn.max_pool2d"))
SOFTMAX_ATTRS = tuple(attribute_constraints("relax.nn.softmax"))
EPILOGUE = (constraint_bias_per_channel, constraint_clip_bounds)
# What a conv2d or dense checks after its own shape: its weight as fp16, then the epilogue.
WEIGHTED_OP = (constraint_fp16_constants, *EPILOGUE)


# What _quant_checks adds to an int8 match; with a weight, the weight must also be symmetric.
QUANT_CONSTRAINTS = [constraint_int8_activations, constraint_per_tensor, constraint_quant_params]


QUANT_WEIGHT_CONSTRAINTS = QUANT_CONSTRAINTS + [constraint_symmetric_weights]


def _quant_checks(ctx, wide: bool = False) -> list:
    """Checks of the QDQ parts of an int8 match: int8 data (int16 too where `wide`: the ELTWISE operands
    of format 1.2), per-tensor scales, finite positive scales and zero points in range (the weight's
    too), symmetric weights. A model output's lone dequantize (annotated "dequantize", no quantize) has
    its input checked."""
    ann = ctx.annotated_expr
    if "quantize" not in ann and "dequantize" not in ann:
        return []
    data_dqs = [ann[k] for k in ("data", "lhs", "rhs", "dequantize") if k in ann]
    if ann["op"].op.name == "relax.concat":  # its dequantized inputs come as one tuple
        data_dqs = [_resolve(ctx, f) for f in _resolve(ctx, ann["op"].args[0]).fields]
    qs = [ann["quantize"]] if "quantize" in ann else []
    checks = [
        (constraint_int8_activations, ([d.args[0] for d in data_dqs] + qs, wide)),
        (constraint_per_tensor, (data_dqs + qs,)),
    ]
    if "weight" in ann:
        w = _resolve(ctx, ann["weight"])
        call = ann["op"]
        # The weight axis of the output channels: O of a conv2d's kernel layout, N of a matmul's [K, N]
        # (axis 0 under a transpose of the [N, K] codes).
        out_axis = str(call.attrs.kernel_layout).index("O") if call.op.name == "relax.nn.conv2d" else 1
        if w.op.name == "relax.permute_dims":
            out_axis = _permuted_axis(w, out_axis)
            w = _resolve(ctx, w.args[0])
        checks.append((constraint_symmetric_weights, (w, out_axis)))
        data_dqs = data_dqs + [w]
    return checks[:2] + [(constraint_quant_params, (data_dqs + qs,))] + checks[2:]


def _permuted_axis(permute, axis: int) -> int:
    """The axis of permute_dims' input that becomes its output's `axis`."""
    rank = len(static_shape(permute))
    axes = permute.attrs.axes
    order = [int(a) for a in axes] if axes is not None else list(range(rank))[::-1]
    return order[axis] % rank


def _check_weight_and_epilogue(ctx, out_shape, c_axis: int) -> list:
    """The WEIGHTED_OP checks of a conv2d or dense: its weight stored as fp16, then the fused bias along
    the output channels (axis `c_axis`) and the activation."""
    call = ctx.annotated_expr["op"]
    checks = [(constraint_fp16_constants, ([weight_constant(call, ctx.matched_bindings)],))]
    if "bias" in ctx.annotated_expr:
        bias = ctx.annotated_expr["bias"]
        checks.append((constraint_bias_per_channel, (bias, out_shape[c_axis], c_axis, len(out_shape))))
    return checks + [(constraint_clip_bounds, (_act(ctx),))]


@applies(*TENSOR_CONSTRAINTS, *CONV_ATTRS, constraint_width, *WEIGHTED_OP, int8=QUANT_WEIGHT_CONSTRAINTS)
def check_conv2d(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    data, weight = call.args[0], call.args[1]
    tensors = [data, weight, call]
    checks = _check_tensors(run, tensors) + attribute_checks(call) + _quant_checks(ctx)
    if not _run(run, ctx, "conv2d", checks):
        return False
    layout = call.attrs.data_layout
    w_axis = layout.index("W")
    c_axis = layout.index("C")
    out_shape = static_shape(call)
    checks = [(constraint_width, ([static_shape(data)[w_axis], out_shape[w_axis]], run.config))]
    return _run(run, ctx, "conv2d", checks + _check_weight_and_epilogue(ctx, out_shape, c_axis))


@applies(*TENSOR_CONSTRAINTS, constraint_dense_fits, constraint_weight_2d, *WEIGHTED_OP, int8=QUANT_WEIGHT_CONSTRAINTS)
def check_dense(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    data, weight = call.args[0], call.args[1]
    tensors = [data, weight, call]
    checks = _check_tensors(run, tensors) + _quant_checks(ctx)
    if not _run(run, ctx, "dense", checks):
        return False
    out_shape, elem = static_shape(call), 1 if "quantize" in ctx.annotated_expr else 2
    checks = [
        (constraint_dense_fits, (static_shape(data)[-1], out_shape[-1], elem, run.config)),
        (constraint_weight_2d, (weight,)),
    ]
    return _run(run, ctx, "dense", checks + _check_weight_and_epilogue(ctx, out_shape, len(out_shape) - 1))


@applies(
    *TENSOR_CONSTRAINTS, constraint_same_shape, constraint_vector_width, constraint_clip_bounds, int8=QUANT_CONSTRAINTS
)
def check_add(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    lhs, rhs = call.args[0], call.args[1]
    tensors = [lhs, rhs, call]
    # An int8 operand is dequantize(codes): a constant there is as much a constant as a float one.
    operands = [_undequantized(ctx, e) for e in (lhs, rhs)]
    checks = _check_tensors(run, tensors) + [(constraint_same_shape, tuple(operands))] + _quant_checks(ctx)
    if not _run(run, ctx, "add", checks):
        return False
    shape = static_shape(call)
    return _run(
        run, ctx, "add", [(constraint_vector_width, (shape, run.config)), (constraint_clip_bounds, (_act(ctx),))]
    )


def _check_view(run: PartitionRun, ctx, pattern: str, keeps_rows) -> bool:
    """A reshape or slice: a view on the NPU (no data moves) when `keeps_rows` (the constraint of its
    kind) accepts it; in int8 it must also keep its scale and zero point."""
    call = ctx.annotated_expr["op"]
    tensors = [call.args[0], call]
    checks = _check_tensors(run, tensors) + [(keeps_rows, (call,))] + _quant_checks(ctx)
    if "quantize" in ctx.annotated_expr:
        checks.append(
            (constraint_same_quantization, (_resolve(ctx, ctx.annotated_expr["data"]), ctx.annotated_expr["quantize"]))
        )
    return _run(run, ctx, pattern, checks)


@applies(*TENSOR_CONSTRAINTS, constraint_reshape_keeps_rows, int8=QUANT_CONSTRAINTS + [constraint_same_quantization])
def check_reshape(run: PartitionRun, ctx) -> bool:
    return _check_view(run, ctx, "reshape", constraint_reshape_keeps_rows)


@applies(*TENSOR_CONSTRAINTS, constraint_permute_view, int8=QUANT_CONSTRAINTS)
def check_permute_view(run: PartitionRun, ctx) -> bool:
    """A permute_dims between a map and its pixels as rows: a view (no data moves) when those are the same
    bytes (fp16)."""
    call = ctx.annotated_expr["op"]
    checks = _check_tensors(run, [call.args[0], call]) + [(constraint_permute_view, (call, 2, run.config))]
    return _run(run, ctx, "permute_view", checks + _quant_checks(ctx))  # no QDQ in its pattern: none


@applies(*TENSOR_CONSTRAINTS, constraint_slice_rows, int8=QUANT_CONSTRAINTS + [constraint_same_quantization])
def check_slice(run: PartitionRun, ctx) -> bool:
    return _check_view(run, ctx, "slice", constraint_slice_rows)


@applies(*TENSOR_CONSTRAINTS, *POOL_ATTRS, constraint_width, constraint_pool_window_fits, int8=QUANT_CONSTRAINTS)
def check_pool(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    tensors = [call.args[0], call]
    checks = _check_tensors(run, tensors) + attribute_checks(call) + _quant_checks(ctx)
    if not _run(run, ctx, "pool", checks):
        return False
    layout = "NCHW" if call.op.name == "relax.mean" else str(call.attrs.layout)
    elem = 1 if "quantize" in ctx.annotated_expr else 2
    width = static_shape(call.args[0])[layout.index("W")]
    return _run(
        run,
        ctx,
        "pool",
        [(constraint_width, ([width], run.config)), (constraint_pool_window_fits, (call, elem, run.config))],
    )


@applies(*TENSOR_CONSTRAINTS, constraint_concat, constraint_width, int8=QUANT_CONSTRAINTS)
def check_concat(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    fields = list(_resolve(ctx, call.args[0]).fields)
    quantized = "quantize" in ctx.annotated_expr
    dqs = [_resolve(ctx, f) for f in fields] if quantized else []
    inputs = [dq.args[0] for dq in dqs] if quantized else fields
    tensors = (dqs or fields) + [call]
    checks = _check_tensors(run, tensors) + _quant_checks(ctx)
    if not _run(run, ctx, "concat", checks):
        return False
    elem = 1 if quantized else 2
    return _run(
        run,
        ctx,
        "concat",
        [
            (constraint_concat, (call, inputs, elem, run.config)),
            (constraint_width, ([static_shape(call)[-1]], run.config)),
        ],
    )


def _operands(ctx, call) -> tuple:
    """The operands an elementwise op reads on the NPU: the int8 codes under the dequantizes in QDQ
    form (their constness decides the broadcast mode), else the call's own arguments."""
    ann = ctx.annotated_expr
    if "quantize" in ann:
        return ann["lhs"].args[0], ann["rhs"].args[0]
    return call.args[0], call.args[1]


@applies(
    *TENSOR_CONSTRAINTS,
    constraint_broadcast,
    constraint_fp16_constants,
    constraint_vector_width,
    constraint_clip_bounds,
    int8=QUANT_CONSTRAINTS + [constraint_eltwise_scales],
)
def check_eltwise(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    lhs, rhs = call.args[0], call.args[1]
    tensors = [lhs, rhs, call]
    checks = [(constraint_float32, (tensors,)), (constraint_static_shape, (tensors,))]
    if not _run(run, ctx, "eltwise", checks):
        return False
    # A scalar constant b is a rank-0 tensor that broadcasts: only the tensors need a stored row.
    ranked = [call] + [arg for arg, op in zip(call.args, _operands(ctx, call)) if constant_value(op) is None]
    checks = [(constraint_rank, (ranked, run.config))] + _quant_checks(ctx, wide=True)
    if not _run(run, ctx, "eltwise", checks):
        return False
    checks = [
        (constraint_broadcast, (call,) + _operands(ctx, call)),
        (constraint_fp16_constants, ([_resolve(ctx, op) for op in _operands(ctx, call)],)),
    ]
    ann = ctx.annotated_expr
    if "quantize" in ann:
        checks.append(
            (constraint_eltwise_scales, (ann["lhs"], ann["rhs"], ann["quantize"], call.op.name == "relax.multiply"))
        )
    checks += [(constraint_vector_width, (static_shape(call), run.config)), (constraint_clip_bounds, (_act(ctx),))]
    return _run(run, ctx, "eltwise", checks)


@applies(constraint_static_shape, constraint_rank, constraint_vector_width, int8=QUANT_CONSTRAINTS)
def check_requantize(run: PartitionRun, ctx) -> bool:
    """quantize(dequantize(x)): a change of scale or width (int16 -> int8 before a table lookup) as an
    ELTWISE add whose b_mult is 0."""
    ann = ctx.annotated_expr
    dq, q = ann["data"], ann["quantize"]
    tensors = [dq, q]
    checks = [(constraint_static_shape, (tensors,)), (constraint_rank, (tensors, run.config))] + _quant_checks(
        ctx, wide=True
    )
    # The width only after the rank: a scalar has no last dimension (a rank-0 constant's dequantize).
    if not _run(run, ctx, "requantize", checks):
        return False
    return _run(run, ctx, "requantize", [(constraint_vector_width, (static_shape(q), run.config))])


def _scalar(expr, value: float) -> bool:
    v = constant_value(expr)
    return v is not None and v.size == 1 and float(v.reshape(-1)[0]) == value


def is_hardswish(ann) -> bool:
    """x * (clip(x + 3, 0, 6) / 6), as TVM imports ONNX HardSwish. Another expression of this shape
    is not a hardswish: it is no rejection, its ops are matched one by one (ELTWISE) instead."""
    add, clip, div = ann["hs_add"], ann["hs_clip"], ann["hs_div"]
    bounds = [b.value for b in clip.args[1:] if isinstance(b, (IntImm, FloatImm))]
    x, x2 = ann["data"], ann["data_b"]
    if "quantize" in ann:  # two dequantizes: of the same tensor, with the same scale and zero point
        same = x.args[0].same_as(x2.args[0]) and all(
            _scalar(b, float(constant_value(a).reshape(-1)[0])) for a, b in zip(x.args[1:3], x2.args[1:3])
        )
    else:
        same = x.same_as(x2)
    return same and _scalar(add.args[1], 3.0) and _scalar(div.args[1], 6.0) and bounds == [0, 6]


@applies(*TENSOR_CONSTRAINTS, constraint_vector_width, int8=QUANT_CONSTRAINTS)
def check_unary(run: PartitionRun, ctx) -> bool:
    ann = ctx.annotated_expr
    call = ann["op"]
    if "hs_add" in ann and not is_hardswish(ann):
        return False
    tensors = [call.args[0], call]
    checks = _check_tensors(run, tensors) + _quant_checks(ctx)
    if not _run(run, ctx, "unary", checks):
        return False
    return _run(run, ctx, "unary", [(constraint_vector_width, (static_shape(call), run.config))])


# A staged model input or output (quantized staging, format 1.3), after its model-input / output check.
STAGED_CONSTRAINTS = (constraint_static_shape, constraint_rank, constraint_staged_reshape, constraint_width)


def _staged_io(ctx, quantize_input: bool):
    """The var a staged quantize or dequantize converts: the model input under a quantize (and a
    reshape), or the model output a dequantize (and a reshape) makes."""
    ann = ctx.annotated_expr
    if quantize_input:
        return ann["reshape"].args[0] if "reshape" in ann else ann["op"].args[0]
    return ctx.value_to_bound_var.get(ann.get("reshape", ann["op"]))


@applies(constraint_model_input, *STAGED_CONSTRAINTS, int8=QUANT_CONSTRAINTS)
def check_quantize_input(run: PartitionRun, ctx) -> bool:
    """quantize(x) of a model input x, or quantize(reshape(x)): the region's input, quantized by the runtime
    as it stages it. With a reshape, a quantize not of a model input is left to the plain entry (it gives
    the reason)."""
    ann = ctx.annotated_expr
    q, data = ann["op"], _staged_io(ctx, True)
    if "reshape" in ann and constraint_model_input(data, run.io) is not None:
        return False
    checks = [
        (constraint_model_input, (data, run.io)),
        (constraint_static_shape, ([q, data],)),
        (constraint_rank, ([q, data], run.config)),
    ] + _quant_checks(ctx, wide=True)
    if "reshape" in ann:
        checks.append((constraint_staged_reshape, (ann["reshape"], q)))
    if not _run(run, ctx, "input", checks):
        return False
    return _run(run, ctx, "input", [(constraint_width, ([static_shape(q)[-1]], run.config))])


@applies(constraint_model_output, *STAGED_CONSTRAINTS, int8=QUANT_CONSTRAINTS)
def check_dequantize_output(run: PartitionRun, ctx) -> bool:
    """dequantize(q) returned by the model, or reshape(dequantize(q)): the region's output, dequantized by
    the runtime as it stages it. With a reshape, a result that is not a model output is left alone."""
    ann = ctx.annotated_expr
    dq = ann["op"]
    result = _staged_io(ctx, False)
    if "reshape" in ann and constraint_model_output(result, run.io) is not None:
        return False
    checks = [
        (constraint_model_output, (result, run.io)),
        (constraint_static_shape, ([dq],)),
        (constraint_rank, ([dq], run.config)),
    ] + _quant_checks(ctx, wide=True)
    if "reshape" in ann:
        checks.append((constraint_staged_reshape, (ann["reshape"], dq.args[0])))
    if not _run(run, ctx, "qoutput", checks):
        return False
    return _run(run, ctx, "qoutput", [(constraint_width, ([static_shape(dq)[-1]], run.config))])


# Ops that run on the NPU as views of their input (no data moved, docs/npu.md section 3).
VIEW_OPS = ("relax.reshape", "relax.strided_slice")


def _view_source(ctx, expr):
    """The tensor under a chain of views of `expr`, and the vars bound before the match (a var that is
    not among them is a parameter of main)."""
    bound = {var: value for value, var in ctx.value_to_bound_var.items()}
    while isinstance(expr, tvm.relax.Var) and getattr(bound.get(expr), "op", None) is not None:
        value = bound[expr]
        if getattr(value.op, "name", "") not in VIEW_OPS:
            break
        expr = value.args[0]
    return expr, bound


@applies(*TENSOR_CONSTRAINTS, *SOFTMAX_ATTRS, constraint_width, constraint_softmax_input, int8=QUANT_CONSTRAINTS)
def check_softmax(run: PartitionRun, ctx) -> bool:
    call = ctx.annotated_expr["op"]
    tensors = [call.args[0], call]
    checks = _check_tensors(run, tensors) + _quant_checks(ctx)
    if not _run(run, ctx, "softmax", checks):
        return False
    checks = attribute_checks(call) + [(constraint_width, ([static_shape(call)[-1]], run.config))]
    if "quantize" not in ctx.annotated_expr:  # int8 codes are exact: no fp16 staging of a float input
        checks.append((constraint_softmax_input, _view_source(ctx, call.args[0])))
    return _run(run, ctx, "softmax", checks)


def _act(ctx):
    act = ctx.annotated_expr.get("act")
    return act if act is not None and act.op.name == "relax.clip" else None
