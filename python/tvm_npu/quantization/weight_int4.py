"""Group-wise int4 weight-only quantization (W4A16) of a float model's dense layers: Relax -> Relax.

Decode reads every weight once per token (issue 21): int4 codes with one fp16 scale per group of
`group_size` weights along K cost 0.5 + 2 / group_size bytes per weight, against 1 for int8 and 2 for
fp16, and group-wise scales lose far less than one scale per column. Each ``matmul(x, W)`` whose `W` is a
float32 constant ``[K, N]`` (as weight_only.py finds them) becomes

    matmul(x, permute_dims((float(codes) - float(zero_points)) * scales))    (ir/group_quant.py)

with codes ``[N, K]`` (int8 holding [-8, 7] when symmetric, uint8 holding [0, 15] with a uint4 zero point
per group otherwise) and scales ``[N, K / group_size]``, each rounded to fp16 before the codes are chosen,
so the CPU build and an NPU with fp16 scales compute with the same numbers. The importer writes
MatMulNBits and blocked DequantizeLinear models in the same form.

Two ways to choose the codes:
- "rtn": round to nearest, each group's scale from its own range;
- "gptq": GPTQ (Frantar et al., 2022): the columns of K are quantized in order and each one's rounding
  error is spread over the columns not yet quantized, weighted by the inverse of ``H = X^T X`` over the
  layer's calibration inputs X, so the layer's *output* error is minimized rather than the weights'.
  Needs calibration data; the inputs X come from the float model (one pass for all layers).

The report lists every dense layer with its weight SQNR; `tvm_npu.layer_sqnr(mod, qmod, report, batch)`
gives each layer's output SQNR, as for int8.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..contract.errors import NPUError
from ..ir import graph as rg
from ..ir.group_quant import WEIGHT_PREFIX, group_dequantize, group_parts, npu_group_layout
from ..ir.values import constant_value
from . import awq, awq_plan
from .weight_only import dense_weights

GROUP_SIZES = (32, 64, 128)
METHODS = ("rtn", "gptq", "awq")
MIN_SCALE = 2.0**-14  # the smallest normal fp16: an all-zero group's scale


@dataclass
class WeightLayer:
    """One quantized dense layer: its output var (the same name in both modules) and what it lost."""

    name: str
    qdq_name: str  # = name: what `layer_sqnr` probes in the quantized module
    op: str
    k: int
    n: int
    weight_sqnr_db: float


@dataclass
class WeightQuantReport:
    """What `quantize_weights_int4` did: `tensors` (WeightLayer per dense layer, in model order)."""

    method: str
    group_size: int
    symmetric: bool
    batches: int = 0
    tensors: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (name, reason) of dense layers left float
    notes: list = field(default_factory=list)  # what the calibrated method chose, and why (awq)

    def summary(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        lines = [f"int4 weights, group {self.group_size}, {kind}, {self.method}: {len(self.tensors)} dense layers"]
        lines += [f"  {t.name:<16} K {t.k:<6} N {t.n:<6} weight SQNR {t.weight_sqnr_db:6.2f} dB" for t in self.tensors]
        lines += [f"  float: {name}: {reason}" for name, reason in self.skipped]
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


def _fp16_scales(scales: np.ndarray) -> np.ndarray:
    return np.maximum(scales, MIN_SCALE).astype(np.float16).astype(np.float32)


def group_params(w: np.ndarray, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(scales, zero points) of a group `w` [N, g] per row: symmetric max|w| / 7 around 0, or the
    [min, max] range (widened to hold 0) over 15 steps with a zero point in [0, 15]; scales fp16."""
    if symmetric:
        return _fp16_scales(np.abs(w).max(axis=1) / 7.0), np.zeros(w.shape[0], np.float32)
    lo, hi = np.minimum(w.min(axis=1), 0.0), np.maximum(w.max(axis=1), 0.0)
    scale = _fp16_scales((hi - lo) / 15.0)
    return scale, np.clip(np.round(-lo / scale), 0, 15).astype(np.float32)


