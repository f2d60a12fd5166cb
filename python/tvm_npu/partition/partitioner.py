"""Stage 3 — partition: split the NPU-supported parts of a Relax module into NPU functions.

FuseOpsByPattern groups each supported op chain into a composite ("npu.conv2d_bias_relu", ...) and
MergeCompositeFunctions merges neighbouring composites into one function per NPU region, marked
Codegen="npu"; everything else stays in `main` for TVM's CPU pipeline. regions.py then holds each
region to the limits of one NPU task (too small: back to the CPU; too many tensors: split). Every
rejection a constraint makes is collected, so the report can say why each op stayed on the CPU.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .. import rewrite
from ..contract.config import NPUConfig, get_config
from ..ir import graph as relax_graph
from . import patterns, regions
from .checks import PartitionRun
from .constraints import ModelIO


def duplicate_dequantize(mod: tvm.IRModule) -> tvm.IRModule:
    """Give every consumer of a shared dequantize its own copy.

    In QDQ models one dequantize often feeds two ops (a residual: the block's input feeds both the next
    conv and the add). A binding can join only one composite, so without copies the second consumer
    loses its int8 input and falls back to float. Copies of a dequantize are free: it is folded into
    the int8 op that reads it.
    """
    g = relax_graph.Graph(mod["main"])
    shared = {v for v, e in g.bindings if relax_graph.op_name(e) == "relax.dequantize" and len(g.uses.get(v, [])) > 1}
    if not shared:
        return mod

    def rewrite(bb, var, value, m, fresh):
        if var in shared and None not in g.uses[var]:
            return False  # every consumer gets its own copy below
        args = [u for u in dict.fromkeys(relax_graph.free_vars(value)) if u in shared]
        if not args:
            return None
        local = dict(m)
        for u in args:
            local[u] = bb.emit(relax_graph.subst(g.value[u], m), name_hint=fresh(u.name))
        return relax_graph.subst(value, local)

    return relax_graph.with_main(mod, relax_graph.rebuild(g, rewrite=rewrite)[0])


def model_io(func: relax.Function) -> ModelIO | None:
    """`main`'s inputs and outputs, for the checks of which quantizes and dequantizes the runtime may
    stage (format 1.3).

    Parameters
    ----------
    func : relax.Function
        The model's `main`, after `prepare`.

    Returns
    -------
    ModelIO or None
        Its parameters read by exactly one binding, and the vars only returned; None when `main` is
        not plain dataflow (no quantized staging then).
    """
    try:
        g = relax_graph.Graph(func)
    except ValueError:
        return None

    def only_output(v) -> bool:
        uses = g.uses.get(v, [])
        return bool(uses) and all(u is None or isinstance(g.value[u], relax.Tuple) and only_output(u) for u in uses)

    inputs = {p for p in g.params if len(g.uses.get(p, [])) == 1 and g.uses[p][0] is not None}
    outputs = {v for v, _ in g.bindings if only_output(v)}
    return ModelIO(frozenset(inputs), frozenset(outputs))


def prepare(mod: tvm.IRModule) -> tvm.IRModule:
    """Inline constant bindings, so a weight is a Constant inside its composite instead of a run-time
    argument of the NPU function; fold batch norms and zero pads into the convolutions next to them
    (rewrite.py); and un-share dequantize nodes (see duplicate_dequantize).

    No FoldConstant here: it would fold dequantize(int8 weights) into float constants and hide the
    int8 weights from the QDQ patterns; the patterns accept constant expressions instead
    (ir.values.eval_const folds them at compile time).

    Dead bindings go first: a dead op matched into an NPU region would leave a region function that
    main never calls once a later rebuild of main drops the dead call, and TVM's VM lowering fails on
    the composite functions nested in it."""
    mod = relax.transform.DeadCodeElimination()(mod)
    mod = rewrite.run(relax.transform.CanonicalizeBindings()(mod))
    try:
        return duplicate_dequantize(mod)
    except ValueError:  # main is not plain dataflow (e.g. control flow): partition it as it is
        return mod


def partition_for_npu(
    mod: tvm.IRModule, config: NPUConfig | str | None = None, rejections: list | None = None
) -> tvm.IRModule:
    """Partition `mod` for the NPU.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module with static or dynamic shapes; unsupported parts stay on the CPU.
    config : NPUConfig or str, optional
        The NPU whose limits the constraints check (default "npu-ref").
    rejections : list, optional
        When given, receives a `constraints.Rejection` for every match a constraint refused.

    Returns
    -------
    tvm.IRModule
        `main` calling one function per NPU region (attribute Codegen="npu").
    """
    cfg = get_config(config)
    log = rejections if rejections is not None else []
    mod = prepare(mod)
    run = PartitionRun(cfg, log, model_io(mod["main"]))
    # TVM 0.27's MergeCompositeFunctions refuses a match_cast binding (TypeError), which its ONNX
    # frontend emits for a shape computed at run time (Expand to a Shape, Reshape with allowzero):
    # there each composite becomes an NPU function of its own, unmerged.
    merge = not _has_match_cast(mod["main"])
    mod = relax.transform.FuseOpsByPattern(patterns.bind(run), bind_constants=True, annotate_codegen=not merge)(mod)
    if merge:
        mod = relax.transform.MergeCompositeFunctions()(mod)
    return regions.apply(mod, cfg, log)  # task limits: minimum size, max_tensors


def _has_match_cast(func: relax.Function) -> bool:
    body = func.body
    return isinstance(body, relax.SeqExpr) and any(
        isinstance(b, relax.MatchCast) for block in body.blocks for b in block.bindings
    )
