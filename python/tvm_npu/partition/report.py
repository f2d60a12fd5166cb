"""Where every op ran and why: the placement table built from a partitioned module.

Each call in `main` becomes a row: on the NPU (its region and composite) or on the CPU (with the reason
code of the constraint that refused it, or NPU_E_UNSUPPORTED_OP when no NPU pattern covers the op), with
its MACs computed from the Relax shapes. The cost of what fell back is measured from the partitioned
`main`: the NPU regions (and how many extra ones CPU islands split off), the bytes crossing every NPU/CPU
boundary (region inputs and outputs in host form, i.e. the Relax tensor's shape and dtype) and the layout
transposes at those boundaries. `BuildReport.write(stem)` writes `<stem>.json` and `<stem>.txt`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm

from ..ir.graph import free_vars
from .checks import weight_constant
from .patterns import IO_COMPOSITES


@dataclass
class Placement:
    var: str
    op: str
    device: str  # "npu" or "cpu"
    region: str = ""
    composite: str = ""
    code: str = ""
    reason: str = ""
    precision: str = ""  # int8 or fp16 on the NPU, fp32 (or the tensor's dtype) on the CPU
    macs: int | None = 0  # multiply-accumulates from the Relax shapes; None when a shape is symbolic
    boundary_bytes: int = 0  # CPU op: bytes it reads from / writes to NPU regions (host form)
    island: bool = False  # CPU op between two NPU regions (an NPU ancestor and an NPU descendant)


@dataclass
class BuildReport:
    """What a build did: the NPU configuration, op placement, each NPU region's plan, and each NPU
    region's boundary with the CPU (`boundaries`: symbol -> inputs / outputs in host form)."""

    config: dict = field(default_factory=dict)
    placements: list = field(default_factory=list)
    regions: dict = field(default_factory=dict)  # symbol -> summary
    boundaries: dict = field(default_factory=dict)  # symbol -> {"inputs": [...], "outputs": [...], ...}
    # A step model's resident KV cache (backend/kv_cache.py): the region call's var -> its op rows, and
    # {"resident", "state_space", "regions"}.
    kv_placements: dict = field(default_factory=dict)
    kv_cache: dict = field(default_factory=dict)
    # Each dense layer's weight format (quantization.weight_int4.weight_formats): layer -> "int4 g32 sym,
    # from MatMulNBits", "fp16 (expanded from int4 ...: not kept, +N bytes)", ...; empty when not listed.
    weight_formats: dict = field(default_factory=dict)

    def record_partition(self, mod: tvm.IRModule, rejections: list) -> None:
        """Fill placements and boundaries from a partitioned module (before RunCodegen)."""
        self.placements = placements(mod, rejections, self.kv_placements)
        self.boundaries = {}
        try:
            self.boundaries, cpu_costs = boundaries(mod)
        except Exception as err:  # pylint: disable=broad-except  # the report must never fail a build
            logging.getLogger(__name__).warning("partition report: no boundary costs (%s)", err)
            return
        for p in self.placements:
            if p.device == "cpu" and p.var in cpu_costs:
                p.boundary_bytes, p.island = cpu_costs[p.var]

    @property
    def npu_ops(self) -> int:
        return sum(p.device == "npu" for p in self.placements)

    def macs(self) -> dict:
        """MACs on the NPU, on the CPU, and the number of ops whose MACs are unknown (symbolic shapes)."""
        npu = sum(p.macs or 0 for p in self.placements if p.device == "npu")
        cpu = sum(p.macs or 0 for p in self.placements if p.device == "cpu")
        return {"npu": npu, "cpu": cpu, "unknown_ops": sum(p.macs is None for p in self.placements)}

    def mac_percent(self) -> float | None:
        """Percent of the counted MACs on the NPU; None when no MAC could be counted but some op's
        shape is symbolic (a percentage would claim what nobody measured). Without MACs at all (vector
        ops only) it is 100 when any op runs on the NPU, else 0."""
        m = self.macs()
        total = m["npu"] + m["cpu"]
        if total:
            return 100.0 * m["npu"] / total
        if m["unknown_ops"]:
            return None
        return 100.0 if self.npu_ops else 0.0

    def summary(self) -> str:
        pct = self.mac_percent()
        ops = f"{self.npu_ops} of {len(self.placements)} ops"
        line = (
            f"{ops} on the NPU, MACs not counted (symbolic shapes)"
            if pct is None
            else f"{ops}, {pct:.1f}% of MACs on the NPU"
        )
        return line + self._formats_line()

    def _formats_line(self) -> str:
        """ "; dense weights: 14 int4 g32 sym, 1 fp16 (expanded ...)" (each format's head), or ""."""
        if not self.weight_formats:
            return ""
        heads: dict = {}
        for fmt in self.weight_formats.values():
            head = (
                fmt.split(",")[0] if fmt.startswith("int") else fmt.split(" (")[0] + (" expanded" if "(" in fmt else "")
            )
            heads[head] = heads.get(head, 0) + 1
        return "; dense weights: " + ", ".join(f"{n} {h}" for h, n in heads.items())

    def fallback_cost(self) -> dict:
        """The cost of what stayed on the CPU: NPU regions (and the extra ones CPU islands split off),
        CPU ops between NPU regions, bytes crossing the NPU/CPU boundaries and layout transposes."""
        names = self._region_names()
        components = _components(self.boundaries)
        return {
            "regions": len(names),
            "extra_regions": len(names) - len(set(components.values())) if names else 0,
            "islands": [p.var for p in self.placements if p.island],
            "boundary_bytes": sum(b["input_bytes"] + b["output_bytes"] for b in self.boundaries.values()),
            "boundary_transposes": sum(int(r.get("boundary_transposes", 0)) for r in self.regions.values()),
        }

    def _region_names(self) -> list:
        return list(dict.fromkeys(list(self.boundaries) + list(self.regions)))

    def aliases(self) -> dict:
        """Short names (npu0, npu1, ...) for the regions, in order of first appearance.

        TVM names a merged region after every op in it; the table uses these instead."""
        names: dict = {}
        for p in self.placements:
            if p.device == "npu" and p.region not in names:
                names[p.region] = f"npu{len(names)}"
        for symbol in self._region_names():
            names.setdefault(symbol, f"npu{len(names)}")
        return names

    def table(self) -> str:
        alias = self.aliases()
        rows = [("op", "var", "device", "MACs", "region / reason")]
        for p in self.placements:
            where = f"{alias[p.region]} ({p.composite})" if p.device == "npu" else f"{p.code}: {p.reason}"
            if p.device == "npu" and p.code:  # ran, but not in the precision the model asked for
                where += f" fp16 because {p.code}: {p.reason}"
            if p.device == "cpu" and p.boundary_bytes:
                where += (
                    f" [{'island between NPU regions, ' if p.island else ''}"
                    f"{p.boundary_bytes} B across the NPU boundary]"
                )
            rows.append((p.op, p.var, f"{p.device}/{p.precision}", "?" if p.macs is None else str(p.macs), where))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(r[i].rjust(widths[i]) if i == 3 else r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4]
            for r in rows
        ]
        cost = self.fallback_cost()
        lines.append(
            f"NPU regions: {cost['regions']} ({cost['extra_regions']} extra, split off by "
            f"{len(cost['islands'])} CPU op(s) between regions); boundary bytes (host form): "
            f"{cost['boundary_bytes']}; layout transposes at the boundaries: "
            f"{cost['boundary_transposes']}"
        )
        for symbol in self._region_names():
            b = self.boundaries.get(symbol, {"inputs": [], "outputs": [], "input_bytes": 0, "output_bytes": 0})
            ins = ", ".join(f"{t['var']} {t['bytes']} B from {t['source']}" for t in b["inputs"])
            outs = ", ".join(f"{t['var']} {t['bytes']} B to {', '.join(t['consumers']) or '-'}" for t in b["outputs"])
            lines.append(
                f"  {alias[symbol]}: in {b['input_bytes']} B ({ins or '-'}); "
                f"out {b['output_bytes']} B ({outs or '-'}); "
                f"{self.regions.get(symbol, {}).get('boundary_transposes', 0)} layout transposes"
            )
        m = self.macs()
        lines.append(self.summary())
        if m["unknown_ops"]:
            lines.append(f"({m['unknown_ops']} op(s) with symbolic shapes: their MACs are not counted)")
        lines += [f"  weight {layer}: {fmt}" for layer, fmt in self.weight_formats.items()]
        legend = [f"{alias[symbol]} = {short_name(symbol)}" for symbol in self._region_names()]
        return "\n".join(lines + legend)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "placements": [asdict(p) for p in self.placements],
            "regions": self.regions,
            "boundaries": self.boundaries,
            "aliases": self.aliases(),
            "macs": self.macs(),
            "mac_percent": self.mac_percent(),
            "fallback": self.fallback_cost(),
            "summary": self.summary(),
            "weight_formats": self.weight_formats,
        }

    def write(self, path_stem) -> tuple:
        """Write `<path_stem>.json` (to_dict) and `<path_stem>.txt` (the table); returns both paths."""
        stem = Path(path_stem)
        stem.parent.mkdir(parents=True, exist_ok=True)
        js, txt = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".txt")
        js.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        txt.write_text(self.table() + "\n")
        return js, txt


