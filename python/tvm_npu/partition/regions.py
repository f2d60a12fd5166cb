"""Stage 3b — region limits: the NPU regions MergeCompositeFunctions made, held to the limits of a task.

- A region too small to pay for its boundary (constraint_region_size) goes back to the CPU: its
  composites are inlined into `main`, and every op of it is reported with NPU_E_REGION_TOO_SMALL.
- A region whose inputs plus outputs exceed `max_tensors` (the tensor table of one command stream,
  docs/npu.md section 1), or in which two ops want one 4-D tensor stored in two layouts (layouts.py: a
  conv's NCHW map read by a softmax over its last axis), is cut into several regions, each a run of its
  ops in order, so every cut only reads what earlier ones wrote; ERR_TASK_TOO_COMPLEX only when a single
  op cannot fit. The
  size check runs before the cut and not again: the cuts of a large region pass data to each other.

Both run after MergeCompositeFunctions and before RunCodegen (partition.partition_for_npu).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from ..contract.config import NPUConfig
from ..contract.errors import NPUError
from ..ir import graph as relax_graph
from ..ir.values import static_shape
from .constraints import Rejection, reason_code, reason_text
from .layouts import Layouts
from .patterns import IO_COMPOSITES, QUANTIZE_INPUTS


def constraint_region_size(compute_cycles: int, boundary_cycles: int):
    """NPU_E_REGION_TOO_SMALL: an NPU region of vector ops only (elementwise ops, activations, pooling,
    softmax, norms; no convolution or dense layer) next to CPU ops must compute at least as long as its
    boundary costs: its cycles (vector steps / lanes + op_overhead per op) must be at least one DMA per
    region input and output (dma_latency + device bytes / ddr_bytes_per_cycle); e.g. a lone add between
    CPU ops stays there. A region that is the whole model (apart from an int8 model's quantize and
    dequantize at its edges) is kept."""
    if compute_cycles >= boundary_cycles:
        return None
    return f"{compute_cycles} compute cycles < {boundary_cycles} boundary cycles"


def constraint_io_only(staging_only: bool):
    """NPU_E_QUANT_IO: a model input's quantize or a model output's dequantize runs on the NPU only as
    part of a region that computes something (the runtime converts the region's input or output as it
    stages it); next to CPU ops only, it stays on the CPU."""
    return "no NPU op reads or writes its tensor" if staging_only else None


REGION_CONSTRAINTS = [constraint_region_size, constraint_io_only]


def _staging_only(func: relax.Function) -> bool:
    """Whether every composite of a region is a model input's quantize or output's dequantize."""
    calls, defs = _calls(func)
    return all(str(defs[c].value.attrs["Composite"]) in IO_COMPOSITES for _, c, _ in calls)


def _npu_functions(mod: tvm.IRModule) -> dict:
    return {
        gv: f
        for gv, f in mod.functions.items()
        if isinstance(f, relax.Function) and f.attrs is not None and f.attrs.get("Codegen") == "npu"
    }


def _calls(func: relax.Function) -> tuple[list, dict]:
    """(var, composite var, args) of every composite call of a region, in order; composite defs."""
    defs, calls = {}, []
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Function):
                defs[b.var] = b
            else:
                calls.append((b.var, b.value.op, list(b.value.args)))
    return calls, defs


# Ops of a composite that move no data on the NPU (views, in-place joins, the QDQ around an int8 op).
NO_DATA = (
    "relax.reshape",
    "relax.strided_slice",
    "relax.concat",
    "relax.permute_dims",
    "relax.quantize",
    "relax.dequantize",
)


def _elems(expr) -> int:
    return math.prod(static_shape(expr) or (0,))


def _device_bytes(var) -> int:
    """Bytes of a region input or output on the device: int8 and int16 stay as they are, float32 becomes
    fp16."""
    tys = var.ty.fields if isinstance(var.ty, relax.TupleType) else [var.ty]
    return sum(math.prod(int(d) for d in t.shape) * (1 if str(t.dtype) == "int8" else 2) for t in tys)  # fp16, int16: 2


def _device_tensors(func: relax.Function) -> dict:
    """Region inputs / outputs staged with quantization -> the integer tensor the device holds for them."""
    calls, defs = _calls(func)
    device = {}
    for var, comp_var, args in calls:
        kind = str(defs[comp_var].value.attrs["Composite"])
        if kind in QUANTIZE_INPUTS:
            device[args[0]] = var  # the float32 input -> the tensor its quantize makes
        elif kind in IO_COMPOSITES:
            device[var] = args[0]  # the float32 output -> the tensor it dequantizes
    return device


def compute_cycles(cfg: NPUConfig, func: relax.Function) -> int | None:
    """A region's compute in the cycle model's terms (docs/npu.md section 5), from the Relax shapes;
    None when it has a convolution or dense layer: those always stay on the NPU (the MAC array is what
    the NPU is for, and such a layer costs the CPU far more than its boundary costs the NPU)."""
    total = 0
    calls, defs = _calls(func)
    for _, comp_var, _ in calls:
        comp = defs[comp_var].value
        int8 = str(comp.attrs["Composite"]).startswith("npu.q")
        # 2-byte elements (fp16, or an int16 ELTWISE operand) go through half as many lanes.
        wide = any(str(getattr(b.var.ty, "dtype", "")) == "int16" for b in comp.body.blocks[0].bindings)
        lanes = cfg.vector_lanes if int8 and not wide else cfg.vector_lanes // 2
        if str(comp.attrs["Composite"]) == "npu.rope":  # one ROPE: two steps per element, its ops are one
            total += cfg.op_overhead + math.ceil(2 * _elems(comp.body.body) / lanes)
            continue
        for b in comp.body.blocks[0].bindings:
            name = relax_graph.op_name(b.value)
            if name in ("relax.nn.conv2d", "relax.matmul"):
                return None
            if name in NO_DATA or name == "":
                continue
            # One vector step per output element (docs/npu.md section 5): per window tap for pooling,
            # over the input for a mean, three passes for a softmax or a layer norm, two for an rms norm.
            steps = _elems(b.value.args[0]) if name == "relax.mean" else _elems(b.value)
            if "pool2d" in name:
                steps *= math.prod(int(k) for k in b.value.attrs.pool_size)
            steps *= {"relax.nn.softmax": 3, "relax.nn.layer_norm": 3, "relax.nn.rms_norm": 2}.get(name, 1)
            total += cfg.op_overhead + math.ceil(steps / lanes)
    return total


def boundary_cycles(cfg: NPUConfig, func: relax.Function) -> int:
    body = func.body.body
    outs = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    device = _device_tensors(func)
    return sum(
        cfg.dma_latency + math.ceil(_device_bytes(device.get(v, v)) / cfg.ddr_bytes_per_cycle)
        for v in list(func.params) + outs
    )


def inline_region(bb, func, args, fresh, rejections, detail, constraint=constraint_region_size):
    """Emit the ops of `func`'s composites into `bb` (each recorded as a Rejection with `constraint`'s
    reason and `detail`), as they were before the patterns matched; returns the region's result."""
    m = dict(zip(func.params, args))
    calls, defs = _calls(func)
    for var, comp_var, cargs in calls:
        comp = defs[comp_var].value
        inner = dict(zip(comp.params, [relax_graph.subst(a, m) for a in cargs]))
        for b in comp.body.blocks[0].bindings:
            inner[b.var] = bb.emit(relax_graph.subst(b.value, inner), name_hint=fresh(var.name))
            rejections.append(
                Rejection(
                    inner[b.var].name,
                    relax_graph.op_name(b.value),
                    "region",
                    reason_code(constraint),
                    reason_text(constraint),
                    detail,
                )
            )
        m[var] = inner[comp.body.body]
    return relax_graph.subst(func.body.body, m)


