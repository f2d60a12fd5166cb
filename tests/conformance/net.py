"""A case's network as plain data, and the two ONNX models made from it: the float model (fp16 cases,
against TVM's llvm build) and its QDQ form (int8 cases, against onnxruntime's integer kernels).

The QDQ form is built here rather than by onnxruntime's quantize_static, so that a case chooses its
zero points (at the ends of the int8 / uint8 range, zero, or an odd value) and its weight granularity
(per-tensor or per-channel): quantize_static always centres int8 activations and calibrates weights its
own way. Scales come from the float model's own range on the case's inputs (run by onnxruntime in
float), so they are what a calibration would choose for that zero point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}
ONNX_DTYPE = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int32": TensorProto.INT32}
# A zero point by name, per activation dtype: the two ends of the range, the real 0 in the middle, and
# an odd one (neither centred nor at an end).
ZERO_POINTS = {
    "int8": {"lo": -128, "hi": 127, "zero": 0, "odd": -37},
    "uint8": {"lo": 0, "hi": 255, "zero": 128, "odd": 91},
}


@dataclass
class Net:
    """Nodes of one small ONNX graph. Initializers carry a role for the QDQ form:

    - ("weight", axis): int8 symmetric weights, per channel along `axis` (or per tensor);
    - ("bias", weight, data): int32 with scale s_data * s_weight, as quantize_static makes it;
    - ("const",): a constant operand, int8 symmetric per tensor;
    - ("raw",): a shape, axes or starts (never quantized).

    `fused` names tensors that stay float in the QDQ form (an op's output read by the activation fused
    into it); `same_q` maps an output to the input whose scale and zero point it keeps (views, max pool
    of quantize_static's models)."""

    inputs: list  # (name, shape)
    nodes: list = field(default_factory=list)
    inits: dict = field(default_factory=dict)  # name -> (array, role)
    outputs: list = field(default_factory=list)
    fused: set = field(default_factory=set)
    same_q: dict = field(default_factory=dict)
    opset: int = 17
    _n: int = 0

    def node(self, op, ins, out=None, **attrs) -> str:
        self._n += 1
        out = out or f"t{self._n}"
        self.nodes.append(helper.make_node(op, list(ins), [out], **attrs))
        return out

    def init(self, value, role=("const",)) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = (np.asarray(value), role)
        return name


def _model(inputs, nodes, inits, outputs, opset) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "case",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return _with_output_shapes(model)


def _with_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Graph outputs typed with their inferred shapes (TVM's importer needs them)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        if known.get(out.name) is not None and known[out.name].type.tensor_type.HasField("shape"):
            out.type.CopyFrom(known[out.name].type)
    return model


def float_model(net: Net) -> onnx.ModelProto:
    inits = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, (v, _) in net.inits.items()}
    return _model(net.inputs, net.nodes, inits, net.outputs, net.opset)


def float_ranges(net: Net, feeds: list[dict]) -> dict:
    """Every float tensor's [min, max] over `feeds` (onnxruntime, float), with 0 inside the range."""
    import onnxruntime as ort

    model = float_model(net)
    names = [o for n in net.nodes for o in n.output]
    extra = [n for n in names if n not in net.outputs]
    model.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in extra])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    lo = dict.fromkeys(outs + [n for n, _ in net.inputs], 0.0)
    hi = dict(lo)
    for feed in feeds:
        values = dict(zip(outs, sess.run(outs, feed)))
        values.update(feed)
        for name, v in values.items():
            v = v[np.isfinite(v)]
            if v.size:
                lo[name], hi[name] = min(lo[name], float(v.min())), max(hi[name], float(v.max()))
    return {n: (lo[n], hi[n]) for n in lo}


def scale_for(lo: float, hi: float, zp: int, dtype: str) -> np.float32:
    """The smallest scale with which codes `qmin..qmax` around zero point `zp` cover [lo, hi] on every
    side they can (a zero point at an end covers one sign only: the other saturates)."""
    qmin, qmax = QRANGE[dtype]
    s = max(hi / (qmax - zp) if qmax > zp else 0.0, lo / (qmin - zp) if qmin < zp else 0.0)
    if not s > 0:
        s = max(abs(lo), abs(hi)) / 255 or 1 / 128
    return np.float32(s)


@dataclass
class Quant:
    """How a case quantizes: activation dtype, the input's and the output's zero point (ZERO_POINTS
    names), per-channel or per-tensor weights."""

    dtype: str = "int8"
    zp_in: str = "zero"
    zp_out: str = "zero"
    per_channel: bool = True

    @property
    def tag(self) -> str:
        return f"{self.dtype}-in_{self.zp_in}-out_{self.zp_out}" + ("" if self.per_channel else "-per_tensor")


