"""Turn a split of a dense layer's output columns into one dense layer per part.

TVM's PyTorch frontend gives an LSTM step one matmul for all four gates per input and splits the sum
into the gates along the last axis; diffusers' GEGLU takes the two halves of its projection with two
Slices (`chunk(2, dim=-1)` as the exporter writes it). The NPU has no split along a matrix's channels, so
the split ran on the CPU between every step (every transformer block); pushed down to the weights'
columns it disappears. Runs in `rewrite.run`
(from `partition.prepare` and the quantizer), before pattern matching.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from .common import const_value

# Ops a column split passes through unchanged: they do not touch the last axis (checked per call).
_COLUMN_SAFE = ("relax.squeeze", "relax.expand_dims", "relax.strided_slice")


class _Columns:
    """Pushes a split of the last axis of `v` down to where it costs nothing: a dense layer with a
    constant weight splits into one dense layer per part (the weight's columns), an add into the adds
    of its operands' parts (a constant's columns), and a reshape, squeeze, expand_dims or row slice
    that keeps the last axis into the same op on each part. Parts are emitted once per (var, parts),
    right where the rebuild reaches the var that needs them."""

    def __init__(self, g: rg.Graph):
        self.g, self.memo = g, {}

    def _last_axis_kept(self, e) -> bool:
        x, out = static_shape(e.args[0]), static_shape(e)
        if x is None or out is None or not x or not out or x[-1] != out[-1]:
            return False
        if rg.op_name(e) == "relax.strided_slice":
            fields = getattr(e.args[1], "fields", None)  # a tuple of PrimValues
            axes = [int(getattr(f, "value", f)) % len(x) for f in fields] if fields is not None else None
            return axes is not None and len(x) - 1 not in axes
        if rg.op_name(e) in ("relax.squeeze", "relax.expand_dims"):
            axes = [int(a) for a in (e.attrs.axis or [])]
            nd = len(out) if rg.op_name(e) == "relax.expand_dims" else len(x)
            return bool(axes) and all(a % nd != nd - 1 for a in axes)
        return True  # reshape: the same last dimension

    def can(self, v) -> bool:
        e = self.g.value.get(v)
        op = rg.op_name(e) if e is not None else ""
        if op == "relax.matmul":
            w = const_value(self.g, e.args[1], "split weight")
            return w is not None and w.ndim == 2 and isinstance(e.args[0], relax.Var)
        if op == "relax.add":
            return all(
                self._const_columns(a, static_shape(e)) is not None or (isinstance(a, relax.Var) and self.can(a))
                for a in e.args
            )
        if op in ("relax.reshape",) + _COLUMN_SAFE:
            return isinstance(e.args[0], relax.Var) and self._last_axis_kept(e) and self.can(e.args[0])
        return False

    def _resolve(self, e):
        return self.g.value.get(e, e) if isinstance(e, relax.Var) else e

    def _weight_columns(self, wexpr, w: np.ndarray, a: int, b: int):
        """Columns [a, b) of a dense weight [K, N], in the weight's own quantized form where it has one --
        int8 ``dequantize(codes [K, N], per-column scales, zero points, axis 1)`` or a group-wise weight
        ``permute_dims(group_dequantize(codes [N, K], ...))`` (ir/group_quant.py): the same form on those
        columns' codes, so W8A16 / W4A16 survive the split -- else the float32 columns of `w`."""
        e = self._resolve(wexpr)
        if rg.op_name(e) == "relax.dequantize" and int(e.attrs.axis) % 2 == 1:
            vals = [const_value(self.g, x, "split weight") for x in e.args[:3]]
            if all(v is not None for v in vals) and vals[0].ndim == 2:
                codes, scale, zp = ((v[..., a:b] if v.ndim and v.shape[-1] == w.shape[1] else v) for v in vals)
                return relax.op.dequantize(*(relax.const(np.ascontiguousarray(v)) for v in (codes, scale, zp)),
                                           axis=1, out_dtype=e.attrs.out_dtype)  # fmt: skip
        if rg.op_name(e) == "relax.permute_dims":
            rows = self._group_rows(self._resolve(e.args[0]), a, b)
            if rows is not None:
                return relax.op.permute_dims(rows, e.attrs.axes)
        return relax.const(np.ascontiguousarray(w[:, a:b]))

    def _group_rows(self, e, a: int, b: int):
        """Rows [a, b) of a group-wise weight [N, K] (its codes, scales and zero points sliced alike), or
        None when `e` is not one with constant leaves."""
        op = rg.op_name(e)
        if op == "relax.astype":
            v = const_value(self.g, e.args[0], "split weight")
            return (
                None
                if v is None or v.ndim != 2
                else relax.op.astype(relax.const(np.ascontiguousarray(v[a:b])), e.attrs.dtype)
            )
        if op == "relax.take" and int(e.attrs.axis) == 1:
            table = self._group_rows(self._resolve(e.args[0]), a, b)
            index = const_value(self.g, e.args[1], "split weight")
            return None if table is None or index is None else relax.op.take(table, relax.const(index), axis=1)
        if op in ("relax.subtract", "relax.multiply"):
            x, y = (self._group_rows(self._resolve(arg), a, b) for arg in e.args[:2])
            return None if x is None or y is None else relax.Call(e.op, [x, y], e.attrs)
        return None

    def _const_columns(self, a, out_shape):
        """A constant operand of an add as an array whose last axis is the output's (or None)."""
        if isinstance(a, relax.Var) and a in self.g.value and rg.op_name(self.g.value[a]) != "":
            return None
        val = const_value(self.g, a, "split bias")
        if val is None or out_shape is None or val.ndim == 0 or val.shape[-1] != out_shape[-1]:
            return None
        return val

    def parts(self, bb, v, cuts: tuple, m: dict) -> list:
        key = (v, cuts)
        if key in self.memo:
            return self.memo[key]
        e, op = self.g.value[v], rg.op_name(self.g.value[v])
        spans = list(zip(cuts[:-1], cuts[1:]))
        if op == "relax.matmul":
            w = const_value(self.g, e.args[1], "split weight")
            x = rg.subst(e.args[0], m)
            out = [relax.op.matmul(x, self._weight_columns(e.args[1], w, a, b)) for a, b in spans]
        elif op == "relax.add":
            ops = []
            for a in e.args:
                val = self._const_columns(a, static_shape(e))
                ops.append(
                    [relax.const(np.ascontiguousarray(val[..., c0:c1])) for c0, c1 in spans]
                    if val is not None
                    else self.parts(bb, a, cuts, m)
                )
            out = [relax.op.add(p, q) for p, q in zip(*ops)]
        else:
            inner = self.parts(bb, e.args[0], cuts, m)
            if op == "relax.reshape":
                shape = static_shape(e)
                out = [relax.op.reshape(p, list(shape[:-1]) + [b - a]) for p, (a, b) in zip(inner, spans)]
            else:
                out = [relax.Call(e.op, [p] + list(e.args[1:]), e.attrs) for p in inner]
        self.memo[key] = [bb.emit(x, name_hint=f"{v.name}_c{a}") for x, (a, _) in zip(out, spans)]
        return self.memo[key]


