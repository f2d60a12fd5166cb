"""Quantized staging (docs/npu.md section 2, format 1.3): a model input's quantize and a model output's
dequantize, each with or without a reshape (patterns.IO_COMPOSITES), become no layer: the runtime
converts the region tensor as it stages it. The region's argument or result gets its own host form
(`Region.staged`); the integer tensor keeps its own, as another region output may be that tensor."""

from __future__ import annotations

from ...contract.errors import NPUError
from ...ir.values import static_shape
from ...partition.patterns import IO_COMPOSITES, PREFIX, QUANTIZE_INPUTS
from .composite import Composite, qparams
from .registry import lowers


@lowers(*(name.removeprefix(f"{PREFIX}.") for name in IO_COMPOSITES))
def lower_staging(comp: Composite) -> None:
    """Record the staging of a model input's quantize or a model output's dequantize; no layer."""
    quantize_input = comp.name in QUANTIZE_INPUTS
    scale, zp = qparams(comp.calls["quantize" if quantize_input else "dequantize"][0])
    region, data = comp.region, comp.args[0]
    if quantize_input:  # the tensor is made when an op reads it, in that op's view (Region.tensor)
        region.staged_in[comp.out_var] = (data, scale, zp)
        return None
    name = region.graph.var_names.get(data)
    if name is None or data in region.params:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{region.graph.label}: the dequantized output {comp.out_var.name} is not computed in the region",
        )
    region.staged[comp.out_var] = region.host_form(region.graph.tensors[name], static_shape(comp.out_var), scale, zp)
    region.graph.var_names[comp.out_var] = name
    return None
