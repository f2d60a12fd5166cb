"""Graph rewrites of `main` that `partition.prepare` runs before pattern matching.

Frontends emit some ops the NPU has no command for but that disappear into a neighbouring convolution
at compile time: an inference batch norm after a convolution is a per-channel scale and shift of its
weights and bias, and a zero pad before a convolution is the convolution's own padding. Folding them
here, on constants, lets the conv patterns match one `conv2d (+add)` and run it as one NPU layer,
instead of a CPU island that splits the NPU region. Each rewrite re-emits `main` through
`relax_graph.rebuild`, so every untouched binding keeps its name.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..ir import graph as rg
from ..ir.values import static_shape
from ..contract.errors import NPUError
from ..ir.values import eval_const

CONV = "relax.nn.conv2d"


def _value(g: rg.Graph, expr, what: str):
    """Numpy value of a constant expression of `g` (through its bindings), or None."""
    try:
        return eval_const(expr, "rewrite", what, env=g.value)
    except (NPUError, ValueError, TypeError):  # not a compile-time constant
        return None


def _conv2d(call, data, weight, padding=None):
    """A copy of conv2d `call` on new operands (and padding), every other attribute kept."""
    a = call.attrs
    return relax.op.nn.conv2d(data, weight, strides=a.strides,
                              padding=a.padding if padding is None else padding,
                              dilation=a.dilation, groups=a.groups, data_layout=a.data_layout,
                              kernel_layout=a.kernel_layout, out_layout=a.out_layout,
                              out_dtype=a.out_dtype)


def _drop_feeders(g: rg.Graph, expr, user, plan: dict) -> None:
    """Drop the bindings that computed `expr` (a folded weight or bias) for `user` alone, so no dead
    reshape of a constant is left behind to show up as a CPU op."""
    for v in rg.free_vars(expr):
        if v in g.value and g.sole_use(v) == user:
            plan[v] = False
            _drop_feeders(g, g.value[v], v, plan)


def _rebuild(mod: tvm.IRModule, g: rg.Graph, plan: dict) -> tvm.IRModule:
    """Re-emit `main` with the bindings of `plan` ({var: callback(m) -> new value, or False to drop})."""
    def rewrite(bb, var, value, m, fresh):
        return plan[var](m) if callable(plan.get(var)) else plan.get(var)

    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0]) if plan else mod


def _rewrite_bindings(mod: tvm.IRModule, match) -> tvm.IRModule:
    """Rewrite `main` by the plans `match(g, var, value)` returns for its bindings, in order.

    `match` returns None where a binding does not match, else a rebuild plan ({var: callback(m) -> new
    value, or False to drop}, see `_rebuild`) that may also name other bindings (the conv a pad
    feeds). Two matches must not plan the same binding; each pass says why its matches cannot.
    `mod` itself comes back when nothing matched.
    """
    g = rg.Graph(mod["main"])
    plan: dict = {}
    for var, value in g.bindings:
        plan.update(match(g, var, value) or {})
    return _rebuild(mod, g, plan)


# --- pad + conv2d -------------------------------------------------------------------------------

def _fold_pad(g: rg.Graph, var, pad) -> dict | None:
    """The rebuild plan folding pad binding `var` into the conv2d that reads it, or None."""
    if rg.op_name(pad) != "relax.nn.pad" or str(pad.attrs.pad_mode) != "constant" \
            or float(pad.attrs.pad_value) != 0.0 or not rg.is_f32_tensor(var) \
            or rg.op_name(g.value.get(pad.args[0])) == "relax.dequantize":
        return None  # not a zero pad of a float tensor
    user = g.sole_use(var)
    conv = g.value.get(user)
    if rg.op_name(conv) != CONV or not conv.args[0].same_as(var) or conv.args[1].same_as(var):
        return None
    width = [int(p) for p in pad.attrs.pad_width]
    layout = str(conv.attrs.data_layout)
    h, w = layout.index("H"), layout.index("W")
    # before/after pairs per axis; anything on N or C (or a crop) is not a conv padding
    if len(width) != 2 * len(layout) or min(width) < 0 or \
            any(width[2 * i] or width[2 * i + 1] for i in range(len(layout)) if i not in (h, w)):
        return None
    top, left, bottom, right = (int(p) for p in conv.attrs.padding)
    padding = [top + width[2 * h], left + width[2 * w], bottom + width[2 * h + 1],
               right + width[2 * w + 1]]
    # the pad's sole use is the conv's data operand, so no two pads plan the same conv
    return {var: False,
            user: lambda m: _conv2d(conv, rg.subst(pad.args[0], m), rg.subst(conv.args[1], m), padding)}


def fuse_pad_into_conv(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold a zero `R.nn.pad` into the padding of the `conv2d` that reads it.

    Matches ``p = R.nn.pad(x, pad_mode="constant", pad_value=0)`` on a float32 tensor, padding only
    the H and W axes of the consumer's data layout by non-negative amounts, whose only use is the data
    operand of a ``conv2d``; the pad binding is dropped and its amounts are added to the conv's
    padding (top, left, bottom, right). Models exported from TensorFlow ("SAME" padding with an
    explicit Pad) then run as one NPU convolution.

    Only float graphs are handled for now. In int8 QDQ graphs the pad reads a dequantize (and is
    usually followed by its own quantize -> dequantize pair before the conv); such pads are left
    alone and run on the CPU, the conv on the NPU.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; only its `main` (plain dataflow, as frontends emit) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with the matches rewritten (`mod` itself when nothing matched).
    """
    return _rewrite_bindings(mod, _fold_pad)


