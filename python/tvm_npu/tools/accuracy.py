"""Per-layer accuracy of a quantized model: the SQNR of every quantized tensor against the float model.

    qmod, report = tvm_npu.quantize(mod, batches)
    rows = tvm_npu.layer_sqnr(mod, qmod, report, batches[0])
    print(tvm_npu.format_sqnr_table(rows))

Both models are run once on the same inputs, each through a probe module whose main returns the
tensors `report.tensors` names (the float var and its dequantized counterpart in the QDQ module). The
float model runs on TVM's llvm build (the reference); the QDQ model runs through `build`, by default
`tvm_npu.build`, so what is measured is what the NPU (or the CPU, for what stays there) computes.
A layer whose SQNR drops far below its predecessors' is where the quantization error comes from.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax

from ..ir.graph import Graph, probe_module, run_probe


def sqnr_db(reference, approx) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum(f^2) / sum((f - q)^2))`` in dB.

    Parameters
    ----------
    reference : array_like
        The float tensor ``f``.
    approx : array_like
        Its quantized (dequantized) version ``q``, same shape.

    Returns
    -------
    float
        The SQNR; ``inf`` when the two are equal, ``-inf`` when ``f`` is all zeros and ``q`` is not.
    """
    f = np.asarray(reference, dtype=np.float64)
    q = np.asarray(approx, dtype=np.float64)
    signal, noise = float(np.sum(f * f)), float(np.sum((f - q) ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _default_build(mod: tvm.IRModule):
    from ..build import build  # late: build imports the whole compiler

    return build(mod)


def layer_sqnr(float_mod: tvm.IRModule, qdq_mod: tvm.IRModule, report, inputs, build=None) -> list:
    """The SQNR of every tensor `quantize` gave a QDQ pair, in the model's order.

    Parameters
    ----------
    float_mod : tvm.IRModule
        The float model that was passed to `quantize`.
    qdq_mod : tvm.IRModule
        The QDQ model `quantize` returned.
    report : QuantReport
        Its report: ``report.tensors`` maps each float var to its dequantized var.
    inputs : tuple, list, dict or numpy.ndarray
        One batch of inputs for `main`, in any form `quantize` accepts for a calibration batch.
    build : callable, optional
        ``mod -> relax.Executable`` for the QDQ model; default `tvm_npu.build`
        (e.g. ``lambda m: tvm.compile(m, target="llvm")`` for TVM's CPU build).

    Returns
    -------
    list of (str, str, float)
        ``(name, op, sqnr_db)`` per quantized tensor: the float var's name, the op that produced it
        ("input" for a model input) and the SQNR of its dequantized value.
    """
    tensors = list(report.tensors)
    if not tensors:
        return []
    build = build or _default_build
    f_ex = tvm.compile(probe_module(float_mod, [t.name for t in tensors]), target="llvm")
    q_ex = build(probe_module(qdq_mod, [t.qdq_name for t in tensors]))
    f_vals = run_probe(relax.VirtualMachine(f_ex, tvm.cpu()), Graph(float_mod["main"]).params, inputs)
    q_vals = run_probe(relax.VirtualMachine(q_ex, tvm.cpu()), Graph(qdq_mod["main"]).params, inputs)
    return [(t.name, t.op, sqnr_db(f, q)) for t, f, q in zip(tensors, f_vals, q_vals)]


def format_sqnr_table(rows, threshold_db: float = 20.0) -> str:
    """`layer_sqnr` rows as a text table.

    Parameters
    ----------
    rows : list of (str, str, float)
        From `layer_sqnr`.
    threshold_db : float
        Rows below it are marked with ``<``: the layers to look at (or to `skip`).

    Returns
    -------
    str
        One line per row under a header: tensor, op, SQNR in dB.
    """
    width = max([len("tensor")] + [len(r[0]) for r in rows])
    op_width = max([len("op")] + [len(r[1]) for r in rows])
    lines = [f"{'tensor':<{width}}  {'op':<{op_width}}  SQNR (dB)", "-" * (width + op_width + 13)]
    for name, op, db in rows:
        mark = "  <" if db < threshold_db else ""
        lines.append(f"{name:<{width}}  {op:<{op_width}}  {db:9.2f}{mark}")
    return "\n".join(lines)
