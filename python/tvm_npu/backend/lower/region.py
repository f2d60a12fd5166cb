"""The state of lowering one NPU region: its Graph, the region tensor of each Relax var, and the
quantized staging of its inputs and outputs (docs/npu.md section 2, format 1.3)."""

from __future__ import annotations

from dataclasses import replace

from ...contract.errors import NPUError
from ...ir.values import dtype_of, static_shape
from ...partition.layouts import Layouts
from .graph import Graph, TensorInfo, conv_view, rows_view


class Region:
    """One function marked Codegen="npu", while its composites are lowered in order."""

    def __init__(self, graph: Graph, params=()):
        self.graph = graph
        self.params = set(params)  # the region's inputs
        self.staged_in = {}  # a model input's quantize result -> (the region's float32 input, scale, zp)
        self.staged = {}  # a region input or output staged with quantization -> its host form
        self.layouts = Layouts([])  # how each 4-D tensor is stored (lower_function sets it)

    def layout_view(self, var, shape=None) -> tuple:
        """(layout, device view) of region tensor `var` (of `shape`, default its own): an NCHW / NHWC map
        or rows, as layouts.Layouts decided for the whole region."""
        shape = tuple(shape or static_shape(var))
        layout = self.layouts.layout(var)
        return layout, rows_view(shape) if layout == "ROWS" else conv_view(shape, layout)

    def tensor(self, var, view, layout, dtype, host_dtype, shape=None) -> str:
        """Name of the region tensor bound to `var` (Relax names are not unique: key by the Var)."""
        graph = self.graph
        if dtype == "int8" and dtype_of(var) == "int16":  # a 16-bit tensor of the integer datapath
            dtype = host_dtype = "int16"
        known = graph.var_names.get(var)
        if known is None:
            known = graph.var_names[var] = f"{var.name}:{len(graph.var_names)}"
            host_shape = tuple(shape or static_shape(var))
            graph.tensors[known] = TensorInfo(known, host_shape, layout, tuple(view), dtype, host_dtype)
            if var in self.staged_in:  # quantized by the runtime from the region's float32 input
                source, scale, zp = self.staged_in[var]
                graph.var_names[source] = known
                self.staged[source] = self.host_form(graph.tensors[known], static_shape(source), scale, zp)
        elif graph.tensors[known].view != tuple(view) or graph.tensors[known].dtype != dtype:
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"{graph.label}: tensor {var.name} is used with two layouts or dtypes; the "
                "conversion between them must run on the CPU",
            )
        return known

    def host_form(self, info: TensorInfo, host_shape: tuple, scale: float, zp: int) -> TensorInfo:
        """`info` as a float32 host tensor of `host_shape`, quantized with (scale, zp). Through a reshape
        the host tensor is staged as rows of its last dimension, which must be the device view's rows
        (constraints.constraint_staged_reshape)."""
        form = replace(info, host_dtype="float32", qparams=(scale, zp))
        if tuple(host_shape) != info.host_shape:
            if info.view != rows_view(host_shape):
                raise NPUError(
                    "ERR_OP_NOT_SUPPORTED",
                    f"{self.graph.label}: {info.name} is stored as {info.view}, not as rows of host shape {host_shape}",
                )
            form.host_shape, form.host_layout = tuple(host_shape), "ROWS"
        return form