def short_name(symbol: str, ops: int = 3) -> str:
    """A region's name for a screen: TVM names a merged region after every op in it (400-6,000
    characters on real models), so show its first `ops` op names and the count. The full name stays in
    the JSON report (`aliases`) and in the library."""
    if not symbol.startswith("fused_") or len(symbol) <= 60:
        return symbol
    names = [n for n in symbol.removeprefix("fused_").split("relax_") if n.strip("_")]
    shown = ", ".join(n.strip("_") for n in names[:ops])
    more = f", ... {len(names)} ops" if len(names) > ops else ""
    return f"fused({shown}{more}; {len(symbol)} characters)"


def _components(bounds: dict) -> dict:
    """Region symbol -> representative: regions joined by a direct edge or through CPU islands would be
    one region if the CPU ops between them ran on the NPU."""
    parent = {s: s for s in bounds}

    def find(s):
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for s, b in bounds.items():
        for other in b.get("joined_with", []):
            if other in parent:
                parent[find(other)] = find(s)
    return {s: find(s) for s in bounds}


def tensor_bytes(ty) -> int | None:
    """Bytes of a Relax value in host form (a tensor's shape x dtype size, a tuple's fields summed);
    None when a shape is symbolic or unknown."""
    if isinstance(ty, relax.TupleType):
        parts = [tensor_bytes(f) for f in ty.fields]
        return None if any(p is None for p in parts) else sum(parts)
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or shape is None or not hasattr(shape, "values"):
        return None
    n = 1
    for v in shape.values:
        if not isinstance(v, IntImm):
            return None
        n *= int(v.value)
    dtype = str(ty.dtype)
    bits = np.dtype("float16" if dtype == "bfloat16" else dtype).itemsize if dtype != "bool" else 1
    return n * bits


