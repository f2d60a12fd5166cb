"""Stage 2 — the check of the NORM family (relax.nn.layer_norm, relax.nn.rms_norm on the vector unit,
fp16, or int8 codes in and out, format 1.4): kept apart from checks.py, which holds the older families,
to keep each module small."""

from __future__ import annotations

from ..ir.values import static_shape
from .attributes import attribute_checks
from .checks import QUANT_CONSTRAINTS, TENSOR_CONSTRAINTS, PartitionRun, _check_tensors, _quant_checks, _run, applies
from .constraints import constraint_width
from .transformer_constraints import constraint_norm_axes, constraint_norm_params


@applies(*TENSOR_CONSTRAINTS, constraint_norm_axes, constraint_norm_params, constraint_width, int8=QUANT_CONSTRAINTS)
def check_norm(run: PartitionRun, ctx) -> bool:
    """layer_norm(x, gamma, beta) or rms_norm(x, weight) over a matrix's rows; its int8 entries (npu.qlayer_norm,
    npu.qrms_norm) take quantize(norm(dequantize(x))): the codes dequantized, the fp32 norm, quantized."""
    call = ctx.annotated_expr["op"]
    tensors = [call.args[0], call]
    if not _run(run, ctx, "norm", _check_tensors(run, tensors) + _quant_checks(ctx)):
        return False
    # The table's attribute constraints (axes, then epsilon / gamma / beta), then the row length.
    checks = attribute_checks(call) + [(constraint_width, ([static_shape(call)[-1]], run.config))]
    return _run(run, ctx, "norm", checks)
