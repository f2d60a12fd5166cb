"""Post-training quantization: a float32 Relax module -> the QDQ module the NPU's int8 patterns match.

The output has exactly the form TVM's ONNX frontend gives for an onnxruntime ``quantize_static`` QDQ
model (int8 activations per tensor, asymmetric; int8 weights per output channel, symmetric; int32
biases), so a model quantized here and a model quantized by onnxruntime go down the same path::

    x_q = R.quantize(x, s_x, z_x, axis=1); x_dq = R.dequantize(x_q, s_x, z_x, axis=1)
    y = R.nn.conv2d(x_dq, R.dequantize(W_q, s_w[OC], 0[OC], axis=0))
    y = R.add(y, R.reshape(R.dequantize(b_q, s_x * s_w, 0[OC], axis=0), (1, OC, 1, 1)))
    y = R.nn.relu(y)                          # relu / clip stay inside, before the quantize
    y_q = R.quantize(y, s_y, z_y, axis=1); y_dq = R.dequantize(y_q, s_y, z_y, axis=1)

Quantized ops ("units"): conv2d and matmul with a constant weight (+ constant bias)(+ relu/clip), add
of two tensors (+ relu/clip), multiply and subtract of two tensors, sigmoid, tanh, mean over H, W,
avg_pool2d, max_pool2d, concat, and strided_slice (which keeps its input's scale and zero point). A unit
gets a QDQ pair on its output and on every activation it reads; every other op stays float and reads
dequantized values.

An LSTM's cell state gets 16 bits (TFLite's integer LSTM does the same; docs/npu.md section 2): a sum of
two products, ``c = f * c_prev + i * g``, one of whose products reads an earlier such sum or (through
squeeze / reshape / slice) a model input, is a cell state. ``c``, both products and ``c_prev`` are
quantized to int16 (symmetric); an op that reads ``c`` but takes int8 only (``tanh(c)``) reads an int8
requantization of it, and the slices of a model input that feed ``c_prev`` stay float, so the state
crosses calls in 16 bits. A state carried in from a model input is the last state of the previous call,
so its range is the union of its own and every step's state: calibration data that starts each sequence
from zeros would otherwise give it an empty range and leave the first step in float on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tqdm.auto import tqdm
from tvm import relax

from .. import rewrite
from ..contract.errors import NPUError
from ..ir.graph import Graph, rebuild, run_probe, with_main
from ..ir.graph import is_f32_tensor as _f32
from ..ir.graph import op_name as _op
from . import calibrate as cal
from . import w4a8
from .weight_int4 import quantize_weights_int4

WEIGHTED = ("relax.nn.conv2d", "relax.matmul")
ACTS = ("relax.nn.relu", "relax.clip", "relax.nn.relu6")
POOLS = ("relax.mean", "relax.nn.avg_pool2d", "relax.nn.max_pool2d")
UNARY = ("relax.sigmoid", "relax.tanh")
BINARY = ("relax.add", "relax.multiply", "relax.subtract")
# Ops that move data without computing on it: their output keeps their input's scale and zero point
# (what onnxruntime's QDQ quantizer does for Slice / Reshape), so they stay views on the NPU.
PASSTHROUGH = ("relax.strided_slice", "relax.reshape")
# Every op that can anchor a quantized unit (what `skip` can name by op)
UNIT_OPS = WEIGHTED + POOLS + BINARY + UNARY + PASSTHROUGH + ("relax.concat",)
# Ops that only reshape a tensor: followed back from a product to the state it reads.
VIEWS = ("relax.squeeze", "relax.reshape", "relax.expand_dims", "relax.strided_slice")
# Units that can read and write 16-bit tensors (ELTWISE, format 1.2).
WIDE_OPS = ("add", "subtract", "multiply")
INT32_MAX = 2**31 - 1


@dataclass
class QuantTensor:
    """A tensor given a QDQ pair: its var in the float module and the dequantized var in the QDQ one."""

    name: str
    qdq_name: str
    op: str  # the op that produced it ("input" for a model input)
    lo: float  # the calibrated range (before widening to include 0)
    hi: float
    scale: float
    zero_point: int
    bits: int = 8  # 16: an LSTM cell state (symmetric int16)


@dataclass
class SkippedOp:
    """An op that could have been quantized but stays float, and why."""

    name: str
    op: str
    reason: str


@dataclass
class QuantReport:
    """What `quantize` did: `tensors` (QuantTensor, in model order), `ops` ((name, op) of each quantized
    op, named by its first var) and `skipped` (SkippedOp, each with its reason)."""

    method: str
    batches: int = 0
    tensors: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    int4_layers: list = field(default_factory=list)  # W4A8: WeightLayer per dense with int4 weights
    int8_weights: list = field(default_factory=list)  # W4A8: (name, reason) of dense layers kept int8

    def summary(self) -> str:
        """A human-readable summary: one line per quantized tensor and per skipped op."""
        lines = [
            f"quantized {len(self.ops)} ops, {len(self.tensors)} tensors "
            f"({self.method}, {self.batches} batches); {len(self.skipped)} ops stay float"
        ]
        lines += [
            f"  {t.name:<16} {t.op:<16} [{t.lo:.4g}, {t.hi:.4g}] scale={t.scale:.4g} "
            f"zp={t.zero_point}" + (" int16" if t.bits == 16 else "")
            for t in self.tensors
        ]
        lines += [f"  float: {s.name} ({s.op}): {s.reason}" for s in self.skipped]
        lines += [
            f"  int4 weights: {t.name} K {t.k} N {t.n} weight SQNR {t.weight_sqnr_db:.2f} dB" for t in self.int4_layers
        ]
        lines += [f"  int8 weights: {name}: {reason}" for name, reason in self.int8_weights]
        return "\n".join(lines)


@dataclass
class _Unit:
    name: str
    op: str
    members: list  # bound vars of the unit, anchor first
    inputs: list  # activation vars read
    out: object = None  # the var whose value gets the output QDQ pair
    reason: str | None = None
    weight: np.ndarray | None = None
    w_axis: int = 0  # per-channel axis of `weight` as stored
    w_perm: object = None  # permute_dims var (Gemm transB form), or None
    w_perm_call: relax.Call | None = None  # the permute_dims call itself
    bias: tuple | None = None  # (add var, constant, shape)
    w_q: np.ndarray | None = None  # set by _quantize_weights
    w_scales: np.ndarray | None = None
    b_q: np.ndarray | None = None
    b_scales: np.ndarray | None = None
    passthrough: bool = False  # the output shares the input's quantization (PASSTHROUGH)
    w4: object = None  # W4A8: the dense's weight_int4.Int4Layer (w4a8.py); its bias stays float


def _find_units(g: Graph) -> list:
    units, taken = [], set()
    for v, e in g.bindings:
        op = _op(e)
        if v in taken or op not in UNIT_OPS:
            continue
        u = _weighted(g, v, e) if op in WEIGHTED else _plain(g, v, e, op)
        if u is None:
            continue
        if u.reason is None and not all(_f32(t) for t in u.inputs + [u.out]):
            u.reason = "not float32 tensors"
        taken.update(u.members)
        units.append(u)
    return units


def _weighted(g: Graph, v, e) -> _Unit:
    conv = _op(e) == "relax.nn.conv2d"
    x, w = e.args[0], e.args[1]
    u = _Unit(v.name, _op(e)[6:], [v], [x], out=v)
    perm = None
    if not conv and isinstance(w, relax.Var) and _op(g.value.get(w)) == "relax.permute_dims":
        perm, w = w, g.value[w].args[0]
    if not isinstance(w, tvm.ir.Constant):
        u.reason = "weight is not a constant"
        return u
    u.weight = w.value.numpy()
    if not isinstance(x, relax.Var):
        u.reason = "input is a constant"
    elif conv and (e.attrs.data_layout, e.attrs.kernel_layout) != ("NCHW", "OIHW"):
        u.reason = f"layout {e.attrs.data_layout}/{e.attrs.kernel_layout} (needs NCHW/OIHW)"
    elif not conv and (u.weight.ndim != 2 or (perm is not None and len(g.uses[perm]) != 1)):
        u.reason = "weight is not a 2-D constant used by this matmul alone"
    if u.reason:
        return u
    u.w_perm, u.w_perm_call = perm, (g.value[perm] if perm is not None else None)
    u.w_axis = 0 if conv or perm is not None else 1
    channels = u.weight.shape[u.w_axis]
    add = g.sole_use(v)
    if add is not None and _op(g.value[add]) == "relax.add":
        a, b = g.value[add].args
        c = b if a.same_as(v) else a
        rank = v.ty.ndim
        want = (1, channels, 1, 1) if conv else (1,) * (rank - 1) + (channels,)
        if (
            isinstance(c, tvm.ir.Constant)
            and c.value.numpy().size == channels
            and ((1,) * (rank - c.value.numpy().ndim) + c.value.numpy().shape == want)
        ):
            u.bias = (add, c, c.value.numpy().shape)
            u.members.append(add)
    _absorb_activation(g, u)
    return u


def _absorb_activation(g: Graph, u: _Unit) -> None:
    act = g.sole_use(u.members[-1])
    if act is not None and _op(g.value[act]) in ACTS:
        u.members.append(act)
    u.out = u.members[-1]


def _plain(g: Graph, v, e, op: str) -> _Unit:
    args = (
        list(e.args[0].fields)
        if op == "relax.concat" and isinstance(e.args[0], relax.Tuple)
        else [e.args[0]]
        if op in POOLS + UNARY + PASSTHROUGH
        else list(e.args)
    )
    u = _Unit(v.name, op[6:], [v], [a for a in args if isinstance(a, relax.Var)], out=v, passthrough=op in PASSTHROUGH)
    if op == "relax.concat" and not isinstance(e.args[0], relax.Tuple):
        u.reason = "operands are not a tuple of tensors"
    elif len(u.inputs) != len(args):
        u.reason = "an operand is a constant"
    elif op == "relax.mean":
        nd = args[0].ty.ndim
        axes = sorted(int(a) % nd for a in (e.attrs.axis or range(nd))) if nd > 0 else []
        if nd != 4 or axes != [2, 3]:
            u.reason = "mean is not over the spatial axes (H, W) of an NCHW tensor"
    elif op in POOLS and e.attrs.layout != "NCHW":
        u.reason = f"layout {e.attrs.layout} (needs NCHW)"
    if op == "relax.add":
        _absorb_activation(g, u)
    return u


def _source(g: Graph, v) -> tuple:
    """(the var `v` views through VIEWS ops, the vars passed on the way)."""
    chain = []
    while v in g.value and _op(g.value[v]) in VIEWS:
        chain.append(v)
        v = g.value[v].args[0]
    return v, chain


@dataclass
class _CellStates:
    """The LSTM cell states among a model's units (see the module docstring)."""

    wide: set = field(default_factory=set)  # vars to quantize to 16 bits
    views: set = field(default_factory=set)  # view vars between a model input and a 16-bit state
    states: set = field(default_factory=set)  # the states c (each step's sum)
    carried_in: set = field(default_factory=set)  # c_prev read from a model input, and f * c_prev

    def share_ranges(self, ranges: dict) -> dict:
        """`ranges` with the range of each carried-in state, and of the product that reads it, widened
        to every state's (module docstring; ``|f * c| <= |c|`` as the gate ``f`` is in (0, 1))."""
        if not self.states or not self.carried_in:
            return ranges
        lo = min(ranges[v][0] for v in self.states)
        hi = max(ranges[v][1] for v in self.states)
        return {**ranges, **{v: (min(lo, ranges[v][0]), max(hi, ranges[v][1])) for v in self.carried_in}}


