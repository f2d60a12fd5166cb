"""Where every op ran and why: the placement table built from a partitioned module.

Each call in `main` becomes a row: on the NPU (its region and composite) or on the CPU (with the reason
code of the constraint that refused it, or NPU_E_UNSUPPORTED_OP when no NPU pattern covers the op).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import tvm
from tvm import relax


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


@dataclass
class BuildReport:
    """What a build did: the NPU configuration, op placement, and each NPU region's plan."""

    config: dict = field(default_factory=dict)
    placements: list = field(default_factory=list)
    regions: dict = field(default_factory=dict)  # symbol -> summary

    @property
    def npu_ops(self) -> int:
        return sum(p.device == "npu" for p in self.placements)

    def summary(self) -> str:
        total = len(self.placements)
        return f"{self.npu_ops} of {total} ops on the NPU, in {len(self.regions)} region(s)"

    def aliases(self) -> dict:
        """Short names (npu0, npu1, ...) for the regions, in order of first appearance.

        TVM names a merged region after every op in it; the table uses these instead."""
        names: dict = {}
        for p in self.placements:
            if p.device == "npu" and p.region not in names:
                names[p.region] = f"npu{len(names)}"
        return names

    def table(self) -> str:
        alias = self.aliases()
        rows = [("op", "var", "device", "region / reason")]
        for p in self.placements:
            where = f"{alias[p.region]} ({p.composite})" if p.device == "npu" else f"{p.code}: {p.reason}"
            if p.device == "npu" and p.code:  # ran, but not in the precision the model asked for
                where += f" fp16 because {p.code}: {p.reason}"
            rows.append((p.op, p.var, f"{p.device}/{p.precision}", where))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
        legend = [f"{short} = {symbol}" for symbol, short in alias.items()]
        return "\n".join(lines + [self.summary()] + legend)

    def to_dict(self) -> dict:
        return {"config": self.config, "placements": [asdict(p) for p in self.placements],
                "regions": self.regions, "summary": self.summary()}


def _device_bytes(info, alignment: int) -> int:
    """Bytes of a tensor in DDR as the NPU stores it: N*H rows of align(W*C*elem, alignment)."""
    from .stream import DTYPE_BYTES

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
        if layer.kind == "view":
            continue  # a reshape that aliases its input: no command, nothing to profile
        out = graph.tensors[layer.out].view
        elems = int(np.prod(out))
        steps = {"conv": 0, "add": elems, "pool": elems * layer.window[0] * layer.window[1]}[layer.kind]
        layers.append({"name": layer.name, "composite": layer.composite, "kind": layer.kind,
                       "dtype": layer.dtype, "macs": int(layer.macs), "vector_steps": int(steps),
                       "weight_bytes": planned.info.get("layer_weight_bytes", {}).get(layer.name, 0),
                       "input_bytes": [tensor_bytes[t] for t in layer.inputs],
                       "output_bytes": tensor_bytes[layer.out],
                       "region_io_bytes": sum(tensor_bytes[t] for t in set(layer.inputs) & io)
                       + (tensor_bytes[layer.out] if layer.out in io else 0)})
    return {"layers": layers,
            "input_bytes": [tensor_bytes[t] for t in graph.inputs],
            "output_bytes": [tensor_bytes[t] for t in graph.outputs],
            "command_layers": [c.note for c in planned.commands]}


def _composite_ops(func: relax.Function):
    """(composite name, op name, var) of every op inside an NPU region that computes on data, in
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
                for cb in comp.body.blocks[0].bindings:
                    call = cb.value
                    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
                        continue
                    if not any(isinstance(a, relax.Var) and a in data for a in call.args):
                        continue
                    data.add(cb.var)
                    if call.op.name not in ("relax.quantize", "relax.dequantize"):
                        yield str(comp.attrs["Composite"]), call.op.name, cb.var.name


def placements(mod: tvm.IRModule, rejections: list) -> list[Placement]:
    """One Placement per op call in `main` of a partitioned module (before RunCodegen)."""
    refused = {r.var: r for r in rejections}
    rows = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            call = b.value
            if not isinstance(call, relax.Call):
                continue
            if isinstance(call.op, tvm.ir.GlobalVar):
                func = mod[call.op]
                if func.attrs is not None and func.attrs.get("Codegen") == "npu":
                    for composite, op, var in _composite_ops(func):
                        int8 = composite.startswith("npu.q")
                        row = Placement(var, op, "npu", call.op.name_hint, composite,
                                        precision="int8" if int8 else "fp16")
                        r = refused.get(var)
                        if r is not None and not int8 and r.pattern.startswith("q"):
                            row.code, row.reason = r.code, f"{r.reason} ({r.detail})"
                        rows.append(row)
                    continue
            op = call.op.name if isinstance(call.op, tvm.ir.Op) else str(call.op)
            precision = str(getattr(b.var.ty, "dtype", "")) or "-"
            r = refused.get(b.var.name)
            if r is not None:
                rows.append(Placement(b.var.name, op, "cpu", code=r.code,
                                      reason=f"{r.reason} ({r.detail})", precision=precision))
            else:
                rows.append(Placement(b.var.name, op, "cpu", code="NPU_E_UNSUPPORTED_OP",
                                      reason=f"no NPU pattern for {op}", precision=precision))
    return rows