def searched_params(w: np.ndarray, symmetric: bool, steps: int = 12, h=None) -> tuple[np.ndarray, np.ndarray]:
    """As `group_params`, with each row's range shrunk by the factor in [0.6, 1] (of `steps`) whose
    round-to-nearest codes give the smallest squared error on the row: clipping a few large weights
    buys a finer step for all the others. With `h` ([g, g], ``X^T X`` of the group's inputs) the error
    is the row's output error over those inputs, ``e h e^T``, rather than the weights'."""
    best_err = np.full(w.shape[0], np.inf)
    best_s, best_z = group_params(w, symmetric)
    for r in np.linspace(1.0, 0.6, steps):
        s, z = group_params(w * r, symmetric)
        e = w - (_codes(w, s, z, symmetric) - z[:, None]) * s[:, None]
        err = np.sum(e * e, axis=1) if h is None else np.sum((e @ h) * e, axis=1)
        better = err < best_err
        best_err[better], best_s[better], best_z[better] = err[better], s[better], z[better]
    return best_s, best_z


def _codes(w: np.ndarray, scale: np.ndarray, zp: np.ndarray, symmetric: bool) -> np.ndarray:
    lo, hi = (-8, 7) if symmetric else (0, 15)
    return np.clip(np.round(w / scale[:, None]) + zp[:, None], lo, hi)