def _cell_states(g: Graph, units: list) -> _CellStates:
    """The LSTM cell states among `units` (in model order; see the module docstring)."""
    by_out = {u.out: u for u in units if u.reason is None}
    cells = _CellStates()
    states, wide, views = cells.states, cells.wide, cells.views
    for u in units:
        if u.reason or u.op != "add" or len(u.members) != 1 or len(u.inputs) != 2:
            continue
        products = [by_out.get(t) for t in u.inputs]
        if not all(p is not None and p.op == "multiply" for p in products):
            continue
        carried = [
            (t, chain)
            for p in products
            for t in p.inputs
            for src, chain in [_source(g, t)]
            if src in states or src in g.params
        ]
        if carried:
            states.add(u.out)
            wide.update([u.out, *u.inputs, *(t for t, _ in carried)])
            views.update(v for _, chain in carried for v in chain)
            from_input = {t for t, _ in carried if _source(g, t)[0] in g.params}
            cells.carried_in.update(from_input)
            cells.carried_in.update(p.out for p in products if from_input & set(p.inputs))
    return cells


def _drop_lone_passthroughs(units: list) -> None:
    """A passthrough (slice, reshape) quantizes only next to quantized ops: connected, through other
    passthroughs, to a unit that computes. Between float ops its QDQ pair would only cost time and
    precision."""
    live = [u for u in units if u.reason is None]
    by_out = {u.out: u for u in live}
    readers: dict = {}
    for u in live:
        for t in u.inputs:
            readers.setdefault(t, []).append(u)
    frontier = [u for u in live if not u.passthrough]
    anchored = {id(u) for u in frontier}
    while frontier:
        u = frontier.pop()
        for n in [by_out[t] for t in u.inputs if t in by_out] + readers.get(u.out, []):
            if id(n) not in anchored:
                anchored.add(id(n))
                frontier.append(n)
    for u in live:
        if id(u) not in anchored:
            u.reason = "moves data between float ops: stays float"


