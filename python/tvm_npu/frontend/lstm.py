"""ONNX LSTM import (TVM 0.27's ONNX frontend has none): the recurrence unrolled into Relax.

For each direction and gate (ONNX's order i, o, f, c), the input projection of every time step is one
matmul (X [T*B, I] by W_gate^T, both biases folded in), so it runs as one large dense layer; each step
takes its rows of it (a row slice, a view on the NPU), adds h_{t-1} R_gate^T and applies the gate:

    i = f(. + P_i * c_{t-1}), f = f(. + P_f * c_{t-1}), g = g(.)
    c_t = f * c_{t-1} + i * g,    o = f(. + P_o * c_t),    h_t = o * h(c_t)

(f, g, h: Sigmoid, Tanh, Tanh by default.) One matmul per gate rather than one [4H]-wide one keeps every
gate a whole tensor (no column slices), and the outputs over time are stacked by a concat along rows,
which the NPU does by writing each h_t at its row offset.

Every form of the op is written as plain Relax ops with ONNX's (and onnxruntime's) exact semantics; the
partitioner then places each op, so what maps onto the NPU's commands runs there and the rest on the CPU:

- W, R, B as initializers: constant dense layers (NPU). As graph inputs: the matrices are sliced and
  transposed at run time and the matmuls run on the CPU (the NPU's dense layer takes a constant weight).
- peepholes P: an elementwise multiply by a per-channel vector (NPU), constant or a graph input.
- clip: R.clip on each gate's input before its activation; it fuses into the add before it (NPU: the
  clip activation is exact, min(max(x, -clip), clip)).
- input_forget=1: f = 1 - i, written -i + 1 (two exact elementwise ops the NPU has).
- activations (with activation_alpha / activation_beta): rnn_activations.py.
- sequence_lens: a constant all-full one is dropped; otherwise each step that some sequence has ended by
  keeps that sequence's state with R.where (CPU) and writes zeros to its Y rows, and a sequence of length
  0 ends with zero Y_h and Y_c (as onnxruntime). One given as a graph input is checked at run time
  (0 <= length <= seq_length, else ERR_SHAPE_MISMATCH, as onnxruntime refuses it).
- layout 0 and 1; optional B, initial_h, initial_c; unused outputs are dropped by dead-code elimination.

Refused with a coded error: a symbolic sequence length or batch (the recurrence is unrolled), and a
constant sequence_lens outside [0, seq_length].
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ..contract.errors import NPUError
from ..ir.values import constant_value, static_shape
from ..runtime import load_library
from .rnn_activations import activations

DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")
GATES = 4  # i, o, f, c: the row blocks of W, R and each half of B
I, O, F, C = range(GATES)
LENS_CHECK = "tvm_npu.check_sequence_lens"  # registered by the runtime library (src/runtime)


def _refuse(what: str, change: str) -> NoReturn:
    raise NPUError("ERR_OP_NOT_SUPPORTED", f"ONNX LSTM: {what} is not supported; {change}")


def _input(inputs, k: int):
    return inputs[k] if len(inputs) > k and inputs[k] is not None else None


def _value(x):
    """A constant input as float32 numpy, else None (a graph input, read at run time)."""
    value = constant_value(x) if x is not None else None
    return None if value is None else value.astype(np.float32)


class _Part:
    """One of W, R, B, P: a numpy array when it is a constant, else the graph input, sliced at run time."""

    def __init__(self, bb: relax.BlockBuilder, x):
        self.bb, self.x, self.value = bb, x, _value(x)

    def rows(self, d: int, lo: int, hi: int):
        """x[d, lo:hi]: numpy, or an emitted Relax expression ([hi - lo, n] of W and R, [hi - lo] of B, P)."""
        if self.value is not None:
            return self.value[d, lo:hi]
        return self.bb.emit(relax.op.squeeze(relax.op.strided_slice(self.x, [0, 1], [d, lo], [d + 1, hi]), [0]))

    def transposed(self, d: int, lo: int, hi: int):
        """x[d, lo:hi]^T as a matmul's weight: a constant, or a run-time transpose."""
        part = self.rows(d, lo, hi)
        if isinstance(part, np.ndarray):
            return relax.const(np.ascontiguousarray(part.T))
        return self.bb.emit(relax.op.permute_dims(part, [1, 0]))

    def vector(self, d: int, lo: int, hi: int):
        part = self.rows(d, lo, hi)
        return relax.const(np.ascontiguousarray(part)) if isinstance(part, np.ndarray) else part


