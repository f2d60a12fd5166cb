"""The check of rotary position embedding (ROPE, docs/npu.md section 2, format 1.4): Hugging Face Llama's
x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]), as TVM imports it from
ONNX (Slice, Neg, Concat, Mul, Add) and as Relax writes it. cos / sin are constants or run-time tensors (a
decoder gathers them on the CPU by position)."""

from __future__ import annotations

from ..ir.values import static_shape
from .checks import (
    QUANT_CONSTRAINTS,
    TENSOR_CONSTRAINTS,
    PartitionRun,
    _check_tensors,
    _quant_checks,
    _resolve,
    _run,
    applies,
)
from .transformer_constraints import (
    constraint_rope_fits,
    constraint_rope_float,
    constraint_rope_form,
    constraint_rope_tables,
    rope_table_rows,
)


def rope_operands(ann: dict, resolve) -> tuple:
    """(x, cos, sin, the x[h:] slice, the x[:h] slice, the concat) of a match's annotations; `resolve` sees
    through the match's bindings. DPL matches the multiplies either way round: x is the operand that is not
    the rotated half's partner, found by the slices' source."""
    hi, lo, rot = (resolve(ann[k]) for k in ("hi", "lo", "rot"))
    x = resolve(hi.args[0])
    xc, rs = resolve(ann["xc"]), resolve(ann["rs"])
    cos = xc.args[1] if resolve(xc.args[0]).same_as(x) else xc.args[0]
    sin = rs.args[1] if resolve(rs.args[0]).same_as(rot) else rs.args[0]
    return x, resolve(cos), resolve(sin), hi, lo, rot


@applies(
    *TENSOR_CONSTRAINTS,
    constraint_rope_float,
    constraint_rope_form,
    constraint_rope_tables,
    constraint_rope_fits,
    int8=QUANT_CONSTRAINTS,
)
def check_rope(run: PartitionRun, ctx) -> bool:
    """x * cos + concat(-x[h:], x[:h]) * sin (annotations "add", "xc", "rs" the multiplies, "rot" the concat,
    "hi" / "lo" the slices, "op" the negation a refusal is reported on; patterns.rope_patterns). No int8
    form: a dequantized x is refused."""
    ann = ctx.annotated_expr
    call = _resolve(ctx, ann["add"])
    x, cos, sin, hi, lo, rot = rope_operands(ann, lambda e: _resolve(ctx, e))
    checks = [(constraint_rope_float, (x,))]
    checks += _check_tensors(run, [x, cos, sin, call]) + _quant_checks(ctx)
    if not _run(run, ctx, "rope", checks):
        return False
    x_shape, out_shape = static_shape(x), static_shape(call)
    same_x = _resolve(ctx, lo.args[0]).same_as(x)
    checks = [
        (constraint_rope_form, (x_shape, hi, lo, int(rot.attrs.axis), same_x)),
        (constraint_rope_tables, (x_shape, out_shape, cos, sin, static_shape(cos), static_shape(sin))),
    ]
    if not _run(run, ctx, "rope", checks):
        return False
    rows = rope_table_rows(x_shape, static_shape(cos))
    return _run(run, ctx, "rope", [(constraint_rope_fits, (rows, x_shape[-1], run.config))])
