"""The check of a matmul of two activations (MATMUL, docs/npu.md section 4, format 1.4): attention's Q x K^T
and P x V, the second operand optionally transposed (permute_dims of its last two axes: b_transposed) and,
for grouped-query attention, repeated over query heads by reshape (an expand_dims becomes one,
rewrite/views.py) -> broadcast_to -> reshape, folded into MATMUL's b_group: addressing, not a copy. Attention's
head split (reshape [B, S, H * D] -> [B, S, H, D], permute_dims) of either operand and the merge of the
product's heads back to [B, S, H * D] are addressing too (MATMUL's head slices, format 1.8:
check_matmul_heads)."""

from __future__ import annotations

import dataclasses

from ..ir.values import constant_value, static_shape
from .attributes import attribute_checks, attribute_constraints
from .checks import (
    QUANT_CONSTRAINTS,
    TENSOR_CONSTRAINTS,
    PartitionRun,
    _check_tensors,
    _quant_checks,
    _resolve,
    _run,
    applies,
    weight_constant,
)
from .constraints import constraint_width
from .transformer_constraints import (
    constraint_head_bytes,
    constraint_head_merge,
    constraint_head_split,
    constraint_matmul_batch,
    constraint_matmul_fits,
    constraint_matmul_float,
    constraint_matmul_rank,
    constraint_matmul_transpose,
    constraint_qmatmul_accumulator,
    constraint_repeat_kv,
)


def matmul_operands(ann: dict):
    """(the matmul call, A, the tensor B is read from, the permute_dims call or None, the repeat calls
    (reshape, broadcast_to, reshape) or None) of a match's annotations."""
    call = ann["op"]
    b = call.args[1]
    perm = ann.get("transpose")
    if perm is not None:
        b = perm.args[0]
    repeat = None
    if "repeat" in ann:
        merge = ann["repeat"]
        bcast = ann["broadcast"]
        split = ann["split"]
        repeat = (split, bcast, merge)
        b = split.args[0]
    return call, call.args[0], b, perm, repeat


@applies(
    *TENSOR_CONSTRAINTS,
    *attribute_constraints("relax.matmul"),
    constraint_matmul_float,
    constraint_matmul_rank,
    constraint_matmul_transpose,
    constraint_repeat_kv,
    constraint_matmul_batch,
    constraint_width,
    constraint_matmul_fits,
    int8=QUANT_CONSTRAINTS + [constraint_qmatmul_accumulator],
)
def check_matmul(run: PartitionRun, ctx) -> bool:
    """fp16 (npu.matmul*) and int8 x int8 (npu.qmatmul*: quantize(matmul(dequantize(a), dequantize(b))),
    "lhs" / "rhs" the dequantizes) matmuls of two activations."""
    ann = ctx.annotated_expr
    call, a, b, perm, repeat = matmul_operands(ann)
    if weight_constant(call, ctx.matched_bindings) is not None or constant_value(_resolve(ctx, a)) is not None:
        # A constant B is dense's (a 2-D weight), with dense's reasons; a constant A (no such pattern) stays
        # on the CPU as an op no pattern takes.
        return False
    int8 = "quantize" in ann
    checks = [] if int8 else [(constraint_matmul_float, (_resolve(ctx, a), _resolve(ctx, b)))]
    checks += _check_tensors(run, [a, b, call]) + _quant_checks(ctx) + attribute_checks(call)
    if not _run(run, ctx, "matmul", checks):
        return False
    a_shape, out_shape = static_shape(a), static_shape(call)
    b_shape = static_shape(call.args[1])  # B as the matmul reads it ([.., K, N])
    checks = [(constraint_matmul_rank, (a_shape, b_shape))]
    if perm is not None:
        checks.append((constraint_matmul_transpose, (perm.attrs.axes, len(b_shape))))
    if repeat is not None:
        split, bcast, merge = repeat
        shapes = [static_shape(e) for e in (split.args[0], split, bcast, merge)]
        checks.append((constraint_repeat_kv, tuple(shapes)))
    if int8:
        zps = [int(constant_value(_resolve(ctx, ann[k]).args[2]).reshape(-1)[0]) for k in ("lhs", "rhs")]
        checks.append((constraint_qmatmul_accumulator, (a_shape[-1], *zps)))
    checks += [
        (constraint_matmul_batch, (a_shape, b_shape, out_shape)),
        (constraint_width, ([a_shape[-1], out_shape[-1]], run.config)),
        (constraint_matmul_fits, (a_shape[-1], out_shape[-1], perm is not None, run.config, 1 if int8 else 2)),
    ]
    return _run(run, ctx, "matmul", checks)


