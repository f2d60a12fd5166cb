"""Runs an onnxruntime QDQ model (quantize_static's format) the way the NPU computes it: every
DequantizeLinear -> op -> QuantizeLinear group with the integer datapath of int8.py, the model input
quantized and the output dequantized as the runtime's quantized staging does.

uint8 tensors (onnxruntime's default activation type) run as the NPU runs them: as int8 codes q - 128
with zero point z - 128 (docs/npu.md section 2, "uint8 tensors"); the model input is quantized to uint8
first and then shifted, so the two sides of that identity are both computed."""

import numpy as np
from onnx import numpy_helper

from . import int8
from .window import out_size

ELTWISE = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Max": "maximum", "Min": "minimum"}
UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "LeakyRelu": "leaky_relu", "Gelu": "gelu", "HardSwish": "hardswish"}
POOLS = ("AveragePool", "GlobalAveragePool", "MaxPool")


def _nhwc(a):
    return np.transpose(a, (0, 2, 3, 1))


def _nchw(a):
    return np.transpose(a, (0, 3, 1, 2))


def _signed(codes, zp):
    """(int8 codes, zero point) of quantized codes: uint8 q, z as q - 128, z - 128; int8 as they are."""
    codes, zp = np.asarray(codes), None if zp is None else np.asarray(zp)
    if codes.dtype != np.uint8:
        return codes, zp
    return (codes.astype(np.int16) - 128).astype(np.int8), None if zp is None else zp.astype(np.int16) - 128


def _ints(attrs, name, default):
    return list(attrs[name].ints) if name in attrs else default