def quantize_rtn(w: np.ndarray, group: int, symmetric: bool, x=None):
    """Round to nearest: (codes [N, K], scales [N, G], zero points [N, G]) of `w` [N, K]; with the
    layer's inputs `x` [samples, K], each group's ranges clipped for the smallest output error on them
    (`searched_params`)."""
    n, k = w.shape
    codes, scales, zps = np.empty((n, k)), np.empty((n, k // group), np.float32), np.empty((n, k // group))
    xd = None if x is None else x.astype(np.float64)
    for j in range(k // group):
        cols = slice(j * group, (j + 1) * group)
        if xd is None:
            scales[:, j], zps[:, j] = group_params(w[:, cols], symmetric)
        else:
            scales[:, j], zps[:, j] = searched_params(w[:, cols], symmetric, h=xd[:, cols].T @ xd[:, cols])
        codes[:, cols] = _codes(w[:, cols], scales[:, j], zps[:, j], symmetric)
    return codes, scales, zps


def quantize_gptq(w: np.ndarray, x: np.ndarray, group: int, symmetric: bool, damp: float = 0.01):
    """GPTQ of `w` [N, K] for inputs `x` [samples, K]: as `quantize_rtn`, codes chosen column by column
    with each column's error compensated in the later columns through the Cholesky factor of H^-1. A group's
    scale is taken when the group starts, from its columns as updated so far."""
    n, k = w.shape
    w = w.astype(np.float64).copy()
    h = x.T.astype(np.float64) @ x.astype(np.float64)
    dead = np.diag(h) == 0  # an input that is always 0: its weights do not matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * np.mean(np.diag(h)) * np.eye(k)
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # upper: H^-1 = U^T U
    codes, scales, zps = np.empty((n, k)), np.empty((n, k // group), np.float32), np.empty((n, k // group))
    for i in range(k):
        j = i // group
        if i % group == 0:
            scales[:, j], zps[:, j] = searched_params(w[:, i : i + group], symmetric)
        q = _codes(w[:, i : i + 1], scales[:, j], zps[:, j], symmetric)[:, 0]
        codes[:, i] = q
        err = (w[:, i] - (q - zps[:, j]) * scales[:, j]) / u[i, i]
        w[:, i:] -= np.outer(err, u[i, i:])
    return codes, scales, zps


@dataclass
class Int4Layer:
    """One dense weight's int4 codes [N, K], fp16-valued scales [N, G] and zero points [N, G] (0 when
    symmetric), and the weight SQNR they keep."""

    codes: np.ndarray
    scales: np.ndarray
    zps: np.ndarray
    group: int
    symmetric: bool
    sqnr_db: float

    @classmethod
    def of(cls, w: np.ndarray, group: int, symmetric: bool, method: str, x=None) -> Int4Layer:
        """The codes of `w` [N, K] by `method`: "gptq" needs the layer's inputs `x` [samples, K]; "awq"
        (`w` already scaled, `x` divided by the scale) is round to nearest with ranges clipped on `x`."""
        if method == "gptq":
            codes, scales, zps = quantize_gptq(w, x, group, symmetric)
        else:
            codes, scales, zps = quantize_rtn(w, group, symmetric, x if method == "awq" else None)
        groups = np.arange(w.shape[1]) // group
        approx = (codes - zps[:, groups]) * scales[:, groups]
        return cls(codes, scales, zps, group, symmetric, _sqnr(w, approx))

    def emit(self, bb, fresh, name: str):
        """The weight [K, N] as ``permute_dims(group_dequantize(codes, scales, zero points))`` through `bb`,
        every binding named after `name` (`fresh` makes each name unique: layer_sqnr probes by name)."""

        def emit(expr):
            return bb.emit(expr, fresh(f"{name}_w4"))

        codes = relax.const(self.codes.astype(np.int8 if self.symmetric else np.uint8))
        zp = None if self.symmetric else relax.const(self.zps.astype(np.uint8))
        k = self.codes.shape[1]
        deq = group_dequantize(codes, relax.const(self.scales), zp, self.group, 1, k, emit=emit)
        return emit(relax.op.permute_dims(deq, [1, 0]))


def _sqnr(w: np.ndarray, approx: np.ndarray) -> float:
    noise = float(np.sum((w - approx) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(w * w)) / noise)


def layer_inputs(mod: tvm.IRModule, xs: list, data, progress: bool, report) -> list:
    """Each dense layer's input rows [samples, K] over the calibration batches (the float model, llvm)."""
    values = awq_plan.probe_batches(mod, xs, data, progress, report)
    return [np.concatenate([a.reshape(-1, a.shape[-1]) for a in v]) for v in values]


def _key(w: np.ndarray) -> tuple:
    """A dense weight's identity across modules of one model (prefill and decode hold the same arrays)."""
    return (w.shape, hashlib.sha1(np.ascontiguousarray(w).tobytes()).hexdigest())


def _dequantizer(group: int, symmetric: bool):
    """``quantize(w [N, K]) -> dequantized w``: plain round to nearest in the scheme (AWQ's search)."""

    def quantize(w):
        codes, scales, zps = quantize_rtn(w, group, symmetric)
        groups = np.arange(w.shape[1]) // group
        return (codes - zps[:, groups]) * scales[:, groups]

    return quantize


_GUARD = ("awq", "kept round to nearest")  # the memo's note that the guard kept round to nearest


def _emit(mod, g, layers: list, keys: list, memo: dict, folds: dict, report):
    """`mod` with each of `layers` as its memoized codes and `folds` applied; `report.tensors` filled."""
    chosen = {}
    report.tensors = []
    for i, d in enumerate(layers):
        layer = memo[keys[i]][0]
        n, k = layer.codes.shape
        report.tensors.append(WeightLayer(d.var.name, d.var.name, "matmul", k, n, layer.sqnr_db))
        chosen[d.var] = (d, layer)
    dropped = {d.weight_var for d in layers if d.weight_var is not None}

    def rewrite(bb, var, value, m, fresh):
        if var in dropped:
            return False
        if var in folds:
            out = value
            for index, s in folds[var]:
                out = awq.scaled(out, index, g, s, m)
            return out
        if var not in chosen:
            return None
        d, layer = chosen[var]
        weight = layer.emit(bb, fresh, var.name)
        return relax.Call(d.call.op, [rg.subst(d.call.args[0], m), weight], d.call.attrs, d.call.ty_args)

    if not chosen:
        return mod
    return rg.with_main(mod, rg.rebuild(g, rewrite=rewrite)[0])


def quantize_weights_int4(
    mod: tvm.IRModule,
    group_size: int = 128,
    symmetric: bool = True,
    method: str = "rtn",
    calibration_data=None,
    progress: bool = True,
    memo: dict | None = None,
):
    """Group-wise int4 weight-only quantization of `mod`'s dense layers (see the module docstring).

    Parameters
    ----------
    mod : tvm.IRModule
        A float model with its weights as constants (e.g. from `tvm_npu.from_onnx`).
    group_size : int
        Weights per scale along K: 32, 64 or 128 (the NPU's group sizes). A layer whose K it does not
        divide stays float (in `report.skipped`, with the reason).
    symmetric : bool
        int4 codes around 0 (True) or uint4 codes with a zero point per group.
    method : str
        "rtn" (round to nearest), "gptq" or "awq" (activation-aware scales folded into the op before,
        quantization/awq.py); the last two need `calibration_data`.
    calibration_data : iterable, optional
        Batches of inputs for `main`, in any form `tvm_npu.quantize` accepts.
    memo : dict, optional
        Shared by the calls that quantize modules of one model (an LLM's prefill and decode steps): a
        weight met again takes the codes (and scales) chosen the first time, without calibrating again, so
        the steps hold the same codes and share one copy of them.

    Returns
    -------
    (tvm.IRModule, WeightQuantReport)
    """
    if group_size not in GROUP_SIZES:
        raise NPUError(
            "ERR_INVALID_CONFIG", f"quantize: group_size {group_size}; the NPU's group sizes are {GROUP_SIZES}"
        )
    if method not in METHODS:
        raise NPUError("ERR_INVALID_CONFIG", f"quantize: weight method {method!r}; use one of {METHODS}")
    memo = {} if memo is None else memo
    g = rg.Graph(mod["main"])
    report = WeightQuantReport(method, group_size, symmetric)
    layers = []
    for d in dense_weights(g):
        if d.weight.shape[0] % group_size:
            reason = f"K {d.weight.shape[0]} is not a multiple of group_size {group_size}: stays float"
            report.skipped.append((d.var.name, reason))
        else:
            layers.append(d)
    keys = [_key(d.weight) for d in layers]
    calibrate = method != "rtn" and any(k not in memo for k in keys)
    # without a memo (the first or only call), a calibrated method always needs its data, layers or not
    if method != "rtn" and calibration_data is None and (calibrate or not memo):
        raise NPUError(
            "ERR_INVALID_CONFIG", f"quantize: weight method {method!r} needs calibration_data (batches of model inputs)"
        )
    data = list(calibration_data) if calibrate else []  # AWQ reads them twice: the search, the guard
    plan, inputs = None, []
    if calibrate and method == "awq":
        plan = awq_plan.plan(mod, g, layers, data, group_size, _dequantizer(group_size, symmetric), progress, report)
        inputs = plan.inputs
    elif calibrate:
        inputs = layer_inputs(mod, [d.x for d in layers], data, progress, report)
    for i, d in enumerate(layers):
        if keys[i] not in memo:
            w = (d.weight if plan is None else plan.weight(d)).T.astype(np.float32)  # [N, K]
            s = None if plan is None else plan.rows.get(d.var)
            memo[keys[i]] = (Int4Layer.of(w, group_size, symmetric, method, inputs[i] if inputs else None), s)
    if plan is not None:
        folds = plan.folds
    else:  # memoized activation-aware layers: fold their 1 / s again
        folds = awq_plan.refolds(g, layers, [memo[k][1] for k in keys]) if method == "awq" else {}
    qmod = _emit(mod, g, layers, keys, memo, folds, report)
    if plan is not None and layers:  # the guard: never worse than round to nearest on the calibration data
        rtn = {
            k: (Int4Layer.of(d.weight.T.astype(np.float32), group_size, symmetric, "rtn"), None)
            for k, d in zip(keys, layers)
        }
        rtn_mod = _emit(mod, g, layers, keys, rtn, {}, WeightQuantReport("rtn", group_size, symmetric))
        kept, line = awq_plan.guard(qmod, rtn_mod, plan.batches, plan.outputs)
        report.notes.append(line)
        if not kept:
            memo.update(rtn)
            memo[_GUARD] = line
            qmod = _emit(mod, g, layers, keys, memo, {}, report)
    elif method == "awq" and _GUARD in memo:
        report.notes.append(memo[_GUARD])
    return qmod, report


# -- what each dense layer's weight is (lm.meta["weight_formats"], the build report) ------------------------

_SOURCES = {"MatMulNBits": "from MatMulNBits", "DequantizeLinear": "from DequantizeLinear"}


def _own_block(scale: np.ndarray, zero: np.ndarray) -> int:
    """The model's own block along K of per-element `scale` / `zero` [K, N]: the shortest run of one value."""
    change = np.flatnonzero(np.any((np.diff(scale, axis=0) != 0) | (np.diff(zero, axis=0) != 0), axis=1)) + 1
    edges = np.concatenate([[0], change, [scale.shape[0]]])
    return int(np.diff(edges).min())


def _int4_format(parts, perms: list, source: str) -> tuple[str, int]:
    """(the format of a group-wise weight, the bytes it costs beyond its own codes: 0 when the NPU keeps
    them)."""
    codes, zero, scale = parts
    for axes in reversed(perms):  # to x @ w's [K, N]
        order = None if axes is None else [int(a) for a in axes]
        codes, zero, scale = codes.transpose(order), zero.transpose(order), scale.transpose(order)
    symmetric = (not zero.any() and codes.min() >= -8) or (np.all(zero == 8) and codes.min() >= 0)
    kind = "sym" if symmetric else "asym"
    layout = npu_group_layout(codes, zero, scale, [])
    if isinstance(layout, dict):
        return f"int4 g{layout['group']} {kind}, {source}", 0
    block, lost = expanded_bytes(codes, zero, scale)
    return f"fp16 (expanded from int4 g{block} {kind}, {source}: not kept ({layout}), +{lost} bytes)", lost


def expanded_bytes(codes, zero, scale) -> tuple[int, int]:
    """(the model's block, the bytes an fp16 weight [K, N] costs beyond its int4 codes, fp16 scales and,
    unless every zero point is 0 or 8, uint4 zero points) of a group-wise weight's arrays [K, N]."""
    k, n = codes.shape
    block = _own_block(scale, zero)
    symmetric = (not zero.any()) or bool(np.all(zero == 8))
    own = k * n // 2 + -(-k // block) * n * (2 if symmetric else 2.5)
    return block, int(2 * k * n - own)


def weight_formats(mod: tvm.IRModule, before: dict | None = None) -> dict:
    """Each dense layer's weight format in `mod`'s main: {layer: format}, e.g. "int4 g32 sym, from
    MatMulNBits", "int8 per-column, quantized by tvm_npu", "fp16", "fp16 (expanded from int4 g16 ...: not
    kept (reason), +N bytes)". An imported group-wise weight's layer is named after its ONNX node (the
    importer names its binding, frontend/blockwise.py); the others after the matmul's var. `before`: the
    formats of the module `mod` was quantized from (the quantizers keep the dense layers and their order),
    whose "fp16" layers `mod` has quantized say "quantized by tvm_npu". What a layer the compiler puts on
    the CPU computes is float32 whatever its format says."""
    g = rg.Graph(mod["main"])

    def resolve(e):
        return g.value.get(e, e) if isinstance(e, relax.Var) else e

    out = {}
    for var, e in g.bindings:
        if rg.op_name(e) != "relax.matmul":
            continue
        w, perms, named = e.args[1], [], None
        while True:
            if isinstance(w, relax.Var) and w.name.startswith(WEIGHT_PREFIX):
                named = w.name
            w = resolve(w)
            if rg.op_name(w) != "relax.permute_dims":
                break
            perms.append(w.attrs.axes)
            w = w.args[0]
        parts = group_parts(w, resolve)
        if parts is not None:
            op, _, node = (named or "").removeprefix(WEIGHT_PREFIX).partition("__")
            out[node or var.name] = _int4_format(parts, perms, _SOURCES.get(op, "imported"))[0]
        elif rg.op_name(w) == "relax.dequantize" and constant_value(resolve(w.args[0])) is not None:
            scales = constant_value(resolve(w.args[1]))
            per = "per-tensor" if scales is not None and scales.size == 1 else "per-column"
            out[var.name] = f"{constant_value(resolve(w.args[0])).dtype} {per}, imported"
        elif constant_value(w) is not None:
            out[var.name] = "fp16"
    if before is not None and len(before) == len(out):
        for (layer, fmt), was in zip(list(out.items()), before.values()):
            if was == "fp16" and fmt != "fp16":
                out[layer] = fmt.replace(", imported", ", quantized by tvm_npu")
    return out