# --- conv2d (+bias) + batch_norm ----------------------------------------------------------------

def _per_channel(value: np.ndarray, channels: int, axis: int, rank: int):
    """`value` as a [channels] vector when it broadcasts along `axis` of a rank-`rank` tensor only."""
    if value is None or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def _bn_producer(g: rg.Graph, x):
    """(conv var, conv call, bias add var or None, bias expr or None) when `x` is conv2d(+bias add)
    used only on the way to the batch norm; None otherwise."""
    add_var, bias, e = None, None, g.value.get(x)
    if rg.op_name(e) == "relax.add" and g.sole_use(x) is not None:
        for conv_arg, bias_arg in ((e.args[0], e.args[1]), (e.args[1], e.args[0])):
            if rg.op_name(g.value.get(conv_arg)) == CONV:
                add_var, bias, x = x, bias_arg, conv_arg
                break
    conv = g.value.get(x)
    if rg.op_name(conv) != CONV or g.sole_use(x) is None:
        return None
    return x, conv, add_var, bias


def _batch_norm_fold(g: rg.Graph, bn_var, bn) -> dict | None:
    """The rebuild plan folding batch norm binding `bn_var` into its producing conv, or None."""
    if rg.op_name(bn) != "relax.nn.batch_norm":
        return None
    a = bn.attrs
    gets = g.uses.get(bn_var, [])
    # Inference only (training normalizes by the batch's own statistics), and the tuple may only be
    # taken apart: item 0 is the normalized tensor, items 1 and 2 the unchanged moving statistics.
    if a.training or not gets or None in gets or not all(
            isinstance(g.value[u], relax.TupleGetItem) for u in gets) \
            or [g.value[u].index for u in gets].count(0) != 1:
        return None
    # a conv feeds only one batch norm (sole use), so two plans never touch one binding
    found = _bn_producer(g, bn.args[0])
    if found is None:
        return None
    conv_var, conv, add_var, bias = found
    shape = static_shape(conv_var)
    if shape is None or not rg.is_f32_tensor(conv_var):
        return None
    c_axis, o_axis = str(conv.attrs.out_layout).index("C"), str(conv.attrs.kernel_layout).index("O")
    if int(a.axis) % len(shape) != c_axis:
        return None
    channels = shape[c_axis]
    weight = _value(g, conv.args[1], "weight")
    gamma, beta, mean, var = (_per_channel(_value(g, e, "batch norm parameter"), channels, 0, 1)
                              for e in bn.args[1:5])
    b = np.zeros(channels, np.float32) if add_var is None else \
        _per_channel(_value(g, bias, "bias"), channels, c_axis, len(shape))
    if weight is None or weight.dtype != np.float32 or any(v is None for v in (gamma, beta, mean, var, b)):
        return None
    # center / scale off mean "no beta" / "no gamma" (the ops ignore those operands then).
    gamma, beta = (gamma if a.scale else np.float32(1)), (beta if a.center else np.float32(0))
    # All arithmetic in float32, as the batch norm itself computes on the CPU.
    scale = (gamma / np.sqrt(var + np.float32(a.epsilon))).astype(np.float32)
    w_shape = [1] * weight.ndim
    w_shape[o_axis] = -1
    new_w = (weight * scale.reshape(w_shape)).astype(np.float32)
    b_shape = [1] * len(shape)
    b_shape[c_axis] = -1
    new_b = ((b - mean) * scale + beta).astype(np.float32).reshape(b_shape)

    # The conv keeps its binding (and name) with the new weights; the bias add and the batch norm go,
    # and the tuple's item 0 becomes conv + new bias, the conv2d_bias form the patterns match.
    plan = {conv_var: lambda m: _conv2d(conv, rg.subst(conv.args[0], m), relax.const(new_w)),
            bn_var: False}
    _drop_feeders(g, conv.args[1], conv_var, plan)
    if add_var is not None:
        plan[add_var] = False
        _drop_feeders(g, bias, add_var, plan)
    for u in gets:
        index = g.value[u].index
        if index == 0:
            plan[u] = lambda m: relax.op.add(m[conv_var], relax.const(new_b))
        elif g.uses.get(u):
            plan[u] = lambda m, e=bn.args[2 + index]: rg.subst(e, m)  # moving_mean / moving_var
        else:
            plan[u] = False  # the frontend's unused running statistics
    return plan