def _chunks(
    calls: list,
    result_vars: set,
    limit: int,
    symbol: str,
    staged_in: set = frozenset(),
    staged_out: set = frozenset(),
    defs: dict | None = None,
) -> list:
    """Cut the calls into runs [s, e) in order, each with at most `limit` inputs plus outputs and (given the
    composite `defs`) one layout for each of its tensors (layouts.Layouts). A model
    input's quantize stays with the calls after it and a model output's dequantize with those before it
    (`staged_in`, `staged_out`: their vars): staging converts a task's own input or output only."""
    where = {var: i for i, (var, _, _) in enumerate(calls)}
    users: dict = {}
    for i, (_, _, args) in enumerate(calls):
        for a in relax_graph.free_vars(relax.Tuple(args)):
            users.setdefault(a, set()).add(i)

    def tensors(s, e):
        ins = {
            a
            for _, _, args in calls[s:e]
            for a in relax_graph.free_vars(relax.Tuple(args))
            if not s <= where.get(a, -1) < e
        }
        outs = [v for v, _, _ in calls[s:e] if v in result_vars or any(not s <= u < e for u in users.get(v, ()))]
        return len(ins) + len(outs)

    def fits(s, e) -> bool:
        if tensors(s, e) > limit:
            return False
        return defs is None or Layouts([(v, defs[c].value, args) for v, c, args in calls[s:e]]).conflict is None

    cuts, s = [], 0
    while s < len(calls):
        if tensors(s, s + 1) > limit:
            raise NPUError(
                "ERR_TASK_TOO_COMPLEX",
                f"{relax_graph.brief(symbol)}: op {calls[s][0].name} alone needs {tensors(s, s + 1)} tensors; the "
                f"NPU takes {limit} per task",
            )
        e = s + 1
        while e < len(calls) and fits(s, e + 1):  # greedy: the longest run that fits
            e += 1
        while e < len(calls) and calls[e][0] in staged_out and fits(s, e + 1):
            e += 1  # it trades the integer output for the float one (unless that is read later too)
        while e - 1 > s and calls[e - 1][0] in staged_in:
            e -= 1
        cuts.append((s, e))
        s = e
    return cuts


