"""Stage 4a — lower: an NPU-partitioned Relax function becomes a list of NPU layers.

Reads the composite functions (names from partition/patterns.py) inside one function marked Codegen="npu" and
produces `Layer` records: weights already in the NPU's order ([OC][KH][KW][IC], fp16 or int8), biases
fp32 or int32, and for int8 layers the integer requantization parameters of docs/npu.md section 2.
All layout and scale arithmetic happens here, at compile time, never at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import tvm
from tvm import relax

from . import quant_params as qp
from ..partition.constraints import broadcast_mode
from ..ir.values import constant_value, dtype_of, eval_const, static_shape
from ..contract.errors import NPUError
from ..partition.patterns import IO_COMPOSITES, QUANTIZE_INPUTS


@dataclass
class TensorInfo:
    """A tensor of the region: its host form and its device view [N, H, W, C]."""

    name: str
    host_shape: tuple
    host_layout: str  # NCHW, NHWC or ROWS (docs/npu.md section 6)
    view: tuple
    dtype: str = "float16"  # on the device
    host_dtype: str = "float32"
    # Quantized staging (int8 / int16 on the device, float32 on the host; format 1.3): scale, zero point
    qparams: tuple | None = None


@dataclass
class Layer:
    """One NPU op: "conv" (MAC array; dense is a 1x1 conv over [1, M, 1, K]), "add", "pool", "eltwise",
    "unary" or "softmax" (vector), "view" (a reshape that keeps the stored rows: its output aliases its
    input, no command) or "concat" (its inputs are written into its channels or rows, no command;
    slices.py)."""

    name: str
    composite: str
    kind: str
    dtype: str  # "float16" or "int8" (the integer datapath; its tensors may be int8 or int16)
    inputs: list = field(default_factory=list)
    out: str = ""
    weight: np.ndarray | None = None  # [OC, KH, KW, IC/groups]
    bias: np.ndarray | None = None  # fp32 or int32 [OC]
    groups: int = 1
    window: tuple = (1, 1)  # pool window
    pool_kind: str = "avg"
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)  # top, left, bottom, right
    act: str = "none"
    clip: tuple = (0.0, 0.0)
    # int8 only (docs section 2): zero points, multipliers, shift(s), clamp.
    in_zps: tuple = ()
    out_zp: int = 0
    scale: np.ndarray | None = None  # fp32 requantization scales: [OC] for conv, [1] for pool
    mult: np.ndarray | None = None  # add: integer multipliers of both inputs, and one shift
    shift: int = 0
    clamp: tuple = (-128, 127)
    macs: int = 0
    out_elems: int = 0
    # concat: each input's first channel in the output (rows: first row); view (rows): its first row.
    offsets: tuple = ()
    rows: bool = False
    # eltwise / unary (docs/npu.md section 6): the op ("add", "sigmoid", ...), b's broadcast mode, the
    # constant the command reads from the weight region (b, or the int8 table), leaky relu's slope.
    func: str = ""
    b_mode: str = "same"
    const: np.ndarray | None = None
    alpha: float = 0.0
    # integer eltwise: the dtypes of a, b and the result ("int8" or "int16", format 1.2)
    dtypes: tuple = ()

    @property
    def taps(self) -> tuple:
        """(kh, stride_h, dil_h, pad_top): the row geometry tiling needs."""
        if self.kind == "conv":
            kh = self.weight.shape[1]
        else:
            kh = self.window[0]
        return kh, self.stride[0], self.dilation[0], self.padding[0]


@dataclass
class Graph:
    """A lowered NPU region."""

    symbol: str
    inputs: list = field(default_factory=list)  # tensor names, in argument order
    outputs: list = field(default_factory=list)
    tensors: dict = field(default_factory=dict)  # name -> TensorInfo
    layers: list = field(default_factory=list)
    var_names: dict = field(default_factory=dict)  # relax.Var -> tensor name
    # (role, index) of a region input / output staged with quantization -> its host form (TensorInfo)
    staged: dict = field(default_factory=dict)


def _qparams(call) -> tuple[float, int]:
    """Per-tensor (scale, zero point) of a quantize/dequantize call."""
    scale, zp = (constant_value(a) for a in call.args[1:3])
    return float(np.asarray(scale).reshape(-1)[0]), int(np.asarray(zp).reshape(-1)[0])


# --- composites -----------------------------------------------------------------------------------

def _bindings(func: relax.Function) -> dict:
    return {b.var: b.value for block in func.body.blocks for b in block.bindings}


def _calls(func: relax.Function) -> dict:
    """The op calls inside a composite, by op name (without "relax."), in binding order."""
    calls: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                calls.setdefault(value.op.name.removeprefix("relax."), []).append(value)
    return calls


def _activation(calls: dict) -> tuple[str, tuple]:
    if "nn.relu" in calls:
        return "relu", (0.0, 0.0)
    if "clip" in calls:
        return "clip", tuple(float(b.value) for b in calls["clip"][0].args[1:])
    return "none", (0.0, 0.0)


# UNARY composites (patterns.unary_patterns) and the Relax op each is built around.
UNARY_COMPOSITES = {"sigmoid": "sigmoid", "tanh": "tanh", "gelu": "nn.gelu", "leaky_relu": "nn.leakyrelu",
                    "hardswish": "multiply"}


def _conv_view(shape, layout):
    return tuple(shape[layout.index(d)] for d in "NHWC")


def _rows_view(shape):
    return (1, int(np.prod(shape[:-1])), 1, shape[-1])


def _layout_view(shape) -> tuple:
    """A vector op's host layout and device view: NCHW for a 4-D map, else rows."""
    return ("NCHW", _conv_view(shape, "NCHW")) if len(shape) == 4 else ("ROWS", _rows_view(shape))