def fold_batch_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold an inference `R.nn.batch_norm` into the `conv2d` before it.

    Matches ``batch_norm(conv2d(x, W) [+ b], gamma, beta, mean, var, training=False)`` on the conv's
    channel axis, where W, b and the four statistics are compile-time constants (per output channel),
    the conv (and its bias add) feed only the batch norm, and the batch norm's result is only taken
    apart by TupleGetItem (as TVM's ONNX frontend emits BatchNormalization). The pair becomes
    ``conv2d(x, W') + b'`` with, per output channel, ``s = gamma / sqrt(var + eps)``, ``W' = W * s``
    and ``b' = (b - mean) * s + beta``, computed in float32 with numpy.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; only its `main` (plain dataflow, as frontends emit) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with the matches rewritten (`mod` itself when nothing matched).
    """
    return _rewrite_bindings(mod, _batch_norm_fold)


def decompose_batch_norm(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite the batch norms no conv absorbed into elementwise ops (TVM's DecomposeOpsForInference),
    so they run on the CPU with their moving statistics; `mod` itself when `main` has none."""
    found = []
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.append(e) if rg.op_name(e) == "relax.nn.batch_norm" else None)
    return relax.transform.DecomposeOpsForInference("main")(mod) if found else mod


# --- squeeze / expand_dims / stack of one -> reshape ---------------------------------------------

VIEWS = ("relax.squeeze", "relax.expand_dims", "relax.flatten")


def _sole_stacked(g: rg.Graph, e):
    """The one tensor a `stack` stacks, or None when it stacks several (or an unknown tuple)."""
    tup = e.args[0]
    tup = g.value.get(tup, tup) if isinstance(tup, relax.Var) else tup
    return tup.fields[0] if isinstance(tup, relax.Tuple) and len(tup.fields) == 1 else None


def _as_reshape(g: rg.Graph, var, e) -> dict | None:
    """The rebuild plan writing view binding `var` as a reshape (of a constant: the reshaped constant),
    or None. Each plan names `var` alone."""
    name = rg.op_name(e)
    x = _sole_stacked(g, e) if name == "relax.stack" else e.args[0] if name in VIEWS else None
    shape = static_shape(e) if x is not None else None
    if shape is None or static_shape(x) is None:
        return None
    if isinstance(x, tvm.ir.Constant):  # e.g. an LSTM's zero initial state: fold it here
        return {var: lambda m: relax.const(x.data.numpy().reshape(shape))}
    return {var: lambda m: relax.op.reshape(rg.subst(x, m), shape)}


def views_as_reshape(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite squeeze, expand_dims, flatten and the stack of a single tensor as the `reshape` each
    one is.

    They only insert or drop unit dimensions (a stack of one tensor inserts one), so on static shapes
    each is ``reshape(x, shape of the result)``, which the reshape pattern places on the NPU as a free
    view when it keeps the stored rows. ONNX exports are full of them: an LSTM's final state ``Y_h`` is
    ``stack([h])`` and a classifier after it reads ``squeeze(Y_h)``; left as CPU ops they split the NPU
    region in two, with a host round trip between.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; only its `main` (plain dataflow, as frontends emit) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with the matches rewritten (`mod` itself when nothing matched).
    """
    return _rewrite_bindings(mod, _as_reshape)


# --- split of a dense layer's columns -> one dense layer per part ---------------------------------

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
            w = _value(self.g, e.args[1], "split weight")
            return w is not None and w.ndim == 2 and isinstance(e.args[0], relax.Var)
        if op == "relax.add":
            return all(self._const_columns(a, static_shape(e)) is not None or
                       (isinstance(a, relax.Var) and self.can(a)) for a in e.args)
        if op in ("relax.reshape",) + _COLUMN_SAFE:
            return isinstance(e.args[0], relax.Var) and self._last_axis_kept(e) and self.can(e.args[0])
        return False

    def _const_columns(self, a, out_shape):
        """A constant operand of an add as an array whose last axis is the output's (or None)."""
        if isinstance(a, relax.Var) and a in self.g.value and rg.op_name(self.g.value[a]) != "":
            return None
        val = _value(self.g, a, "split bias")
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
            w = _value(self.g, e.args[1], "split weight")
            x = rg.subst(e.args[0], m)
            out = [relax.op.matmul(x, relax.const(np.ascontiguousarray(w[:, a:b]))) for a, b in spans]
        elif op == "relax.add":
            ops = []
            for a in e.args:
                val = self._const_columns(a, static_shape(e))
                ops.append([relax.const(np.ascontiguousarray(val[..., c0:c1])) for c0, c1 in spans]
                           if val is not None else self.parts(bb, a, cuts, m))
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


def split_dense_columns(mod: tvm.IRModule) -> tvm.IRModule:
    """Turn a split of a dense layer's output columns into one dense layer per part.

    An LSTM exported from PyTorch computes all four gates with one matmul per input, adds the two (and
    the biases), then splits the sum into the gates: ``split(add(add(b_ih, x @ W_ih), add(b_hh, h @
    W_hh)), 4, axis=-1)``. The NPU has no split along the channels of a matrix, so the split ran on the
    CPU between every step. Pushed down to the matmuls -- each gate's own columns of the weights and
    biases, through the adds, reshapes and row slices between -- the split disappears and every gate is
    a dense layer of its own, as the ONNX importer writes the LSTM. Splits that do not reach constant
    weights are left alone.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module; only its `main` (plain dataflow, as frontends emit) is rewritten.

    Returns
    -------
    tvm.IRModule
        `mod` with the matches rewritten (`mod` itself when nothing matched).
    """
    g = rg.Graph(mod["main"])
    cols = _Columns(g)
    splits = {}
    for var, e in g.bindings:
        if rg.op_name(e) != "relax.split" or not isinstance(e.args[0], relax.Var):
            continue
        cuts = _split_cuts(e)
        users = g.uses.get(var, [])
        if cuts is not None and users and all(u is not None and isinstance(g.value[u], relax.TupleGetItem)
                                              for u in users) and cols.can(e.args[0]):
            splits[var] = cuts
    if not splits:
        return mod

    def rewrite(bb, var, value, m, fresh):
        if var in splits:
            return False
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in splits:
            src = g.value[value.tuple_value].args[0]
            return cols.parts(bb, src, splits[value.tuple_value], m)[value.index]
        return None

    return relax.transform.DeadCodeElimination()(rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0]))