@applies(
    *TENSOR_CONSTRAINTS,
    *attribute_constraints("relax.matmul"),
    constraint_matmul_float,
    constraint_matmul_rank,
    constraint_head_split,
    constraint_head_merge,
    constraint_head_bytes,
    constraint_matmul_batch,
    constraint_width,
    constraint_matmul_fits,
    int8=QUANT_CONSTRAINTS,
)
def check_matmul_heads(run: PartitionRun, ctx) -> bool:
    """An fp16 matmul of two activations (npu.matmul_heads) whose first operand is a head split
    ("a_reshape" -> "a_split"), whose second is one ("b_reshape" -> "b_split", also as K^T) and / or whose
    product's heads are merged ("merge_perm" -> "merge"): each head a column slice of the rows."""
    ann = ctx.annotated_expr
    call = ann["op"]
    a, b = call.args
    if weight_constant(call, ctx.matched_bindings) is not None or constant_value(_resolve(ctx, a)) is not None:
        return False  # a constant operand is dense's (or no pattern's), as in check_matmul
    sources = [ann[k].args[0] for k in ("a_reshape", "b_reshape") if k in ann]
    outs = [ann["merge"]] if "merge" in ann else []
    checks = [(constraint_matmul_float, (_resolve(ctx, a), _resolve(ctx, b)))]
    # No int8 form (the patterns match no quantize): _quant_checks finds nothing to check.
    checks += _check_tensors(run, [*sources, a, b, call, *outs]) + _quant_checks(ctx) + attribute_checks(call)
    if not _run(run, ctx, "matmul_heads", checks):
        return False
    a_shape, b_shape, out_shape = static_shape(a), static_shape(b), static_shape(call)
    if not _run(run, ctx, "matmul_heads", [(constraint_matmul_rank, (a_shape, b_shape))]):
        return False
    k_eff, n_eff, transposed = a_shape[-1], out_shape[-1], False
    for side in ("a", "b"):
        if f"{side}_split" not in ann:
            continue
        split, perm = ann[f"{side}_reshape"], ann[f"{side}_split"]
        src, split_shape = static_shape(split.args[0]), static_shape(split)
        part = [(constraint_head_split, (src, split_shape, perm.attrs.axes, side == "b"))]
        part.append((constraint_head_bytes, (split_shape[-1] if split_shape else 0, 2)))
        if not _run_part(run, ctx, part, (split, perm)):
            return False
        transposed = transposed or (side == "b" and list(perm.attrs.axes)[-1] == 1)
        width = src[-1]  # a head-split operand is loaded as whole rows (every head)
        k_eff, n_eff = (width, n_eff) if side == "a" or transposed else (k_eff, width)
    if outs:
        part = [(constraint_head_merge, (out_shape, ann["merge_perm"].attrs.axes, static_shape(outs[0])))]
        part.append((constraint_head_bytes, (out_shape[-1], 2)))
        if not _run_part(run, ctx, part, (ann["merge_perm"], outs[0])):
            return False
        n_eff = static_shape(outs[0])[-1]
    checks = [
        (constraint_matmul_batch, (a_shape, b_shape, out_shape)),
        (constraint_width, ([a_shape[-1], out_shape[-1]], run.config)),
        (constraint_matmul_fits, (k_eff, n_eff, transposed, run.config, 2)),
    ]
    return _run(run, ctx, "matmul_heads", checks)


def _run_part(run: PartitionRun, ctx, checks, parts) -> bool:
    """`_run` for the checks of a head split or merge, its refusal also recorded on the part's own ops
    (the reshape and permute_dims that stay on the CPU, while the matmul may still run as npu.matmul)."""
    before = len(run.log) if run.log is not None else 0
    if _run(run, ctx, "matmul_heads", checks):
        return True
    if run.log is not None and len(run.log) > before:
        refusal = run.log[-1]
        for expr in parts:
            var = ctx.value_to_bound_var.get(expr)
            if var is not None:
                run.log.append(dataclasses.replace(refusal, var=var.name, op=expr.op.name, weight=None))
    return False
