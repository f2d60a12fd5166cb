"""The NPU's int8 arithmetic (docs/npu.md section 2) in numpy, and an interpreter that runs an
onnxruntime QDQ model with it: every DequantizeLinear -> op -> QuantizeLinear group is computed the
way the document says the NPU computes it. Written from the document, not from tvm_npu's code."""

import numpy as np
from onnx import numpy_helper


f32 = np.float32


def requant(acc, S, zp, lo=-128, hi=127):
    """clamp(zp + round_half_even(fp32(fp32(acc) * S))) — conv, dense and pooling (docs section 2)."""
    y = np.rint(np.asarray(acc).astype(np.float32) * np.asarray(S, np.float32)).astype(np.float64)
    return np.clip(y + zp, lo, hi).astype(np.int8)


def rescale(acc, M, n, zp, lo=-128, hi=127, dtype=np.int8):
    """clamp(zp + round(acc * M / 2^n)), ties to even (docs section 2), stored as `dtype`."""
    p = np.asarray(acc, np.int64) * np.asarray(M, np.int64)
    n = np.asarray(n, np.int64)
    q = p >> n
    r = p - (q << n)
    half = np.int64(1) << (n - 1)
    q = q + ((r > half) | ((r == half) & (q % 2 == 1)))
    return np.clip(q + zp, lo, hi).astype(dtype)