def _lens_check(bb: relax.BlockBuilder, lens, seq: int) -> relax.GlobalVar:
    """A function (lens) -> lens that checks 0 <= length <= seq at run time, as onnxruntime refuses other
    lengths too (NPUError ERR_SHAPE_MISMATCH from the runtime library, so it runs without Python). A
    function of the module, not a packed call in main: TVM 0.27's MergeCompositeFunctions cannot visit
    the ExternFunc of a call_pure_packed; and the masks read its result, so it is never dropped."""
    load_library()  # registers the check, which the VM looks up by name
    param = relax.Var("lens", lens.ty)
    sub = relax.BlockBuilder()
    with sub.function("check_sequence_lens", [param], private=True):
        call = relax.Call(relax.ExternFunc(LENS_CHECK), [param, relax.prim_value(seq)], ty_args=[lens.ty])
        sub.emit_func_output(sub.emit(call))
    return bb.add_func(sub.get()["check_sequence_lens"], f"check_sequence_lens_{seq}")


class _Lengths:
    """sequence_lens as per-step masks: `active(t)` is None when every sequence is still running at step
    t (no select), else a bool [B, 1] (constant, or computed from the graph input); `started` is None, or
    a bool [B, 1] that is false for the sequences of length 0."""

    def __init__(self, bb: relax.BlockBuilder, lens, seq: int, batch: int):
        self.bb, self.seq, self.batch = bb, seq, batch
        self.value = self.lens = None
        if lens is None:
            return
        value = constant_value(lens)
        if value is not None:
            value = value.astype(np.int64).reshape(-1)
            if value.shape != (batch,) or (value < 0).any() or (value > seq).any():
                raise NPUError(
                    "ERR_INVALID_MODEL",
                    f"ONNX LSTM: sequence_lens {value.tolist()} must hold {batch} lengths in [0, {seq}]",
                )
            self.value = None if (value == seq).all() else value
            return
        self.lens = bb.emit(relax.op.astype(relax.Call(_lens_check(bb, lens, seq), [lens]), "int64"))

    def _mask(self, test):
        return self.bb.emit(relax.op.reshape(test(self.lens), [self.batch, 1]))

    def active(self, t: int):
        if self.value is not None:
            on = t < self.value
            return None if on.all() else relax.const(on.reshape(self.batch, 1))
        if self.lens is not None:
            return self._mask(lambda n: relax.op.greater(n, relax.const(t, "int64")))
        return None

    def started(self):
        if self.value is not None:
            on = self.value > 0
            return None if on.all() else relax.const(on.reshape(self.batch, 1))
        if self.lens is not None:
            return self._mask(lambda n: relax.op.greater(n, relax.const(0, "int64")))
        return None


def _select(bb, mask, new, old, shape):
    """`new` where the sequence runs, else `old` (None: ONNX's zero state)."""
    if mask is None:
        return new
    if old is None:
        old = relax.const(np.zeros(shape, np.float32))
    return bb.emit(relax.op.where(mask, new, old))


class _Direction:
    """One direction's weights: per gate the input projection of all steps, R^T, and the peepholes."""

    def __init__(self, bb, inputs, d: int, x2d, hidden: int):
        w, r = _Part(bb, inputs[1]), _Part(bb, inputs[2])
        b, p = _input(inputs, 3), _input(inputs, 7)
        rows = [(k * hidden, (k + 1) * hidden) for k in range(GATES)]
        if b is None:
            bias = [relax.const(np.zeros(hidden, np.float32))] * GATES
        elif _value(b) is not None:  # both biases folded into one constant: the dense layer's bias
            both = _value(b)[d]
            bias = [relax.const(both[lo:hi] + both[GATES * hidden + lo : GATES * hidden + hi]) for lo, hi in rows]
        else:
            part = _Part(bb, b)
            bias = [
                bb.emit(relax.op.add(part.vector(d, lo, hi), part.vector(d, GATES * hidden + lo, GATES * hidden + hi)))
                for lo, hi in rows
            ]
        self.xw = [
            bb.emit(relax.op.add(relax.op.matmul(x2d, w.transposed(d, lo, hi)), bias[k]))
            for k, (lo, hi) in enumerate(rows)
        ]  # [T*B, H] per gate
        self.rt = [r.transposed(d, lo, hi) for lo, hi in rows]
        # P is [D, 3H] in the order i, o, f
        peep = _Part(bb, p) if p is not None else None
        self.p = {g: peep.vector(d, k * hidden, (k + 1) * hidden) for k, g in enumerate((I, O, F))} if peep else {}


