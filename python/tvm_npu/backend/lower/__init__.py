"""Stage 4a — lower: an NPU-partitioned Relax function becomes a list of NPU layers.

Each composite function (names from partition/patterns.py) inside one function marked Codegen="npu" is
lowered by the function its family registered under that name (registry.py): conv.py (conv2d, dense),
eltwise.py (add, elementwise ops, requantize), pool.py, resize.py (nearest upsampling), vector.py (unary),
softmax.py (softmax, with attention's scale and mask), norm.py (layer_norm, rms_norm), group_norm.py (GroupNorm
[-> SiLU], format 1.7), views.py (reshape,
slice, concat) and staging.py (quantized staging of the region's I/O). The result is `Layer` records
(graph.py): weights already in the NPU's order ([OC][KH][KW][IC], fp16 or int8), biases fp32 or int32,
and for int8 layers the integer requantization parameters of docs/npu.md section 2 (quant_params.py).
All layout and scale arithmetic happens here, at compile time, never at run time.
"""

from __future__ import annotations

import importlib
import pkgutil

from tvm import relax

from ...contract.errors import NPUError
from ...ir.graph import brief
from ...partition.layouts import Layouts
from .composite import Composite
from .graph import Graph, Layer, TensorInfo
from .region import Region
from .registry import lowering_for

__all__ = ["Graph", "Layer", "TensorInfo", "lower_function"]  # the planner's input, and what makes it

# Every module of this package, so each family's @lowers registrations run: a new family is its file
# (and its pattern), with no list here to extend.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
del _module


def lower_function(func: relax.Function) -> Graph:
    """Lower one function with attribute Codegen="npu" to a Graph of NPU layers.

    Parameters
    ----------
    func : relax.Function
        An NPU region: calls of composite functions bound in its body, one per binding.

    Returns
    -------
    Graph
        Its layers in order, its tensors, and the quantized staging of its inputs and outputs.
    """
    symbol = str(func.attrs["global_symbol"])
    region = Region(Graph(symbol), func.params)
    graph = region.graph
    composites, calls = {}, []
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                calls.append((binding.var, composites[value.op], value.args))
            else:
                raise NPUError(
                    "ERR_OP_NOT_SUPPORTED", f"{brief(symbol)}: unexpected binding {binding.var.name} in an NPU region"
                )
    region.layouts = Layouts(calls)  # one layout per 4-D tensor; regions.py cut every region with a conflict
    if region.layouts.conflict is not None:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{brief(symbol)}: {region.layouts.conflict}")
    for var, composite, args in calls:
        comp = Composite(region, composite, args, var)
        layer = lowering_for(comp.name)(comp)
        if layer is not None:
            graph.layers.append(layer)
    body = func.body.body
    outs = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    missing = [v.name for v in list(func.params) + outs if v not in graph.var_names]
    if missing:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{brief(symbol)}: region tensors {missing} are not NPU tensors")
    graph.inputs = [graph.var_names[p] for p in func.params]
    graph.outputs = [graph.var_names[o] for o in outs]
    graph.staged = {
        (role, i): region.staged[v]
        for role, vs in (("input", func.params), ("output", outs))
        for i, v in enumerate(vs)
        if v in region.staged
    }
    return graph