def _staging_beside_its_op(calls: list, staged_in: set, staged_out: set) -> list:
    """`calls` with each model input's quantize moved just before the first call that reads it, and each
    model output's dequantize just after the call that makes its input, so a cut between tasks does not
    part them (neither depends on anything else of the region)."""
    pending_in = {var: call for call in calls if (var := call[0]) in staged_in}
    outs_of: dict = {}
    for call in calls:
        if call[0] in staged_out:
            outs_of.setdefault(call[2][0], []).append(call)
    order = []
    for call in calls:
        if call[0] in staged_in or call[0] in staged_out:
            continue
        for a in relax_graph.free_vars(relax.Tuple(call[2])):
            if a in pending_in:
                order.append(pending_in.pop(a))
        order.append(call)
        order += outs_of.pop(call[0], [])
    # Left over: staging no op of the region reads or makes (not formed by the partitioner).
    return list(pending_in.values()) + order + [c for cs in outs_of.values() for c in cs]


def _split(gv, func, limit: int) -> list:
    """New region functions for `func`, each within `limit`: [(gv, func, input vars, output vars)]."""
    calls, defs = _calls(func)
    body = func.body.body
    result = list(body.fields) if isinstance(body, relax.Tuple) else [body]
    parts = []
    kinds = {var: str(defs[c].value.attrs["Composite"]) for var, c, _ in calls}
    staged_in = {v for v, k in kinds.items() if k in QUANTIZE_INPUTS}
    staged_out = {v for v, k in kinds.items() if k in IO_COMPOSITES and k not in QUANTIZE_INPUTS}
    calls = _staging_beside_its_op(calls, staged_in, staged_out)
    for k, (s, e) in enumerate(_chunks(calls, set(result), limit, gv.name_hint, staged_in, staged_out, defs)):
        run = calls[s:e]
        defined = {v for v, _, _ in run}
        ins = list(
            dict.fromkeys(a for _, _, args in run for a in relax_graph.free_vars(relax.Tuple(args)) if a not in defined)
        )
        later = {a for _, _, args in calls[e:] for a in relax_graph.free_vars(relax.Tuple(args))}
        outs = [v for v, _, _ in run if v in later or v in result]
        params = [relax.Var(f"{v.name}_in", v.ty) for v in ins]
        m = dict(zip(ins, params))
        bindings = []
        for var, comp_var, args in run:
            bindings += [
                defs[comp_var],
                relax.VarBinding(var, relax.Call(comp_var, [relax_graph.subst(a, m) for a in args])),
            ]
        out = outs[0] if len(outs) == 1 else relax.Tuple(outs)
        new = relax.Function(
            params,
            relax.SeqExpr([relax.BindingBlock(bindings)], out),
            out.ty if len(outs) == 1 else relax.TupleType([o.ty for o in outs]),
            attrs=func.attrs,
        )
        name = f"{gv.name_hint}_part{k}"
        new = relax.BlockBuilder().normalize(new.with_attr("global_symbol", name))
        part = relax.GlobalVar(name)
        relax.expr._update_type(part, new.ty)  # calls to it in main are normalized against this type
        parts.append((part, new, ins, outs))
    return parts


