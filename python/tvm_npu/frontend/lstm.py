"""ONNX LSTM import (TVM 0.27's ONNX frontend has none): the recurrence unrolled into Relax.

For each direction and gate (ONNX's order i, o, f, c), the input projection of every time step is one
matmul (X [T*B, I] by W_gate^T, both biases folded in), so it runs as one large dense layer; each step
takes its rows of it (a row slice, a view on the NPU), adds h_{t-1} R_gate^T and applies the gate:

    i = sigmoid(.), o = sigmoid(.), f = sigmoid(.), g = tanh(.)
    c_t = f * c_{t-1} + i * g,    h_t = o * tanh(c_t)

One matmul per gate rather than one [4H]-wide one keeps every gate a whole tensor (no column slices),
and the outputs over time are stacked by a concat along rows, which the NPU does by writing each h_t
at its row offset.

Supported: forward, reverse and bidirectional; layout 0 and 1; optional B, initial_h, initial_c; the
default activations. Refused with a coded error that says what to change: peepholes (P), cell clip,
input_forget, other activations, and sequence_lens that differ from the sequence length. Weights must
be initializers (the unrolled steps share them as constants).
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ..contract.errors import NPUError
from ..ir.values import constant_value, static_shape

DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")
GATES = 4  # i, o, f, c: the row blocks of W, R and each half of B


def _refuse(what: str, change: str):
    raise NPUError("ERR_OP_NOT_SUPPORTED", f"ONNX LSTM: {what} is not supported; {change}")


def _const(x, name: str) -> np.ndarray:
    value = constant_value(x) if x is not None else None
    if value is None:
        _refuse(f"a non-constant {name}", f"give {name} as an initializer")
    return value.astype(np.float32)


def _check(inputs, attr, seq: int):
    if len(inputs) > 7 and inputs[7] is not None:
        _refuse("the peephole input P", "export the LSTM without peepholes")
    if attr.get("clip") is not None:
        _refuse("the cell clip attribute", "export the LSTM without clip")
    if attr.get("input_forget", 0):
        _refuse("input_forget=1", "export the LSTM with coupled gates disabled")
    acts = [a.decode() if isinstance(a, bytes) else str(a) for a in attr.get("activations", [])]
    if acts and any(a.lower() != d.lower() for a, d in zip(acts, DEFAULT_ACTIVATIONS * 2)):
        _refuse(f"activations {acts}", "use the default Sigmoid, Tanh, Tanh")
    if len(inputs) > 4 and inputs[4] is not None:
        lens = constant_value(inputs[4])
        if lens is None or (lens != seq).any():
            _refuse(
                "sequence_lens other than the full sequence length",
                "pad the batch to one length and drop sequence_lens",
            )


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
    _check(inputs, attr, seq)
    hidden = int(attr["hidden_size"])
    direction = attr.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    w, r = _const(inputs[1], "W"), _const(inputs[2], "R")
    b = (
        _const(inputs[3], "B")
        if len(inputs) > 3 and inputs[3] is not None
        else np.zeros((len(dirs), 2 * GATES * hidden), np.float32)
    )
    x2d = bb.emit(relax.op.reshape(x, [seq * batch, size]))
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):

        def state(k):
            """The initial state, or None for ONNX's default of zeros: the first step then skips the
            terms that read it (h @ R, f * c), instead of computing with a constant zero."""
            if len(inputs) > k and inputs[k] is not None:
                axis = 1 if layout else 0  # [D, B, H], or [B, D, H] in layout 1
                # One direction: the whole tensor, no slice (a slice copies on the CPU, a squeeze is a view).
                one = inputs[k] if len(dirs) == 1 else relax.op.strided_slice(inputs[k], [axis], [d], [d + 1])
                return bb.emit(relax.op.squeeze(one, [axis]))
            return None

        h, c = state(5), state(6)
        bias = b[d, : GATES * hidden] + b[d, GATES * hidden :]
        rows = [slice(k * hidden, (k + 1) * hidden) for k in range(GATES)]
        xw = [
            bb.emit(
                relax.op.add(relax.op.matmul(x2d, relax.const(np.ascontiguousarray(w[d][g].T))), relax.const(bias[g]))
            )
            for g in rows
        ]  # [T*B, H] per gate
        rt = [relax.const(np.ascontiguousarray(r[d][g].T)) for g in rows]
        outs = [None] * seq
        for t in reversed(range(seq)) if reverse else range(seq):
            xt = [relax.op.strided_slice(xw[k], [0], [t * batch], [(t + 1) * batch]) for k in range(GATES)]
            pre = [
                bb.emit(xt[k] if h is None else relax.op.add(xt[k], relax.op.matmul(h, rt[k]))) for k in range(GATES)
            ]
            i, o, f = (bb.emit(relax.op.sigmoid(v)) for v in pre[:3])
            g = bb.emit(relax.op.tanh(pre[3]))
            ig = relax.op.multiply(i, g)
            c = bb.emit(ig if c is None else relax.op.add(relax.op.multiply(f, c), ig))
            h = bb.emit(relax.op.multiply(o, relax.op.tanh(c)))
            outs[t] = h
        y = bb.emit(relax.op.concat(outs, axis=0)) if seq > 1 else outs[0]  # [T*B, H]: rows over time
        ys.append(bb.emit(relax.op.reshape(y, [seq, batch, hidden])))
        hs.append(h)
        cs.append(c)
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