def _share_step_ranges(live: list, ranges: dict) -> dict:
    """Layers with the same weight (the steps of an unrolled recurrence) read and write with one range
    each, the union over the steps -- TFLite's LSTM has one scale per tensor across time. Their
    requantization blocks are then identical too, so the NPU keeps one copy loaded for every step."""
    groups: dict = {}
    for u in live:
        if u.weight is not None and u.bias is None:
            groups.setdefault((u.weight.shape, u.weight.tobytes()), []).append(u)
    ranges = dict(ranges)
    for units in groups.values():
        if len(units) < 2:
            continue
        for vars_ in ([u.inputs[0] for u in units], [u.out for u in units]):
            lo = min(ranges[v][0] for v in vars_)
            hi = max(ranges[v][1] for v in vars_)
            ranges.update(dict.fromkeys(vars_, (lo, hi)))
    return ranges


def _skip_entry(u: _Unit, skip) -> str | None:
    # by any var of the unit, or by the op that anchors it (with or without the "relax." prefix)
    names = {m.name for m in u.members} | {u.op, "relax." + u.op}
    return next((s for s in skip if s in names), None)


def _rewriter(units):
    """The `rebuild` hook that gives weighted units their int8 weights and int32 biases."""
    roles = {}
    for u in units:
        roles[u.members[0]] = (u, "anchor")
        if u.bias and u.w4 is None:  # (a W4A8 dense keeps its float bias)
            roles[u.bias[0]] = (u, "bias")
        if u.w_perm is not None:
            roles[u.w_perm] = (u, "perm")

    def rewrite(bb, v, e, m, fresh):
        u, role = roles.get(v, (None, None))
        if role == "anchor" and u.w4 is not None:  # W4A8: the int4 weight [K, N] replaces any transpose
            return relax.Call(e.op, [m[e.args[0]], u.w4.emit(bb, fresh, v.name)], e.attrs, e.ty_args)
        if role == "anchor":
            return _emit_weighted(bb, u, e, m, fresh(f"{v.name}_w"))
        if role == "bias":
            return _emit_bias(bb, u, e, m, fresh(f"{v.name}_b"))
        # the float weight's transpose is dropped: the anchor transposes the dequantized weight
        return False if role == "perm" else None

    return rewrite