def _mixed_layouts(func: relax.Function) -> bool:
    """Whether two ops of a region want one of its tensors in two layouts (cut then, see _chunks)."""
    calls, defs = _calls(func)
    return Layouts([(v, defs[c].value, args) for v, c, args in calls]).conflict is not None


def apply(mod: tvm.IRModule, cfg: NPUConfig, rejections: list) -> tvm.IRModule:
    """Hold every NPU region of a partitioned module to the task limits (see the module docstring)."""
    regions = _npu_functions(mod)
    try:
        main = relax_graph.Graph(mod["main"])
    except ValueError:  # main is not plain dataflow (partition.prepare left it as it is): plan() still
        return mod  # refuses an oversized region with ERR_TASK_TOO_COMPLEX
    # Nothing on the CPU to fold a small region into: every op is a region call, or a quantize /
    # dequantize of a model input, a constant or a model output (an int8 model's boundary, not CPU work).
    params = set(mod["main"].params)
    body = mod["main"].body.body
    outputs = set(body.fields) if isinstance(body, relax.Tuple) else {body}

    def boundary(var, e) -> bool:
        name = relax_graph.op_name(e)
        qdq = name in ("relax.quantize", "relax.dequantize")
        return (
            name == ""
            or isinstance(e, relax.Call)
            and e.op in regions
            or qdq
            and (e.args[0] in params or isinstance(e.args[0], tvm.ir.Constant) or var in outputs)
        )

    whole_model = all(boundary(v, e) for v, e in main.bindings)
    # Quantized staging with nothing to stage for: back to the CPU, whole model or not.
    small = {gv: constraint_io_only(True) for gv, f in regions.items() if _staging_only(f)}
    if not whole_model:
        for gv, f in regions.items():
            if gv in small:
                continue
            cycles = compute_cycles(cfg, f)
            detail = None if cycles is None else constraint_region_size(cycles, boundary_cycles(cfg, f))
            if detail is not None:
                small[gv] = detail
    too_big = {
        gv: f
        for gv, f in regions.items()
        if gv not in small
        and (len(f.params) + len(getattr(f.body.body, "fields", [f.body.body])) > cfg.max_tensors or _mixed_layouts(f))
    }
    if not small and not too_big:
        return mod
    new_mod = tvm.IRModule(
        {g: f for g, f in mod.functions.items() if g not in small and g not in too_big and g.name_hint != "main"},
        attrs=mod.attrs,
    )
    parts = {}
    for gv, f in too_big.items():
        parts[gv] = _split(gv, f, cfg.max_tensors)
        for pgv, pf, _, _ in parts[gv]:
            new_mod[pgv] = pf

    def rewrite(bb, var, value, m, fresh):
        if not (
            isinstance(value, relax.Call) and value.op in small or isinstance(value, relax.Call) and value.op in too_big
        ):
            return None
        func = mod[value.op]
        args = [relax_graph.subst(a, m) for a in value.args]
        if value.op in small:
            staging = _staging_only(func)
            return inline_region(
                bb,
                func,
                args,
                fresh,
                rejections,
                small[value.op],
                constraint_io_only if staging else constraint_region_size,
            )
        env = dict(zip(func.params, args))
        for pgv, _, ins, outs in parts[value.op]:
            res = bb.emit(relax.Call(pgv, [env[v] for v in ins]), name_hint=fresh(f"{var.name}_part"))
            for i, o in enumerate(outs):
                env[o] = res if len(outs) == 1 else bb.emit(relax.TupleGetItem(res, i), fresh(o.name))
        return relax_graph.subst(func.body.body, env)

    new_mod["main"] = relax_graph.rebuild(main, rewrite=rewrite)[0]
    return new_mod