def _data_dq(calls: dict):
    """The dequantize of an activation (its input is not a constant)."""
    for dq in calls.get("dequantize", []):
        if constant_value(dq.args[0]) is None:
            return dq
    return None


class _Lowerer:
    def __init__(self, graph: Graph, params=()):
        self.graph = graph
        self.params = set(params)  # the region's inputs
        self.staged_in = {}  # a model input's quantize result -> (the region's float32 input, scale, zp)
        self.staged = {}  # a region input or output staged with quantization -> its host form

    def staging(self, kind: str, comp: relax.Function, args, out_var) -> None:
        """A model input's quantize or a model output's dequantize, with or without a reshape
        (patterns.IO_COMPOSITES): no layer, the runtime converts the region tensor as it stages it
        (docs/npu.md section 2, format 1.3). The region's argument or result gets its own host form
        (`staged`); the integer tensor keeps its own, as another region output may be that tensor."""
        calls = _calls(comp)
        call = calls["quantize" if kind in QUANTIZE_INPUTS else "dequantize"][0]
        scale, zp = _qparams(call)
        if kind in QUANTIZE_INPUTS:  # the tensor is made when an op reads it, in that op's view
            self.staged_in[out_var] = (args[0], scale, zp)
            return
        data = args[0]
        name = self.graph.var_names.get(data)
        if name is None or data in self.params:
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{self.graph.symbol}: the dequantized output "
                           f"{out_var.name} is not computed in the region")
        self.staged[out_var] = self._host_form(self.graph.tensors[name], static_shape(out_var), scale, zp)
        self.graph.var_names[out_var] = name

    def _host_form(self, info: TensorInfo, host_shape: tuple, scale: float, zp: int) -> TensorInfo:
        """`info` as a float32 host tensor of `host_shape`, quantized with (scale, zp). Through a reshape
        the host tensor is staged as rows of its last dimension, which must be the device view's rows
        (constraints.constraint_staged_reshape)."""
        form = replace(info, host_dtype="float32", qparams=(scale, zp))
        if tuple(host_shape) != info.host_shape:
            if info.view != _rows_view(host_shape):
                raise NPUError("ERR_OP_NOT_SUPPORTED", f"{self.graph.symbol}: {info.name} is stored as "
                               f"{info.view}, not as rows of host shape {host_shape}")
            form.host_shape, form.host_layout = tuple(host_shape), "ROWS"
        return form

    def composite(self, comp: relax.Function, args, out_var) -> Layer | None:
        kind = str(comp.attrs["Composite"])
        if kind in IO_COMPOSITES:
            return self.staging(kind, comp, args, out_var)
        calls = _calls(comp)
        self.env = _bindings(comp)
        params = dict(zip(comp.params, args))
        layer = Layer(f"{self.graph.symbol}.{len(self.graph.layers)}", kind, "", "float16")
        layer.act, layer.clip = _activation(calls)
        int8 = kind.startswith("npu.q")
        layer.dtype = "int8" if int8 else "float16"
        if "concat" in calls:
            return self._concat(layer, calls, params, out_var)
        if "strided_slice" in calls:
            return self._slice_rows(layer, calls, params, out_var)
        if "reshape" in calls and len(calls) <= 3 and not ("nn.conv2d" in calls or "matmul" in calls):
            layer.kind = "view"  # no command: the output aliases the input's bytes
            call = calls["reshape"][0]
            data, out_shape = call.args[0], static_shape(call)
            in_shape = static_shape(call.args[0])
            layout = "NCHW" if len(in_shape) == 4 else "ROWS"
            in_view = _conv_view(in_shape, "NCHW") if len(in_shape) == 4 else _rows_view(in_shape)
            out_layout = "NCHW" if len(out_shape) == 4 else "ROWS"
            out_view = _conv_view(out_shape, "NCHW") if len(out_shape) == 4 else _rows_view(out_shape)
            if int8:
                data = _data_dq(calls).args[0]
            dtype, host_dtype = ("int8", "int8") if int8 else ("float16", "float32")
            layer.inputs = [self._tensor(params.get(data, data), in_view, layout, dtype, host_dtype)]
            layer.out = self._tensor(out_var, out_view, out_layout, dtype, host_dtype, out_shape)
            return layer
        base = kind.removeprefix("npu.q" if int8 else "npu.")
        if base == "requantize":  # an ELTWISE add of a scalar b with b_mult 0: t = (a - z_a) * M_a
            layer.kind, layer.func, layer.b_mode = "eltwise", "add", "scalar"
            data, in_view, layout, out_shape, out_view = self._requantize(layer, calls, params)
        elif base.startswith("eltwise_"):
            layer.kind, layer.func = "eltwise", base.split("_")[1]
            data, in_view, layout, out_shape, out_view = self._eltwise(layer, calls, params)
        elif base == "softmax":
            layer.kind = "softmax"
            data, in_view, layout, out_shape, out_view = self._unary(layer, calls, "nn.softmax")
        elif base in UNARY_COMPOSITES:
            layer.kind, layer.func = "unary", base
            data, in_view, layout, out_shape, out_view = self._unary(layer, calls)
        elif "nn.conv2d" in calls or "matmul" in calls:
            layer.kind = "conv"
            data, in_view, layout, out_shape, out_view = self._conv(layer, calls)
        elif "add" in calls:
            layer.kind = "add"
            data, in_view, layout, out_shape, out_view = self._add(layer, calls, params)
        else:
            layer.kind = "pool"
            data, in_view, layout, out_shape, out_view = self._pool(layer, calls)
        if int8:
            self._requant(layer, calls)
            if layer.kind not in ("add", "eltwise"):  # the int8 region tensor under the dequantize
                data = _data_dq(calls).args[0]
        dtype, host_dtype = ("int8", "int8") if int8 else ("float16", "float32")
        if layer.kind not in ("add", "eltwise"):
            region_in = params.get(data, data)
            layer.inputs = [self._tensor(region_in, in_view, layout, dtype, host_dtype)]
        layer.out = self._tensor(out_var, out_view, layout, dtype, host_dtype, out_shape)
        layer.out_elems = int(np.prod(out_view))
        if int8 and layer.kind == "eltwise":
            t = self.graph.tensors
            b = t[layer.inputs[1]].dtype if len(layer.inputs) > 1 else str(layer.const.dtype)
            layer.dtypes = (t[layer.inputs[0]].dtype, b, t[layer.out].dtype)
            self._eltwise_multipliers(layer, calls)
        return layer

    def _requantize(self, layer: Layer, calls: dict, params: dict):
        dq = calls["dequantize"][0]
        shape = static_shape(dq)
        layout, view = _layout_view(shape)
        a = dq.args[0]
        layer.inputs = [self._tensor(params.get(a, a), view, layout, "int8", "int8")]
        layer.const = np.zeros(1, np.int8)  # b: read, but b_mult 0 drops it
        self.elt_dqs = [dq, None]
        return None, view, layout, shape, view

    def _slice_rows(self, layer: Layer, calls: dict, params: dict, out_var) -> Layer:
        """A slice of whole leading rows (constraints.constraint_slice_rows): a view at a row offset."""
        layer.kind, layer.rows = "view", True
        call = calls["strided_slice"][0]
        data = _data_dq(calls).args[0] if layer.dtype == "int8" else call.args[0]
        in_shape, out_shape = static_shape(call.args[0]), static_shape(call)
        begin = int(call.args[2].fields[0].value)
        begin += in_shape[0] if begin < 0 else 0
        layer.offsets = (begin * int(np.prod(in_shape[1:-1])),)  # rows of the [1, rows, 1, K] view
        dtype, host_dtype = ("int8", "int8") if layer.dtype == "int8" else ("float16", "float32")
        layer.inputs = [self._tensor(params.get(data, data), _rows_view(in_shape), "ROWS", dtype, host_dtype)]
        layer.out = self._tensor(out_var, _rows_view(out_shape), "ROWS", dtype, host_dtype, out_shape)
        return layer

    def _concat(self, layer: Layer, calls: dict, params: dict, out_var) -> Layer:
        """Inputs and their channel offsets; int8: each input's zero point and requantization scale into
        the output's (1 when they share it: the input is then written in place, slices.py)."""
        layer.kind = "concat"
        call = calls["concat"][0]
        int8 = layer.dtype == "int8"
        dtype, host_dtype = ("int8", "int8") if int8 else ("float16", "float32")
        offsets, c0, zps, scales = [], 0, [], []
        s_y, z_y = _qparams(calls["quantize"][-1]) if int8 else (1.0, 0)
        layer.rows = len(static_shape(call)) != 4  # stacked along rows (axis 0), else channels
        view, layout = (_rows_view, "ROWS") if layer.rows else (lambda s: _conv_view(s, "NCHW"), "NCHW")
        for field in self.resolve(call.args[0]).fields:
            src = field
            if int8:  # concat(dequantize(x_i), ...)
                s_i, z_i = _qparams(self.resolve(field))
                zps.append(z_i)
                scales.append(qp.pool_scale(s_i, s_y, 1))
                src = self.resolve(field).args[0]
            shape = static_shape(src)
            layer.inputs.append(self._tensor(params.get(src, src), view(shape), layout, dtype, host_dtype))
            offsets.append(c0)
            c0 += view(shape)[1] if layer.rows else shape[1]
        layer.offsets = tuple(offsets)
        if int8:
            layer.out_zp, layer.in_zps, layer.scale = z_y, tuple(zps), np.array(scales, np.float32)
        out_shape = static_shape(call)
        layer.out = self._tensor(out_var, view(out_shape), layout, dtype, host_dtype, out_shape)
        layer.out_elems = int(np.prod(out_shape))
        return layer

    def _conv(self, layer: Layer, calls: dict):
        sym = self.graph.symbol
        if "nn.conv2d" in calls:
            call = calls["nn.conv2d"][0]
            layout = str(call.attrs.data_layout)
            kernel_layout = str(call.attrs.kernel_layout)
            wexpr = call.args[1]
            layer.stride = tuple(int(s) for s in call.attrs.strides)
            layer.dilation = tuple(int(d) for d in call.attrs.dilation)
            layer.padding = tuple(int(p) for p in call.attrs.padding)
            layer.groups = int(call.attrs.groups)
            in_view = _conv_view(static_shape(call.args[0]), layout)
            out_shape = static_shape(call)
            out_view = _conv_view(out_shape, layout)
        else:
            call = calls["matmul"][0]
            layout, kernel_layout, wexpr = "ROWS", "IO", call.args[1]  # matmul weight is [K, N]
            in_view = _rows_view(static_shape(call.args[0]))
            out_shape = static_shape(call)
            out_view = _rows_view(out_shape)
        self.anchor = call  # the conv / matmul: _requant finds the bias beside it
        layer.weight = self._weight(wexpr, kernel_layout, layer.dtype)
        if layer.groups > 1:
            layer.groups = out_view[3]
        if "add" in calls and layer.dtype == "float16":
            layer.bias = eval_const(self._bias_operand(calls, call), sym, "bias", self.env).reshape(-1).astype(
                np.float32)
        layer.macs = int(np.prod(layer.weight.shape)) * out_view[0] * out_view[1] * out_view[2]
        return call.args[0], in_view, layout, out_shape, out_view

    def _weight(self, wexpr, kernel_layout: str, dtype: str) -> np.ndarray:
        """The weight in [OC, KH, KW, IC] order: fp16 values, or the int8 codes (symmetric)."""
        transposed = False
        wexpr = self.resolve(wexpr)
        while isinstance(wexpr, relax.Call) and wexpr.op.name == "relax.permute_dims":
            transposed = not transposed  # 2-D weights: any permutation is the transpose
            wexpr = self.resolve(wexpr.args[0])
        if dtype == "int8":  # dequantize(codes, scales, zero points): keep the codes
            value = constant_value(wexpr.args[0])
            self.w_scale = np.asarray(constant_value(wexpr.args[1]), np.float64).reshape(-1)
        else:
            value = eval_const(wexpr, self.graph.symbol, "weight", self.env)
        if kernel_layout == "IO":  # matmul: x [M, K] @ w [K, N]; the NPU wants [N, 1, 1, K]
            value = value if transposed else value.T
            return np.ascontiguousarray(value[:, None, None, :].astype(value.dtype if dtype == "int8"
                                                                         else np.float16))
        value = value.transpose([kernel_layout.index(d) for d in "OHWI"])
        return np.ascontiguousarray(value.astype(np.int8 if dtype == "int8" else np.float16))

    def _add(self, layer: Layer, calls: dict, params: dict):
        call = calls["add"][0]
        shape = static_shape(call)
        layout, view = _layout_view(shape)
        dtype, host_dtype = ("int8", "int8") if layer.dtype == "int8" else ("float16", "float32")
        operands = []
        for arg in call.args[:2]:
            if layer.dtype == "int8":  # add(dequantize(a), dequantize(b))
                arg = self.resolve(arg).args[0]
            operands.append(self._tensor(params.get(arg, arg), view, layout, dtype, host_dtype))
        layer.inputs = operands
        return None, view, layout, shape, view

    def _eltwise(self, layer: Layer, calls: dict, params: dict):
        """a (kind) b: `a` has the output's shape; b is a tensor of that shape, or a per-channel / scalar
        constant (carried in the weight region) or per-channel tensor, per constraints.broadcast_mode."""
        call = calls[layer.func][0]
        shape = static_shape(call)
        layout, view = _layout_view(shape)
        int8 = layer.dtype == "int8"
        dqs = [self.resolve(arg) for arg in call.args[:2]]
        ops = [self.resolve(dq.args[0]) if int8 else self.resolve(arg) for dq, arg in zip(dqs, call.args)]
        mode, swapped = broadcast_mode(call, *ops)
        if mode is None:  # the pattern check refused this already; reaching here is a compiler bug
            raise NPUError("ERR_OP_NOT_SUPPORTED", f"{self.graph.symbol}: {swapped}")
        if swapped:
            dqs, ops = dqs[::-1], ops[::-1]
        layer.b_mode, self.elt_dqs = mode, dqs
        dtype, host_dtype = ("int8", "int8") if int8 else ("float16", "float32")
        a, b = ops
        layer.inputs = [self._tensor(params.get(a, a), view, layout, dtype, host_dtype)]
        value = constant_value(b)
        if value is not None:  # carried in the weight region, loaded like weights
            layer.const = value.reshape(-1).astype(np.int8 if int8 else np.float16)
        else:
            b_shape = static_shape(b)
            b_view = view if mode == "same" else (1, 1, 1, b_shape[1] if len(b_shape) == 4 else b_shape[-1])
            b_layout = "NCHW" if len(b_shape) == 4 else "ROWS"
            layer.inputs.append(self._tensor(params.get(b, b), b_view, b_layout, dtype, host_dtype))
        return None, view, layout, shape, view

    def _unary(self, layer: Layer, calls: dict, op: str | None = None):
        """UNARY, or with `op` = "nn.softmax" SOFTMAX: one input of the output's shape and view."""
        call = calls[op or UNARY_COMPOSITES[layer.func]][-1]
        layer.act = "none"  # hardswish's clip is part of the function, not a fused activation
        if layer.func == "leaky_relu":
            layer.alpha = float(call.attrs.alpha)
        shape = static_shape(call)
        layout, view = _layout_view(shape)
        return call.args[0], view, layout, shape, view

    def _pool(self, layer: Layer, calls: dict):
        if "mean" in calls:  # global average pooling: mean over H and W with keepdims
            call = calls["mean"][0]
            in_shape = static_shape(call.args[0])
            layout = "NCHW"
            in_view = _conv_view(in_shape, layout)
            layer.window = (in_view[1], in_view[2])
        else:
            op = "nn.max_pool2d" if "nn.max_pool2d" in calls else "nn.avg_pool2d"
            call = calls[op][0]
            layer.pool_kind = "max" if op == "nn.max_pool2d" else "avg"
            layout = str(call.attrs.layout)
            in_view = _conv_view(static_shape(call.args[0]), layout)
            layer.window = tuple(int(k) for k in call.attrs.pool_size)
            layer.stride = tuple(int(s) for s in call.attrs.strides)
            layer.dilation = tuple(int(d) for d in call.attrs.dilation)
            layer.padding = tuple(int(p) for p in call.attrs.padding)
        out_shape = static_shape(call)
        out_view = _conv_view(out_shape, layout)
        return call.args[0], in_view, layout, out_shape, out_view

    def _requant(self, layer: Layer, calls: dict):
        """Zero points, integer multipliers and the clamp of an int8 layer (docs section 2)."""
        s_y, z_y = _qparams(calls["quantize"][-1])
        layer.out_zp = z_y
        layer.clamp = qp.clamp_bounds(layer.act, layer.clip, s_y, z_y)
        if layer.kind == "eltwise":  # multipliers once the operand dtypes are known
            return
        if layer.kind == "unary":
            s_x, z_x = _qparams(_data_dq(calls))
            layer.in_zps = (z_x,)
            layer.const = qp.unary_table(layer.func, layer.alpha, s_x, z_x, s_y, z_y)
            return
        if layer.kind == "add":
            (s_a, z_a), (s_b, z_b) = (_qparams(self.resolve(a)) for a in calls["add"][0].args[:2])
            mults, n = qp.common_shift([s_a / s_y, s_b / s_y])
            layer.in_zps, layer.mult, layer.shift = (z_a, z_b), np.array(mults), n
            return
        s_x, z_x = _qparams(_data_dq(calls))
        layer.in_zps = (z_x,)
        if layer.kind == "pool":
            taps = layer.window[0] * layer.window[1] if layer.pool_kind == "avg" else 1
            layer.scale = np.array([qp.pool_scale(s_x, s_y, taps)], np.float32)
            return
        oc = layer.weight.shape[0]
        w_scale = np.broadcast_to(self.w_scale, (oc,))
        layer.scale = np.array([qp.conv_scale(s_x, ws, s_y) for ws in w_scale], np.float32)
        bias = np.zeros(oc, np.int64)
        if "add" in calls:
            bdq = self.resolve(self._bias_operand(calls, self.anchor))
            while bdq.op.name == "relax.reshape":
                bdq = self.resolve(bdq.args[0])
            codes = constant_value(bdq.args[0]).astype(np.int64).reshape(-1)
            b_scale = np.broadcast_to(np.asarray(constant_value(bdq.args[1]), np.float64).reshape(-1), (oc,))
            want = s_x * w_scale
            if np.allclose(b_scale, want, rtol=1e-6, atol=0):
                bias = codes
            else:  # a bias quantized with another scale: re-express it in the accumulator's scale
                bias = np.rint(codes * b_scale / want).astype(np.int64)
        layer.bias = np.asarray(bias, np.int64).astype(np.int32)

    def _eltwise_multipliers(self, layer: Layer, calls: dict):
        """ELTWISE's zero points, multipliers and shift (docs section 2); a multiply's multiplier stays
        below 2^(62 - k_a - k_b) (k = 8 for int8, 16 for int16), which binds for int16 x int16 only."""
        s_y, z_y = _qparams(calls["quantize"][-1])
        layer.clamp = qp.clamp_bounds(layer.act, layer.clip, s_y, z_y, layer.dtypes[2])
        dq_a, dq_b = self.elt_dqs
        s_a, z_a = _qparams(dq_a)
        if dq_b is None:  # a requantization: b_mult 0
            mults, n = qp.common_shift([s_a / s_y])
            layer.in_zps, layer.mult, layer.shift = (z_a, 0), np.array([mults[0], 0]), n
            return
        s_b, z_b = _qparams(dq_b)
        if layer.func == "multiply":
            k = sum(8 if d == "int8" else 16 for d in layer.dtypes[:2])
            mults, n = qp.common_shift([s_a * s_b / s_y], bound=min(2 ** 31, 2 ** (62 - k)))
        else:
            mults, n = qp.common_shift([s_a / s_y, s_b / s_y])
        layer.in_zps, layer.mult, layer.shift = (z_a, z_b), np.array(mults + [0])[:2], n

    def _bias_operand(self, calls: dict, op_call):
        """The add's operand that is not the conv / matmul result: the pattern matches add(y, b) and
        add(b, y) alike (torch's export writes the bias first)."""
        add = calls["add"][0]
        return next(a for a in add.args if not self.resolve(a).same_as(op_call))

    def resolve(self, expr):
        """The value bound to a dataflow variable of the current composite."""
        while isinstance(expr, relax.Var) and expr in self.env:
            expr = self.env[expr]
        return expr

    def _tensor(self, var, view, layout, dtype, host_dtype, shape=None) -> str:
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
                self.staged[source] = self._host_form(graph.tensors[known], static_shape(source), scale, zp)
        elif graph.tensors[known].view != tuple(view) or graph.tensors[known].dtype != dtype:
            raise NPUError("ERR_OP_NOT_SUPPORTED",
                           f"{graph.symbol}: tensor {var.name} is used with two layouts or dtypes; the "
                           "conversion between them must run on the CPU")
        return known


def lower_function(func: relax.Function) -> Graph:
    """Lower one function with attribute Codegen="npu" to a Graph of NPU layers."""
    symbol = str(func.attrs["global_symbol"])
    graph = Graph(symbol)
    lowerer = _Lowerer(graph, func.params)
    composites = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                layer = lowerer.composite(composites[value.op], value.args, binding.var)
                if layer is not None:
                    graph.layers.append(layer)
            else:
                raise NPUError("ERR_OP_NOT_SUPPORTED",
                               f"{symbol}: unexpected binding {binding.var.name} in an NPU region")
    body = func.body.body
    outs = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    missing = [v.name for v in list(func.params) + outs if v not in graph.var_names]
    if missing:
        raise NPUError("ERR_OP_NOT_SUPPORTED", f"{symbol}: region tensors {missing} are not NPU tensors")
    graph.inputs = [graph.var_names[p] for p in func.params]
    graph.outputs = [graph.var_names[o] for o in outs]
    graph.staged = {(role, i): lowerer.staged[v] for role, vs in (("input", func.params), ("output", outs))
                    for i, v in enumerate(vs) if v in lowerer.staged}
    return graph