def lstm(bb: relax.BlockBuilder, inputs, attr) -> relax.Tuple:
    """Y [T, D, B, H] (layout 0) or [B, T, D, H] (layout 1), Y_h and Y_c [D, B, H] or [B, D, H]."""
    x = inputs[0]
    layout = int(attr.get("layout", 0))
    if layout:
        x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
    shape = static_shape(x)
    if shape is None:
        _refuse("a symbolic sequence length or batch", "export with static input shapes")
    seq, batch, size = shape
    hidden = int(attr["hidden_size"])
    direction = attr.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    acts = activations(attr, DEFAULT_ACTIVATIONS, len(dirs))
    clip = attr.get("clip")
    input_forget = bool(attr.get("input_forget", 0))
    lengths = _Lengths(bb, _input(inputs, 4), seq, batch)
    started = lengths.started()
    x2d = bb.emit(relax.op.reshape(x, [seq * batch, size]))

    def gate(pre, func):
        if clip is not None:  # onnxruntime clips after the peephole and bias, before the activation
            pre = relax.op.clip(pre, -float(clip), float(clip))
        return bb.emit(func(pre))

    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):

        def state(k):
            """The initial state, or None for ONNX's default of zeros: the first step then skips the
            terms that read it (h @ R, f * c), instead of computing with a constant zero."""
            if _input(inputs, k) is not None:
                axis = 1 if layout else 0  # [D, B, H], or [B, D, H] in layout 1
                # One direction: the whole tensor, no slice (a slice copies on the CPU, a squeeze is a view).
                one = inputs[k] if len(dirs) == 1 else relax.op.strided_slice(inputs[k], [axis], [d], [d + 1])
                return bb.emit(relax.op.squeeze(one, [axis]))
            return None

        h, c = state(5), state(6)
        wts = _Direction(bb, inputs, d, x2d, hidden)
        f_act, g_act, h_act = acts[d]
        outs = [None] * seq
        for t in reversed(range(seq)) if reverse else range(seq):
            xt = [relax.op.strided_slice(wts.xw[k], [0], [t * batch], [(t + 1) * batch]) for k in range(GATES)]
            pre = [
                bb.emit(xt[k] if h is None else relax.op.add(xt[k], relax.op.matmul(h, wts.rt[k])))
                for k in range(GATES)
            ]
            for k in (I, F):  # peepholes read c_{t-1} (none when it is ONNX's zero state)
                if k in wts.p and c is not None:
                    pre[k] = relax.op.add(pre[k], relax.op.multiply(c, wts.p[k]))
            i = gate(pre[I], f_act)
            o = gate(pre[O], f_act) if O not in wts.p else None
            if input_forget:  # coupled gates: f = 1 - i, as -i + 1 (two exact ops the NPU has)
                f = bb.emit(relax.op.add(relax.op.multiply(i, relax.const(-1.0)), relax.const(1.0)))
            else:
                f = gate(pre[F], f_act)
            g = gate(pre[C], g_act)
            ig = relax.op.multiply(i, g)
            c_new = bb.emit(ig if c is None else relax.op.add(relax.op.multiply(f, c), ig))
            if o is None:  # the output gate's peephole reads c_t
                o = gate(relax.op.add(pre[O], relax.op.multiply(c_new, wts.p[O])), f_act)
            h_new = bb.emit(relax.op.multiply(o, h_act(c_new)))
            active = lengths.active(t)
            outs[t] = _select(bb, active, h_new, None, (batch, hidden))
            h = _select(bb, active, h_new, h, (batch, hidden))
            c = _select(bb, active, c_new, c, (batch, hidden))
        y = bb.emit(relax.op.concat(outs, axis=0)) if seq > 1 else outs[0]  # [T*B, H]: rows over time
        ys.append(bb.emit(relax.op.reshape(y, [seq, batch, hidden])))
        hs.append(_select(bb, started, h, None, (batch, hidden)))
        cs.append(_select(bb, started, c, None, (batch, hidden)))
    y = bb.emit(relax.op.stack(ys, axis=1))  # [T, D, B, H]
    y_h, y_c = (bb.emit(relax.op.stack(v, axis=0)) for v in (hs, cs))  # [D, B, H]
    if layout:
        y = bb.emit(relax.op.permute_dims(y, [2, 0, 1, 3]))
        y_h, y_c = (bb.emit(relax.op.permute_dims(v, [1, 0, 2])) for v in (y_h, y_c))
    return relax.Tuple([y, y_h, y_c])


class LSTM(onnx_frontend.OnnxOpConverter):
    """ONNX LSTM (opsets 7 and 14) through `lstm`."""

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return lstm(bb, inputs, attr)

    @classmethod
    def _impl_v14(cls, bb, inputs, attr, params):
        return lstm(bb, inputs, attr)