def qdq_model(net: Net, quant: Quant, feeds: list[dict]) -> onnx.ModelProto:
    """The QDQ form of `net`: every float activation quantized then dequantized (scales from the float
    ranges over `feeds`), weights int8 symmetric, biases int32."""
    ranges = float_ranges(net, feeds)
    nodes, inits, qparams, act = [], {}, {}, {}

    def add_init(name, value):
        inits[name] = value
        return name

    def qdq(name, src, zp_name):
        """Quantize `src` (a float tensor) with the parameters of tensor `name` and dequantize it."""
        if name in net.same_q:
            s, z = qparams[net.same_q[name]]
        else:
            z = ZERO_POINTS[quant.dtype][zp_name]
            s = scale_for(*ranges[name], z, quant.dtype)
        qparams[name] = (s, z)
        sn = add_init(f"{name}_s", np.array(s, np.float32))
        zn = add_init(f"{name}_z", np.array(z, {"int8": np.int8, "uint8": np.uint8}[quant.dtype]))
        nodes.append(helper.make_node("QuantizeLinear", [src, sn, zn], [f"{name}_q"]))
        out = name if name in net.outputs else f"{name}_dq"
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", sn, zn], [out]))
        return out

    for name, _ in net.inputs:
        act[name] = qdq(name, name, quant.zp_in)  # (a model input is never also its output here)
    weight_scales = {}
    for node in net.nodes:
        ins = []
        for i in node.input:
            if i in act:
                ins.append(act[i])
            elif i in net.inits:
                ins.append(_quantized_init(i, *net.inits[i], quant, qparams, weight_scales, nodes, add_init))
            else:
                ins.append(i)
        outs = []
        for o in node.output:
            if o in net.fused:
                act[o] = o
                outs.append(o)
            else:
                outs.append(f"{o}_f")
        nodes.append(helper.make_node(node.op_type, ins, outs, name=node.name, domain=node.domain))
        nodes[-1].attribute.extend(node.attribute)
        for o in node.output:
            if o not in net.fused:
                act[o] = qdq(o, f"{o}_f", quant.zp_out if o in net.outputs else "zero")
    model = _model(net.inputs, nodes, inits, net.outputs, max(net.opset, 13))
    return model


def _quantized_init(name, value, role, quant, qparams, weight_scales, nodes, add_init):
    kind = role[0]
    if kind == "raw":
        return add_init(name, value)
    if kind == "bias":
        s = np.float32(qparams[role[2]][0]) * weight_scales[role[1]]
        s = np.broadcast_to(s, value.shape).astype(np.float32)
        codes = np.clip(np.rint(value / s), -(2**31), 2**31 - 1).astype(np.int32)
        return _dq(
            name, codes, s.reshape(-1) if s.size > 1 else s.reshape(()), np.zeros(s.size, np.int32), 0, nodes, add_init
        )
    axis = role[1] if kind == "weight" and quant.per_channel else None
    if axis is None:
        amax = np.float32(max(np.abs(value).max(), 1e-6))
        s = np.float32(amax / 127)
        weight_scales[name] = s
        codes = np.clip(np.rint(value / s), -127, 127).astype(np.int8)
        return _dq(name, codes, np.array(s), np.array(0, np.int8), None, nodes, add_init)
    moved = np.moveaxis(value, axis, 0).reshape(value.shape[axis], -1)
    s = (np.maximum(np.abs(moved).max(axis=1), 1e-6) / 127).astype(np.float32)
    shape = [1] * value.ndim
    shape[axis] = -1
    weight_scales[name] = s
    codes = np.clip(np.rint(value / s.reshape(shape)), -127, 127).astype(np.int8)
    return _dq(name, codes, s, np.zeros(s.size, np.int8), axis, nodes, add_init)


def _dq(name, codes, scale, zp, axis, nodes, add_init):
    if zp.ndim == 1 and zp.size == 1 and scale.ndim == 0:
        zp = zp.reshape(())
    add_init(f"{name}_codes", codes)
    add_init(f"{name}_s", scale)
    add_init(f"{name}_z", zp)
    attrs = {"axis": axis} if axis is not None and scale.ndim == 1 else {}
    nodes.append(
        helper.make_node("DequantizeLinear", [f"{name}_codes", f"{name}_s", f"{name}_z"], [f"{name}_dq"], **attrs)
    )
    return f"{name}_dq"