def _split_cuts(e) -> tuple | None:
    """The column boundaries (0, ..., N) of a split along the last axis, or None."""
    shape = static_shape(e.args[0])
    if shape is None or int(e.attrs.axis) % len(shape) != len(shape) - 1:
        return None
    n, ios = shape[-1], e.attrs.indices_or_sections
    if not hasattr(ios, "__len__"):  # a number of equal sections
        k = int(ios)
        return tuple(range(0, n + 1, n // k)) if k > 0 and n % k == 0 else None
    return (0, *[int(i) for i in ios], n)


def _slice_span(e, shape) -> tuple | None:
    """Columns [a, b) that `e` takes when it is a step-1 strided_slice of the last axis alone (begin and
    end clamped into the axis, as strided_slice does), else None."""
    if rg.op_name(e) != "relax.strided_slice" or shape is None or len(e.args) < 4:
        return None
    fields = [getattr(e.args[i], "fields", None) for i in range(1, 4)]
    if any(f is None or len(f) != 1 for f in fields):
        return None
    axis, begin, end = (int(getattr(f[0], "value", f[0])) for f in fields)
    steps = getattr(e.args[4], "fields", None) if len(e.args) > 4 else None
    if axis % len(shape) != len(shape) - 1 or (steps and int(getattr(steps[0], "value", steps[0])) != 1):
        return None
    n = shape[-1]
    a, b = (min(max(v + n if v < 0 else v, 0), n) for v in (begin, end))
    return (a, b) if a < b else None


def _slice_cuts(g: rg.Graph, var) -> tuple | None:
    """The column boundaries (0, ..., N) when every reader of `var` is a last-axis slice and the slices
    tile its columns exactly (each column taken by one slice: the two halves of diffusers' GEGLU
    `chunk(2, dim=-1)`, which the exporter writes as two Slices), else None."""
    users = g.uses.get(var, [])
    spans = [_slice_span(g.value.get(u), static_shape(var)) if u is not None else None for u in users]
    if len(users) < 2 or any(s is None for s in spans):
        return None
    ordered = sorted(set(spans))
    n = static_shape(var)[-1]
    tiled = ordered[0][0] == 0 and ordered[-1][1] == n and all(x[1] == y[0] for x, y in zip(ordered, ordered[1:]))
    return (0, *[b for _, b in ordered]) if tiled else None


def split_dense_columns(mod: tvm.IRModule) -> tvm.IRModule:
    """Turn a split of a dense layer's output columns into one dense layer per part.

    An LSTM exported from PyTorch computes all four gates with one matmul per input, adds the two (and
    the biases), then splits the sum into the gates: ``split(add(add(b_ih, x @ W_ih), add(b_hh, h @
    W_hh)), 4, axis=-1)``. The NPU has no split along the channels of a matrix, so the split ran on the
    CPU between every step. Pushed down to the matmuls -- each gate's own columns of the weights and
    biases, through the adds, reshapes and row slices between -- the split disappears and every gate is
    a dense layer of its own, as the ONNX importer writes the LSTM. Splits that do not reach constant
    weights are left alone. Slices of the last axis that tile a dense output's columns exactly (each
    column read by one slice: diffusers' GEGLU) are split the same way.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; the column splits in its `main` (plain dataflow, as frontends emit) are
        pushed into the weights.

    Returns
    -------
    tvm.IRModule
        `mod` without those splits (`mod` itself when it has none).
    """
    g = rg.Graph(mod["main"])
    cols = _Columns(g)
    splits = {}
    for var, e in g.bindings:
        if rg.op_name(e) != "relax.split" or not isinstance(e.args[0], relax.Var):
            continue
        cuts = _split_cuts(e)
        users = g.uses.get(var, [])
        if (
            cuts is not None
            and users
            and all(u is not None and isinstance(g.value[u], relax.TupleGetItem) for u in users)
            and cols.can(e.args[0])
        ):
            splits[var] = cuts
    sliced = {}  # var -> cuts, when its readers are slices tiling its columns
    for var, e in g.bindings:
        cuts = _slice_cuts(g, var) if rg.op_name(e) in ("relax.matmul", "relax.add", "relax.reshape") else None
        if cuts is not None and cols.can(var):
            sliced[var] = cuts
    if not splits and not sliced:
        return mod

    def rewrite(bb, var, value, m, fresh):
        if var in splits:
            return False
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in splits:
            src = g.value[value.tuple_value].args[0]
            return cols.parts(bb, src, splits[value.tuple_value], m)[value.index]
        src = value.args[0] if rg.op_name(value) == "relax.strided_slice" else None
        if src in sliced:
            cuts = sliced[src]
            return cols.parts(bb, src, cuts, m)[cuts.index(_slice_span(value, static_shape(src))[0])]
        return None

    return relax.transform.DeadCodeElimination()(rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0]))