# --- compute on constants only -> folded ----------------------------------------------------------

# Ops that compute (rather than move or reinterpret) values: one of them on constants alone is work the
# NPU region would get as a constant input, which no NPU command reads.
_COMPUTE = ("relax.matmul", "relax.nn.conv2d", "relax.add", "relax.subtract", "relax.multiply",
            "relax.sigmoid", "relax.tanh", "relax.nn.relu", "relax.clip", "relax.nn.softmax")


def fold_constant_compute(mod: tvm.IRModule) -> tvm.IRModule:
    """Fold a float graph whose compute ops include one on constants only (TVM's FoldConstant).

    A frontend or a user's own rewrite can leave, e.g., ``matmul(zeros, W)`` (an LSTM's first step
    from a zero state): matched as an NPU dense layer its data input would be a constant, which NPU
    commands do not take. Folded, it is a constant operand of the next op. Only float graphs: in a QDQ
    graph FoldConstant would also fold ``dequantize(int8 weight)`` and hide the int8 weights from the
    patterns. Graphs without such an op are returned as they are (FoldConstant compiles a kernel per
    constant subgraph, e.g. every transposed weight).
    """
    g = rg.Graph(mod["main"])
    ops = {rg.op_name(e) for _, e in g.bindings}
    if "relax.dequantize" in ops or "relax.quantize" in ops:
        return mod
    for _, e in g.bindings:
        if rg.op_name(e) in _COMPUTE and all(
                not isinstance(a, (relax.Var, relax.Call)) or _value(g, a, "constant compute") is not None
                for a in e.args):
            return relax.transform.FoldConstant()(mod)
    return mod


def run(mod: tvm.IRModule) -> tvm.IRModule:
    """All rewrites, in order: compute on constants folded, column splits of dense layers, views as
    reshapes, pad fusion, batch norm folding, then decomposing the batch norms left; returns the rewritten module with its bindings canonicalized (see
    `fold_batch_norm`)."""
    try:
        mod = fold_batch_norm(fuse_pad_into_conv(views_as_reshape(split_dense_columns(fold_constant_compute(mod)))))
    except ValueError:  # main is not plain dataflow (e.g. control flow): rewrite nothing
        pass
    return relax.transform.CanonicalizeBindings()(decompose_batch_norm(mod))