def conv_acc(x, zx, w, stride, pads, dil, group):
    """int64 accumulators of a conv over int8 x [N,C,H,W] with padding taps skipped."""
    x = x.astype(np.int64) - zx
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    t, l, b, r = pads
    xp = np.zeros((n, c, h + t + b, wd + l + r), np.int64)  # zeros = skipped taps (x - zx already)
    xp[:, :, t:t + h, l:l + wd] = x
    oh = (h + t + b - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + l + r - dil[1] * (kw - 1) - 1) // stride[1] + 1
    acc = np.zeros((n, oc, oh, ow), np.int64)
    ocg = oc // group
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil[0]:i * dil[0] + (oh - 1) * stride[0] + 1:stride[0],
                       j * dil[1]:j * dil[1] + (ow - 1) * stride[1] + 1:stride[1]]
            for g in range(group):
                xs = patch[:, g * icg:(g + 1) * icg]
                ws = w[g * ocg:(g + 1) * ocg, :, i, j].astype(np.int64)
                acc[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", xs, ws)
    return acc


def clamp_for(act, s_y, z_y):
    lo, hi = -128, 127
    if act is None:
        return lo, hi
    if act[0] == "relu":
        return max(lo, z_y), hi
    a, b = act[1]
    return max(lo, z_y + int(np.rint(a / s_y))), min(hi, z_y + int(np.rint(b / s_y)))


BINARY = ("Sub", "Mul", "Max", "Min")


def _shift_for(ratios, bound=2 ** 31):
    """The largest n <= 62 keeping every round(ratio * 2^n) below `bound` (docs section 2)."""
    return next(k for k in range(62, 0, -1) if max(round(r * 2.0 ** k) for r in ratios) < bound)


def eltwise_int8(kind, a, b, s_y, z_y, lo=None, hi=None, out_dtype=np.int8):
    """ELTWISE / ADD on int8 or int16 operands (docs section 2): a, b are (codes, scale, zp), b broadcast
    by numpy; the codes' numpy dtype is the operand's dtype. The result is `out_dtype`, clamped to [lo, hi]
    (default: its range)."""
    (a, s_a, z_a), (b, s_b, z_b) = a, b
    info = np.iinfo(out_dtype)
    lo, hi = info.min if lo is None else lo, info.max if hi is None else hi
    da, db = a.astype(np.int64) - z_a, b.astype(np.int64) - z_b
    if kind == "Mul":  # |a - z_a| < 2^k_a: M below 2^(62 - k_a - k_b) keeps the product exact
        k = (8 if a.dtype == np.int8 else 16) + (8 if b.dtype == np.int8 else 16)
        n = _shift_for([s_a * s_b / s_y], min(2 ** 31, 2 ** (62 - k)))
        return rescale(da * db * round(s_a * s_b / s_y * 2.0 ** n), 1, n, z_y, lo, hi, out_dtype)
    n = _shift_for([s_a / s_y, s_b / s_y])
    ta, tb = da * round(s_a / s_y * 2.0 ** n), db * round(s_b / s_y * 2.0 ** n)
    t = {"Add": lambda: ta + tb, "Sub": lambda: ta - tb, "Max": lambda: np.maximum(ta, tb),
         "Min": lambda: np.minimum(ta, tb)}[kind]()
    return rescale(t, 1, n, z_y, lo, hi, out_dtype)


def _gelu(v):
    import math
    return 0.5 * v * math.erfc(-v / math.sqrt(2.0))


UNARY = {"Sigmoid": "sigmoid", "Tanh": "tanh", "LeakyRelu": "leaky_relu", "Gelu": "gelu", "HardSwish": "hardswish"}
F64 = {"sigmoid": lambda v, al: 1.0 / (1.0 + np.exp(-v)), "tanh": lambda v, al: np.tanh(v),
       "leaky_relu": lambda v, al: np.where(v < 0, v * al, v), "gelu": lambda v, al: np.vectorize(_gelu)(v),
       "hardswish": lambda v, al: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0}


def unary_table(func, alpha, s_x, z_x, s_y, z_y):
    """The int8 UNARY table (docs section 2): entry q + 128 = clamp(z_y + round_half_even(f(s_x (q - z_x))
    / s_y)), f in float64."""
    q = np.arange(-128, 128, dtype=np.float64)
    y = F64[func](s_x * (q - z_x), alpha) / s_y
    return np.clip(np.rint(y) + z_y, -128, 127).astype(np.int8)


class QDQInterpreter:
    """Runs a QDQ ONNX model (from onnxruntime's quantize_static) with the NPU's int8 arithmetic."""

    def __init__(self, model):
        self.model = model
        self.init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def run(self, x: np.ndarray) -> np.ndarray:
        f = {self.model.graph.input[0].name: x.astype(np.float32)}  # float tensors
        q = self.q = {}          # int8 tensors: name -> (codes, scale, zp)
        dq_of = self.dq_of = {}  # float name -> the int8 tensor it dequantizes
        pending = {}  # float name -> an integer op waiting for its QuantizeLinear (it sets s_y, z_y)
        for node in self.model.graph.node:
            ins, out, op = list(node.input), node.output[0], node.op_type
            attrs = {a.name: a for a in node.attribute}
            if op == "DequantizeLinear":
                if ins[0] in self.init:  # a constant: weights or bias
                    self.init[out] = ("dq", self.init[ins[0]], self.init[ins[1]], self.init.get(ins[2]) if len(ins) > 2 else None)
                else:
                    codes, s, z = q[ins[0]]
                    f[out] = ((codes.astype(np.float32) - z) * np.float32(s)).astype(np.float32)
                    dq_of[out] = ins[0]
            elif op == "QuantizeLinear":
                s = float(self.init[ins[1]])
                z = int(self.init[ins[2]])
                if ins[0] in pending:
                    q[out] = (self._finish(pending[ins[0]], s, z), s, z)
                else:
                    v = np.rint(f[ins[0]] / np.float32(s)) + z
                    q[out] = (np.clip(v, -128, 127).astype(np.int8), s, z)
            elif op in ("Conv", "Gemm"):
                pending[out] = ("conv", node, ins, attrs, None)
            elif op in ("Relu", "Clip"):
                kind, node0, ins0, attrs0, _ = pending.pop(ins[0])
                act = ("relu",) if op == "Relu" else ("clip", (float(self.init[ins[1]]), float(self.init[ins[2]])))
                pending[out] = (kind, node0, ins0, attrs0, act)
            elif op in ("Add", "AveragePool", "GlobalAveragePool", "MaxPool") + BINARY + tuple(UNARY):
                pending[out] = (op, node, ins, attrs, None)
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
        kind, node, ins, attrs, act = item
        lo, hi = clamp_for(act, s_y, z_y)
        if kind == "conv":
            codes, s_x, z_x = self.q[self.dq_of[ins[0]]]
            _, w, w_s, _ = self.init[ins[1]]
            w_s = np.broadcast_to(np.asarray(w_s, np.float64).reshape(-1), (w.shape[0],))
            if node.op_type == "Gemm":  # transB=1: w is [N, K]; x is [M, K]
                acc = codes.astype(np.int64) - z_x
                acc = acc @ w.astype(np.int64).T
                acc4 = acc[:, :, None, None]
            else:
                g = attrs["group"].i if "group" in attrs else 1
                st = list(attrs["strides"].ints) if "strides" in attrs else [1, 1]
                pads = list(attrs["pads"].ints) if "pads" in attrs else [0, 0, 0, 0]
                dil = list(attrs["dilations"].ints) if "dilations" in attrs else [1, 1]
                acc4 = conv_acc(codes, z_x, w, st, (pads[0], pads[1], pads[2], pads[3]), dil, g)
            if len(ins) > 2:
                _, b, b_s, _ = self.init[ins[2]]
                acc4 = acc4 + b.astype(np.int64).reshape(1, -1, 1, 1)
            S = np.array([f32(f32(f32(s_x) * f32(ws)) / f32(s_y)) for ws in w_s], np.float32)
            y = requant(acc4, S.reshape(1, -1, 1, 1), z_y, lo, hi)
            return y[:, :, 0, 0] if node.op_type == "Gemm" else y
        if kind in ("Add",) + BINARY:
            return eltwise_int8(kind, self._operand(ins[0]), self._operand(ins[1]), s_y, z_y, lo, hi)
        codes, s_x, z_x = self.q[self.dq_of[ins[0]]]
        if kind in UNARY:
            alpha = attrs["alpha"].f if "alpha" in attrs else 0.01
            return unary_table(UNARY[kind], alpha, s_x, z_x, s_y, z_y)[codes.astype(np.int64) + 128]
        x = codes.astype(np.int64) - z_x
        if kind == "GlobalAveragePool":
            kh, kw, sh, sw = x.shape[2], x.shape[3], 1, 1
        else:
            kh, kw = attrs["kernel_shape"].ints
            sh, sw = attrs["strides"].ints if "strides" in attrs else (1, 1)
        oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
        win = [x[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
               for i in range(kh) for j in range(kw)]
        if kind == "MaxPool":
            return requant(np.max(win, axis=0), f32(f32(s_x) / f32(s_y)), z_y, lo, hi)
        return requant(np.sum(win, axis=0), f32(f32(f32(s_x) / f32(kh * kw)) / f32(s_y)), z_y, lo, hi)
