"""The activation-aware scales of a model (awq.py) chosen from its calibration batches, and the guard that
keeps round to nearest when they do not help (weight_int4.quantize_weights_int4, method "awq").

One calibration run of the float model (TVM llvm) probes every dense layer's input, the inputs of the
blocks the scales are measured on (awq_block.py) and the model's first output. The scales are searched
input by input in model order with plain round to nearest as the quantizer, as the method does; the
group ranges are clipped afterwards, on each layer's scaled inputs (weight_int4.quantize_rtn).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import tvm
from tqdm import tqdm
from tvm import relax

from ..contract.errors import NPUError
from ..ir import graph as rg
from . import awq
from .awq_block import Block, block_output

HEAD = "the model's last dense layer (an LM head: no block after it; its output error weighs every logit alike)"


@dataclass
class Plan:
    """Each dense layer's weight [K, N] scaled as ``W * rows[:, None] / cols[None, :]`` before its codes
    (rows: its own input's s; cols: the s of the layer reading its output through a product), the folds of
    1 / s into constants ({binding var: [(argument index, s)]}), and each layer's calibration inputs
    [samples, K] divided by its s (what its group ranges are clipped on)."""

    rows: dict = field(default_factory=dict)
    cols: dict = field(default_factory=dict)
    folds: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # the float model's first output on `batches` (the guard's)
    batches: list = field(default_factory=list)

    def weight(self, d) -> np.ndarray:
        """Layer `d`'s (weight_only.DenseWeight) weight as scaled, [K, N] float32."""
        w = d.weight.astype(np.float32)
        if d.var in self.rows:
            w = w * self.rows[d.var][:, None]
        if d.var in self.cols:
            w = w / self.cols[d.var][None, :]
        return w.astype(np.float32)


def probe_batches(mod: tvm.IRModule, xs: list, data, progress: bool, report) -> list:
    """Each var of `xs`' value on each calibration batch: [[batch arrays] per var] (the float model, llvm)."""
    g = rg.Graph(mod["main"])
    ex = tvm.compile(rg.with_main(mod, rg.rebuild(g, probes=xs)[0]), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out: list = [[] for _ in xs]
    for batch in tqdm(data, desc="calibrating", unit="batch", disable=not progress):
        for acc, arr in zip(out, rg.run_probe(vm, g.params, batch)):
            acc.append(arr)
        report.batches += 1
    if report.batches == 0:
        raise NPUError("ERR_INVALID_CONFIG", "quantize: calibration_data gave no batches")
    return out


def first_output(g: rg.Graph):
    """The var of `g`'s first output (the logits of an LLM step), or None when it is not a var."""
    body = g.func.body.body
    while True:
        if isinstance(body, relax.Tuple):
            body = body.fields[0]
        elif isinstance(body, relax.Var) and isinstance(g.value.get(body), relax.Tuple):
            body = g.value[body]
        else:
            return body if isinstance(body, relax.Var) else None


def _heads(g: rg.Graph, layers: list, dense: set) -> set:
    """The layers whose outputs reach no other dense layer."""
    out = set()
    for d in layers:
        seen, stack, hit = set(), [d.var], False
        while stack and not hit:
            for u in g.uses.get(stack.pop(), []):
                if u is not None and u not in seen:
                    seen.add(u)
                    hit = hit or u in dense
                    stack.append(u)
        if not hit:
            out.add(d.var)
    return out


def plan(mod, g: rg.Graph, layers: list, data: list, group: int, quantize, progress: bool, report) -> Plan:
    """The scales of `layers` (weight_only.DenseWeight, the layers to quantize) from the batches `data`;
    `quantize(w [N, K]) -> dequantized w` is plain round to nearest in the model's scheme, of group size
    `group`."""
    dense = {d.var: d for d in layers}
    heads = _heads(g, layers, set(dense))
    by_input: dict = {}
    for i, d in enumerate(layers):
        by_input.setdefault(d.x, []).append(i)
    searches = []  # (member indices, fold targets, Block or None)
    for x, idx in by_input.items():
        members = [layers[i] for i in idx]
        targets, why = awq.fold_target(g, x, [d.var for d in members], members[0].weight.shape[0], dense)
        why = why or (HEAD if all(d.var in heads for d in members) else None)
        if why:
            report.skipped += [(d.var.name, f"awq: s = 1 (round to nearest): {why}") for d in members]
            continue
        out = block_output(g, members, set(dense)) if len(members) > 1 else None
        searches.append((idx, targets, Block(mod, g, members, out) if out is not None else None))
    xs = list(dict.fromkeys(d.x for d in layers))
    extra = list(dict.fromkeys(v for _, _, b in searches if b is not None for v in b.inputs))
    last = first_output(g)
    probes = xs + extra + ([last] if last is not None else [])
    values = dict(zip(probes, probe_batches(mod, probes, data, progress, report)))
    used, rows = 0, 0
    while used < len(data) and rows < awq._SAMPLES:  # the batches the blocks and the guard read
        rows += int(np.prod(values[xs[0]][used].shape[:-1]))
        used += 1
    result = Plan(outputs=values.get(last, [])[:used], batches=data[:used])
    flat = {x: np.concatenate([a.reshape(-1, a.shape[-1]) for a in values[x]]) for x in xs}
    for idx, targets, block in tqdm(searches, desc="awq scales", unit="input", disable=not progress):
        members = [layers[i] for i in idx]
        x = members[0].x
        if block is None:
            loss = awq.own_output_loss([d.weight for d in members], flat[x], quantize)
        else:
            for b in range(used):
                block.feed(values[x][b], [values[v][b] for v in block.inputs])
            loss = block.loss(quantize)
        wm = awq.weight_means([d.weight for d in members], group)
        s, alpha, err, plain = awq.search(awq.channel_means(flat[x]), wm, loss)
        where = "its own output" if block is None else f"the output of {block.out.name}"
        chose = "s = 1 (no scale helps)" if alpha is None else f"alpha {alpha:.2f}"
        report.notes.append(
            f"awq: {', '.join(d.var.name for d in members)}: {chose} on {where} "
            f"(MSE {err:.3g}, round to nearest {plain:.3g})"
        )
        if alpha is None:
            continue
        for d in members:
            result.rows[d.var] = s
        for var, index in targets:
            if index is None:
                result.cols[var] = s
            else:
                result.folds.setdefault(var, []).append((index, s))
    result.inputs = [flat[d.x] / result.rows[d.var][None, :] if d.var in result.rows else flat[d.x] for d in layers]
    return result


def refolds(g: rg.Graph, layers: list, scales: list) -> dict:
    """The folds of 1 / s into `g`'s constants for `layers` whose codes were chosen with the scales
    `scales` (s [K] or None each; a memo's): a fold into a dense layer's output columns is in that layer's
    codes already."""
    dense, folds = {d.var: d for d in layers}, {}
    for d, s in zip(layers, scales):
        if s is None:
            continue
        readers = [e.var for e in layers if e.x.same_as(d.x)]
        for var, index in awq.fold_target(g, d.x, readers, d.weight.shape[0], dense)[0]:
            if index is not None and all(index != j for j, _ in folds.get(var, [])):
                folds.setdefault(var, []).append((index, s))
    return folds


def output_error(mod: tvm.IRModule, data: list, want: list) -> float:
    """The mean squared error of `mod`'s first output against `want` (one array per batch), TVM llvm."""
    g = rg.Graph(mod["main"])
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    err = count = 0.0
    for batch, ref in zip(data, want):
        out = vm["main"](*rg.as_args(batch, g.params))
        while not hasattr(out, "numpy"):
            out = out[0]
        err += float(np.sum((out.numpy().astype(np.float64) - ref) ** 2))
        count += ref.size
    return err / max(count, 1.0)


def guard(awq_mod, rtn_mod, data: list, want: list) -> tuple[bool, str]:
    """(whether `awq_mod`'s first output is closer to the float model's, `want`, than `rtn_mod`'s on the
    calibration batches `data`, the report line saying so); round to nearest kept is also warned."""
    if not want:
        return True, "awq: no model output to check against round to nearest"
    e_awq, e_rtn = output_error(awq_mod, data, want), output_error(rtn_mod, data, want)  # the search's batches
    if e_awq < e_rtn:
        return True, f"awq: output MSE on the calibration data {e_awq:.4g} (round to nearest {e_rtn:.4g})"
    why = (
        f"awq: kept round to nearest for the whole model: on the calibration data its output MSE "
        f"{e_awq:.4g} is not below round to nearest's {e_rtn:.4g}"
    )
    warnings.warn(why, stacklevel=3)
    return False, why