class QDQInterpreter:
    """Runs a QDQ ONNX model (from onnxruntime's quantize_static) with the NPU's int8 arithmetic."""

    def __init__(self, model):
        self.model = model
        self.init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def run(self, x: np.ndarray) -> np.ndarray:
        f = {self.model.graph.input[0].name: x.astype(np.float32)}  # float tensors
        q = self.q = {}  # int8 tensors: name -> (codes, scale, zp)
        dq_of = self.dq_of = {}  # float name -> the int8 tensor it dequantizes
        pending = {}  # float name -> an integer op waiting for its QuantizeLinear (it sets s_y, z_y)
        for node in self.model.graph.node:
            ins, out, op = list(node.input), node.output[0], node.op_type
            attrs = {a.name: a for a in node.attribute}
            if op == "DequantizeLinear":
                if ins[0] in self.init:  # a constant: weights or bias
                    zp = self.init.get(ins[2]) if len(ins) > 2 else None
                    codes, zp = _signed(self.init[ins[0]], zp)
                    self.init[out] = ("dq", codes, self.init[ins[1]], zp)
                else:
                    codes, s, z = q[ins[0]]
                    f[out] = int8.dequantize(codes, s, z)
                    dq_of[out] = ins[0]
            elif op == "QuantizeLinear":
                s, zp = float(self.init[ins[1]]), self.init[ins[2]]
                z = int(_signed(zp, zp)[1])  # uint8: the int8 zero point z - 128
                if ins[0] in pending:
                    q[out] = (self._finish(pending[ins[0]], s, z), s, z)
                else:
                    codes = int8.quantize(f[ins[0]], s, int(zp), zp.dtype.type)
                    q[out] = (_signed(codes, None)[0], s, z)
            elif op in ("Conv", "Gemm"):
                pending[out] = ("conv", node, ins, attrs, ("none", None))
            elif op in ("Relu", "Clip"):
                kind, node0, ins0, attrs0, _ = pending.pop(ins[0])
                act = ("relu", None) if op == "Relu" else ("clip", (float(self.init[ins[1]]), float(self.init[ins[2]])))
                pending[out] = (kind, node0, ins0, attrs0, act)
            elif op in POOLS + tuple(ELTWISE) + tuple(UNARY):
                pending[out] = (op, node, ins, attrs, ("none", None))
            elif op == "Flatten":
                f[out] = f[ins[0]].reshape(f[ins[0]].shape[0], -1)
            else:
                raise NotImplementedError(op)
        return f[self.model.graph.output[0].name]

    def _operand(self, name):
        """(codes, scale, zp) of an elementwise operand: a quantized tensor or a dequantized constant."""
        if name in self.dq_of:
            return self.q[self.dq_of[name]]
        _, codes, s, z = self.init[name]
        return codes, float(s), int(0 if z is None else z)

    def _finish(self, item, s_y, z_y):
        kind, node, ins, attrs, (act, clip) = item
        lo, hi = int8.clamp(act, s_y, z_y, clip)
        if kind == "conv":
            return self._conv(node, ins, attrs, s_y, z_y, lo, hi)
        if kind in ELTWISE:
            return int8.eltwise_quantized(ELTWISE[kind], self._operand(ins[0]), self._operand(ins[1]), s_y, z_y, lo, hi)
        codes, s_x, z_x = self.q[self.dq_of[ins[0]]]
        if kind in UNARY:
            alpha = attrs["alpha"].f if "alpha" in attrs else 0.01
            func = (
                "gelu_tanh" if kind == "Gelu" and "approximate" in attrs and attrs["approximate"].s == b"tanh" else None
            )
            func = func or UNARY[kind]
            return int8.unary_table(func, alpha, s_x, z_x, s_y, z_y)[codes.astype(np.int64) + 128]
        h, w = codes.shape[2:]
        kh, kw = (h, w) if kind == "GlobalAveragePool" else attrs["kernel_shape"].ints
        stride, pads = _ints(attrs, "strides", [1, 1]), _ints(attrs, "pads", [0, 0, 0, 0])
        out_hw = (out_size(h, kh, stride[0], 1, pads[0], pads[2]), out_size(w, kw, stride[1], 1, pads[1], pads[3]))
        if kind == "MaxPool":
            pool_kind, S = 1, int8.max_pool_scale(s_x, s_y)
        else:
            pool_kind, S = 0, int8.avg_pool_scale(s_x, kh, kw, s_y)
        return _nchw(int8.pool(_nhwc(codes), pool_kind, kh, kw, out_hw, stride, pads[:2], z_x, z_y, S, lo, hi))

    def _conv(self, node, ins, attrs, s_y, z_y, lo, hi):
        """Conv (NCHW, OIHW weights) or Gemm (transB = 1: x [M, K], w [N, K]) as the NPU's CONV2D; a dense
        layer is a 1x1 convolution over the view [1, M, 1, K] (docs/npu.md section 4)."""
        codes, s_x, z_x = self.q[self.dq_of[ins[0]]]
        _, w, w_s, _ = self.init[ins[1]]
        S = int8.conv_scale(s_x, np.broadcast_to(np.asarray(w_s, np.float64).reshape(-1), (w.shape[0],)), s_y)
        bias = self.init[ins[2]][1] if len(ins) > 2 else np.zeros(w.shape[0], np.int32)
        if node.op_type == "Gemm":
            m, n = codes.shape[0], w.shape[0]
            x, w = codes.reshape(1, m, 1, -1), w.reshape(n, 1, 1, -1)
            return int8.conv2d(x, w, bias, S, (m, 1), z_x=z_x, z_y=z_y, lo=lo, hi=hi)[0, :, 0]
        h, wd = codes.shape[2:]
        kh, kw = w.shape[2:]
        stride, dil = _ints(attrs, "strides", [1, 1]), _ints(attrs, "dilations", [1, 1])
        pads = _ints(attrs, "pads", [0, 0, 0, 0])
        out_hw = (
            out_size(h, kh, stride[0], dil[0], pads[0], pads[2]),
            out_size(wd, kw, stride[1], dil[1], pads[1], pads[3]),
        )
        groups = attrs["group"].i if "group" in attrs else 1
        return _nchw(
            int8.conv2d(_nhwc(codes), _nhwc(w), bias, S, out_hw, stride, dil, pads[:2], groups, z_x, z_y, lo, hi)
        )