def op_macs(call) -> int | None:
    """Multiply-accumulates of a conv (1-D, 2-D, 3-D) or matmul call from its Relax shapes; 0 for any
    other op; None when a shape it needs is symbolic."""
    name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
    if name not in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.matmul"):
        return 0
    out = _static(call.ty)
    if name == "relax.matmul":
        a = _static(call.args[0].ty)
        return None if out is None or a is None else int(np.prod(out, dtype=np.int64)) * a[-1]
    kernel = _static(call.args[1].ty)
    if out is None or kernel is None:
        return None
    o_axis = str(call.attrs.kernel_layout).index("O")
    per_output = int(np.prod(kernel, dtype=np.int64)) // kernel[o_axis]  # (C / groups) x window
    return int(np.prod(out, dtype=np.int64)) * per_output


def _static(ty):
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    if not all(isinstance(v, IntImm) for v in shape.values):
        return None
    return [int(v.value) for v in shape.values]


def _is_npu_call(mod, value) -> bool:
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)):
        return False
    func = mod[value.op]
    return func.attrs is not None and func.attrs.get("Codegen") == "npu"


def boundaries(mod: tvm.IRModule) -> tuple[dict, dict]:
    """The NPU/CPU boundaries of a partitioned `main`.

    Returns (per region symbol: its inputs and outputs in host form — var, shape, dtype, bytes, where an
    input comes from and who reads an output — their byte totals, and the regions it would join if the
    CPU ops between them ran on the NPU; per CPU op var: (bytes it exchanges with NPU regions, whether
    it is an island between NPU regions))."""
    main = mod["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    params = set(main.params)
    # Every var -> the op nodes that produce it: ("npu", symbol) or ("cpu", var name); passthrough
    # bindings (tuples, tuple items, aliases) carry their sources.
    sources: dict = {}
    nodes: list = []  # (node, binding var, value)
    for b in bindings:
        value = b.value
        deps = [v for v in free_vars(value) if v not in params]
        if _is_npu_call(mod, value):
            node = ("npu", value.op.name_hint)
        elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            node = ("cpu", b.var.name)
        else:
            node = None
        if node is None:
            sources[b.var] = set().union(*[sources.get(v, set()) for v in deps]) if deps else set()
        else:
            sources[b.var] = {node}
            nodes.append((node, b.var, value))
    readers: dict = {}  # node -> the nodes that read it (and "output" for main's result)
    preds: dict = {}
    for node, _, value in nodes:
        ps = set().union(*[sources.get(v, set()) for v in free_vars(value)]) if free_vars(value) else set()
        preds[node] = ps
        for p in ps:
            readers.setdefault(p, set()).add(node)
    for v in free_vars(main.body.body):
        for p in sources.get(v, set()):
            readers.setdefault(p, set()).add("output")

    # Regions reachable from each node going up / down through CPU ops only.
    up: dict = {}
    for node, _, _ in nodes:
        acc: set = set()
        for p in preds[node]:
            acc |= {p[1]} if p[0] == "npu" else up.get(p, set())
        up[node] = acc
    down: dict = {}
    for node, _, _ in reversed(nodes):
        acc = set()
        for r in readers.get(node, set()):
            if r == "output":
                continue
            acc |= {r[1]} if r[0] == "npu" else down.get(r, set())
        down[node] = acc

    regions: dict = {}
    cpu_costs: dict = {}
    joins: dict = {}
    for node, var, value in nodes:
        if node[0] == "npu":
            inputs = []
            for arg in value.args:
                if not isinstance(arg, (relax.Var, relax.Tuple)):  # constants are weights, not traffic
                    continue
                srcs = sources.get(arg, set()) if isinstance(arg, relax.Var) else set()
                kinds = sorted(("CPU " + s[1]) if s[0] == "cpu" else s[1] for s in srcs) or ["model input"]
                inputs.append(_io(arg, ", ".join(kinds)))
            out = _io(var, "")
            del out["source"]
            out["consumers"] = sorted(
                "model output" if r == "output" else ("CPU " + r[1] if r[0] == "cpu" else r[1])
                for r in readers.get(node, set())
            )
            joined = {p[1] for p in preds[node] if p[0] == "npu"} | {
                r[1] for r in readers.get(node, set()) if r != "output" and r[0] == "npu"
            }
            regions[node[1]] = {
                "inputs": inputs,
                "outputs": [out],
                "input_bytes": sum(t["bytes"] or 0 for t in inputs),
                "output_bytes": out["bytes"] or 0,
                "joined_with": sorted(joined),
            }
        else:
            island = bool(up[node]) and bool(down[node])
            nbytes = sum(
                tensor_bytes(v.ty) or 0
                for v in dict.fromkeys(free_vars(value))
                if any(s[0] == "npu" for s in sources.get(v, set()))
            )
            if any(r != "output" and r[0] == "npu" for r in readers.get(node, set())):
                nbytes += tensor_bytes(var.ty) or 0
            cpu_costs[node[1]] = (nbytes, island)
            if island:  # the regions on both sides would be one without the CPU ops between them
                for r in up[node] | down[node]:
                    joins.setdefault(r, set()).update(up[node] | down[node])
    for r, others in joins.items():
        if r in regions:
            regions[r]["joined_with"] = sorted(set(regions[r]["joined_with"]) | (others - {r}))
    return regions, cpu_costs


def _io(var, source: str) -> dict:
    ty = var.ty
    shape = _static(ty)
    return {
        "var": var.name if isinstance(var, relax.Var) else "tuple",
        "shape": shape,
        "dtype": str(getattr(ty, "dtype", "")),
        "bytes": tensor_bytes(ty),
        "source": source,
    }


def _device_bytes(info, alignment: int) -> int:
    """Bytes of a tensor in DDR as the NPU stores it: N*H rows of align(W*C*elem, alignment)."""
    from ..contract.stream import DTYPE_BYTES

    n, h, w, c = info.view
    return int(n * h * -(-w * c * DTYPE_BYTES[info.dtype] // alignment) * alignment)


def region_layers(config, graph, planned) -> dict:
    """What profiling needs of one region, JSON-serializable: its layers (name, composite, kind, dtype,
    MACs, vector steps, weight and I/O tensor bytes as stored, and the bytes of those of its tensors
    that are region inputs or outputs), the region's input / output tensor bytes, and
    `command_layers`, the layer name of every planned command ("" for END)."""
    a = config.alignment
    tensor_bytes = {name: _device_bytes(info, a) for name, info in graph.tensors.items()}
    io = set(graph.inputs) | set(graph.outputs)
    layers = []
    for layer in graph.layers:
        if layer.kind in ("view", "concat"):
            continue  # a reshape or concat that aliases its inputs: no command, nothing to profile
        out = graph.tensors[layer.out].view
        elems = int(np.prod(out))
        steps = {
            "conv": 0,
            "matmul": 0,
            "add": elems,
            "eltwise": elems,
            "unary": elems,
            "softmax": 3 * elems,
            "norm": (3 if layer.func == "layernorm" else 2) * elems,
            "rope": 2 * elems,
            "group_norm": (4 if layer.func == "silu" else 3) * elems,  # GN_STATS' two passes, GN_APPLY's
            "pool": elems * layer.window[0] * layer.window[1],
            "upsample": elems,  # one POOL 1x1 step per output element
            "restride": elems,  # one POOL 1x1 step per element (backend/plan/restride_plan.py)
        }[layer.kind]
        layers.append(
            {
                "name": layer.name,
                "composite": layer.composite,
                "kind": layer.kind,
                "dtype": layer.dtype,
                "macs": int(layer.macs),
                "vector_steps": int(steps),
                "weight_bytes": planned.info.get("layer_weight_bytes", {}).get(layer.name, 0),
                "input_bytes": [tensor_bytes[t] for t in layer.inputs],
                "output_bytes": tensor_bytes[layer.out],
                "region_io_bytes": sum(tensor_bytes[t] for t in set(layer.inputs) & io)
                + (tensor_bytes[layer.out] if layer.out in io else 0),
            }
        )
    return {
        "layers": layers,
        "input_bytes": [tensor_bytes[t] for t in graph.inputs],
        "output_bytes": [tensor_bytes[t] for t in graph.outputs],
        "command_layers": [c.note for c in planned.commands],
    }


def _composite_ops(func: relax.Function):
    """(composite name, op name, var, call) of every op inside an NPU region that computes on data, in
    order. Weight preparation (transposes and reshapes of constants) is compile-time work, and the
    dequantize / quantize around an int8 op are part of it, so neither is listed."""
    composites = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Function):
                composites[b.var] = b.value
            elif isinstance(b.value, relax.Call) and b.value.op in composites:
                comp = composites[b.value.op]
                data = set(comp.params)
                env = {cb.var: cb.value for cb in comp.body.blocks[0].bindings}
                for cb in comp.body.blocks[0].bindings:
                    call = cb.value
                    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
                        continue
                    args = [f for a in call.args for f in (a.fields if isinstance(a, relax.Tuple) else [a])]
                    if not any(isinstance(a, relax.Var) and a in data for a in args):
                        continue  # a concat's inputs come as one tuple
                    data.add(cb.var)
                    # The QDQ around an int8 op is part of it; a model input's quantize or output's
                    # dequantize (quantized staging) is an op of its own.
                    if (
                        call.op.name not in ("relax.quantize", "relax.dequantize")
                        or str(comp.attrs["Composite"]) in IO_COMPOSITES
                    ):
                        yield str(comp.attrs["Composite"]), call.op.name, cb.var.name, call, env


#: Patterns whose refusal of an op yields to any other pattern's refusal of it.
_LAST_RESORT = ("permute_view",)


def placements(mod: tvm.IRModule, rejections: list, kv: dict | None = None) -> list[Placement]:
    """One Placement per op call in `main` of a partitioned module (before RunCodegen); `kv` maps the var
    of a resident KV cache region's call to the rows of the ops it replaced."""
    # The permute view is the last-resort pattern of a permute_dims: its refusal ("not a map's pixels
    # as rows") says less than that of a pattern the permute was part of (a head split's head bytes).
    refused = {r.var: r for r in sorted(rejections, key=lambda r: r.pattern not in _LAST_RESORT)}
    # A bias add or clip refused as part of a conv / dense says why it could not fuse; that beats
    # its own check's refusal as a lone op (a constant operand, no lone clip pattern).
    refused.update({r.var: r for r in rejections if r.code in ("NPU_E_BIAS", "NPU_E_ACTIVATION")})
    by_weight = {r.weight: r for r in rejections if r.weight is not None and r.pattern.startswith("q")}
    rows = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            call = b.value
            if not isinstance(call, relax.Call):
                continue
            if kv and b.var.name in kv:
                rows.extend(kv[b.var.name])
                continue
            if isinstance(call.op, tvm.ir.GlobalVar):
                func = mod[call.op]
                if func.attrs is not None and func.attrs.get("Codegen") == "npu":
                    for composite, op, var, inner, env in _composite_ops(func):
                        int8 = composite.startswith("npu.q")
                        row = Placement(
                            var,
                            op,
                            "npu",
                            call.op.name_hint,
                            composite,
                            precision="int8" if int8 else "fp16",
                            macs=op_macs(inner),
                        )
                        r = refused.get(var) or by_weight.get(weight_constant(inner, env))
                        if r is not None and not int8 and r.pattern.startswith("q"):
                            row.code, row.reason = r.code, f"{r.reason} ({r.detail})"
                        rows.append(row)
                    continue
            op = call.op.name if isinstance(call.op, tvm.ir.Op) else str(call.op)
            precision = str(getattr(b.var.ty, "dtype", "")) or "-"
            macs = op_macs(call)
            r = refused.get(b.var.name)
            if r is not None:
                rows.append(
                    Placement(
                        b.var.name,
                        op,
                        "cpu",
                        code=r.code,
                        reason=f"{r.reason} ({r.detail})",
                        precision=precision,
                        macs=macs,
                    )
                )
            else:
                rows.append(
                    Placement(
                        b.var.name,
                        op,
                        "cpu",
                        code="NPU_E_UNSUPPORTED_OP",
                        reason=f"no NPU pattern for {op}",
                        precision=precision,
                        macs=macs,
                    )
                )
    return rows