def _emit_weighted(bb, u: _Unit, e, m, name: str):
    zeros = np.zeros(u.weight.shape[u.w_axis], np.int8)
    w = bb.emit(
        relax.op.dequantize(
            relax.const(u.w_q), relax.const(u.w_scales), relax.const(zeros), axis=u.w_axis, out_dtype="float32"
        ),
        name,
    )
    if u.w_perm is not None:
        p = u.w_perm_call  # the float model's permute_dims: the same axes, on the dequantized weight
        w = bb.emit(relax.Call(p.op, [w], p.attrs, p.ty_args), name + "T")
    return relax.Call(e.op, [m[e.args[0]], w], e.attrs, e.ty_args)


def _emit_bias(bb, u: _Unit, e, m, name: str):
    n = u.b_q.size
    b = bb.emit(
        relax.op.dequantize(
            relax.const(u.b_q), relax.const(u.b_scales), relax.const(np.zeros(n, np.int32)), axis=0, out_dtype="float32"
        ),
        name,
    )
    if tuple(u.bias[2]) != (n,):
        b = bb.emit(relax.op.reshape(b, u.bias[2]), name + "r")
    # always add(y, bias), whatever the float model's order: the frontend's form, which the patterns match
    return relax.Call(e.op, [m[u.members[0]], b], e.attrs, e.ty_args)


def _quantize_weights(u: _Unit, s_x: float) -> None:
    """Per-channel symmetric int8 weights and int32 biases at scale s_x * s_w."""
    s_w = cal.weight_scales(u.weight, u.w_axis).astype(np.float64)
    if u.bias is not None:
        b = u.bias[1].value.numpy().astype(np.float64).ravel()
        # a large bias over a tiny weight scale would overflow int32: coarsen that channel's weights
        s_w = np.maximum(s_w, np.abs(b) / (s_x * (INT32_MAX - 1)))
        u.b_scales = (s_x * s_w).astype(np.float32)
        u.b_q = np.clip(np.round(b / u.b_scales.astype(np.float64)), -INT32_MAX, INT32_MAX).astype(np.int32)
    u.w_scales = s_w.astype(np.float32)
    u.w_q = cal.quantize_weight(u.weight, u.w_scales, u.w_axis)


def quantize(
    mod: tvm.IRModule,
    calibration_data=None,
    method: str = "minmax",
    percentile: float = 99.99,
    skip=(),
    progress: bool = True,
    state_bits: int = 16,
    weight_bits: int = 8,
    group_size: int = 128,
    symmetric: bool = True,
    weight_method: str = "rtn",
    activations: str | None = None,
    memo: dict | None = None,
):
    """Post-training int8 quantization of a float32 Relax module into QDQ form; with ``weight_bits=4``,
    group-wise int4 weight-only quantization of its dense layers instead (weight_int4.py).

    Parameters
    ----------
    mod : tvm.IRModule
        A float32 model whose weights are constants of `main`, e.g. from ``tvm_npu.from_onnx`` or the
        BlockBuilder. Constant subgraphs (an ONNX conv bias is ``reshape(const)``) are folded first.
    calibration_data : iterable
        Batches of inputs for `main`: tuples/lists of arrays, dicts by input name, or single arrays.
    method : str
        Activation range observer: "minmax", "percentile" or "entropy" (see `tvm_npu.calibrate`).
    percentile : float
        The percentile of the "percentile" method.
    skip : iterable of str
        Var names (e.g. "lv3") or op names (e.g. "nn.conv2d", "add") to keep in float.
    progress : bool
        Show a progress bar over the calibration batches.
    state_bits : int
        16 (default): LSTM cell states, their products and the state carried in are int16 (see above);
        8: everything int8, as onnxruntime's QDQ quantizer would.
    weight_bits : int
        8 (default): the int8 QDQ quantization above. 4: int4 weights with one fp16 scale per
        `group_size` weights along K, activations float (W4A16); `calibration_data` is needed by
        ``weight_method="gptq"`` and ``"awq"`` only, and `method`, `percentile`, `skip` and `state_bits`
        do not apply.
    group_size, symmetric, weight_method :
        With ``weight_bits=4``: 32, 64 or 128; int4 around 0 or uint4 with a zero point per group;
        "rtn" (round to nearest), "gptq" (error-minimizing, from the calibration inputs) or "awq"
        (activation-aware per-channel scales folded into the op before, quantization/awq.py; W4A16 only).
    activations : str, optional
        "int8" (the default with ``weight_bits=8``) or "float" (the default with ``weight_bits=4``). With
        ``weight_bits=4, activations="int8"``: the int8 quantization above with int4 group-wise weights on
        the dense layers (W4A8, w4a8.py; convolutions and a dense whose K `group_size` does not divide keep
        int8 weights, listed in the report's `int8_weights`).
    memo : dict, optional
        With ``weight_bits=4``: as `quantize_weights_int4`'s, shared by the calls that quantize modules of
        one model: a weight met again takes the int4 codes chosen the first time (an LLM's W4A8 prefill step
        and its W4A16 decode step hold the same codes).

    Returns
    -------
    (tvm.IRModule, QuantReport)
        The QDQ module (int8 on quantized ops, float elsewhere) and what was quantized or skipped; with
        ``weight_bits=4`` the int4 module and a WeightQuantReport.
    """
    if weight_bits not in (4, 8):
        raise NPUError("ERR_INVALID_CONFIG", f"quantize: weight_bits must be 8 or 4, not {weight_bits}")
    activations = activations or ("float" if weight_bits == 4 else "int8")
    if activations not in ("int8", "float") or (weight_bits, activations) == (8, "float"):
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f'quantize: activations={activations!r} with weight_bits={weight_bits}; use "int8", or "float" '
            "with weight_bits=4 (int8 weights under float activations: quantization.quantize_weights_int8)",
        )
    if activations == "float":
        return quantize_weights_int4(mod, group_size, symmetric, weight_method, calibration_data, progress, memo)
    if weight_bits == 4:
        w4a8.check_options(group_size, weight_method, calibration_data)
        calibration_data = list(calibration_data)  # read twice by GPTQ (its layer inputs)
    if calibration_data is None:
        raise NPUError(
            "ERR_INVALID_CONFIG", "quantize: int8 quantization needs calibration_data (batches of model inputs)"
        )
    cal.make_observer(method, percentile)  # a bad method fails now, not after compiling the probe
    # Fold batch norms into convs and pads into conv padding (what the NPU will run), then constant
    # subgraphs (reshaped biases, transposed weights), so every weight is one constant.
    mod = relax.transform.FoldConstant()(rewrite.run(mod))
    g = Graph(mod["main"])
    units, skip = _find_units(g), tuple(skip)
    for u in units:
        entry = None if u.reason else _skip_entry(u, skip)
        if entry is not None:
            u.reason = f"skipped by the user ({entry!r})"
    report = QuantReport(method)
    if state_bits not in (8, 16):
        raise NPUError("ERR_INVALID_CONFIG", f"quantize: state_bits must be 8 or 16, not {state_bits}")
    cells = _cell_states(g, units) if state_bits == 16 else _CellStates()
    wide = cells.wide
    for u in units:
        if u.reason is None and u.out in cells.views:
            u.reason = "a view of a model input that feeds a 16-bit LSTM cell state: stays float"
        elif u.reason is None and u.passthrough and u.inputs[0] in wide:
            u.reason = "a view of a 16-bit LSTM cell state: stays float"  # passthroughs are int8
    _drop_lone_passthroughs(units)
    live = [u for u in units if u.reason is None]
    needed = g.ordered(t for u in live for t in u.inputs + [u.out])
    ranges = cells.share_ranges(
        _share_step_ranges(live, _calibrate(mod, g, needed, calibration_data, method, percentile, progress, report))
    )
    qp = {v: (cal.wide_qparams if v in wide else cal.activation_qparams)(*ranges[v]) for v in needed}
    for u in live:
        bad = [t for t in u.inputs + [u.out] if qp[t] is None]
        if bad:
            lo, hi = ranges[bad[0]]
            u.reason = f"activation range of {bad[0].name} is empty or not finite ([{lo:.4g}, {hi:.4g}])"
    live = [u for u in units if u.reason is None]
    qparams: dict = {v: qp[v] for v in g.ordered(t for u in live for t in u.inputs + [u.out])}
    for u in live:  # in model order, so a chain of passthroughs inherits from its first input
        if u.passthrough:
            qparams[u.out] = qparams[u.inputs[0]]
    weighted = [u for u in live if u.weight is not None]
    if weight_bits == 4:
        w4a8.choose_int4(mod, weighted, group_size, symmetric, weight_method, calibration_data, progress, report, memo)
    for u in weighted:
        if u.w4 is None:
            _quantize_weights(u, qparams[u.inputs[0]][0])
    narrow = {}  # a 16-bit tensor read by int8-only units: its int8 QDQ pair and those readers
    for v in wide & set(qparams):
        qparams[v] = (*qparams[v], "int16")
        readers = [u.members[0] for u in live if v in u.inputs and u.op not in WIDE_OPS]
        if readers:
            narrow[v] = (cal.activation_qparams(*ranges[v]), readers)
    func, dq_names = rebuild(g, qparams, _rewriter(weighted), narrow=narrow)
    producer = {u.out: u.op for u in live}
    for v, (s, z, *_) in qparams.items():
        op = producer.get(v) or ("input" if v in g.params else _op(g.value[v])[6:] or "?")
        lo, hi = ranges[v]
        report.tensors.append(QuantTensor(v.name, dq_names[v], op, lo, hi, s, z, 16 if v in wide else 8))
    report.ops = [(u.name, u.op) for u in live]
    report.skipped = [SkippedOp(u.name, u.op, u.reason) for u in units if u.reason]
    return with_main(mod, func), report


def _calibrate(mod, g, needed, data, method, percentile, progress, report) -> dict:
    """Run the float model once per batch, observing every var in `needed`; {var: (lo, hi)}."""
    if not needed:
        return {}
    ex = tvm.compile(with_main(mod, rebuild(g, probes=needed)[0]), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    observers = [cal.make_observer(method, percentile) for _ in needed]
    for batch in tqdm(data, desc="calibrating", unit="batch", disable=not progress):
        for obs, arr in zip(observers, run_probe(vm, g.params, batch)):
            obs.update(arr)
        report.batches += 1
    if report.batches == 0:
        raise NPUError("ERR_INVALID_CONFIG", "quantize: calibration_data gave no batches")
    return {v: o.range() for v, o in zip(needed, observers)}
