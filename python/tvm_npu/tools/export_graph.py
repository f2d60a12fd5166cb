"""A compiled library as an ONNX graph that Netron opens: what runs where, and how each NPU region runs.

    tvm_npu.tools.export_graph("model.so", "model.npu.onnx")   # or an Executable / loaded Module
    tvm-npu export-graph model.so -o model.npu.onnx [--serve]

The graph is the library's Relax VM program (tools/vm_program.py), its function `main` (else the
first one the executable lists: an LLM library's `prefill`), one node per call:
- a CPU function as itself: an ONNX op where its name is one (`sin` -> Sin) and the call checks against
  the op's schema, else an op of domain "tvm" named after the compiled function;
- each NPU region as one node of domain "npu" (op `NPURegion`) whose attributes carry its stream: the
  layers (the Relax ops the region fused, in order), per compute command its op, dimensions and SRAM
  addresses (the tiling), the placement of its tensors in DDR (weights / activations / state region +
  offset) and SRAM, the cycles, MACs and DDR bytes of one call (the runtime's cycle model: the library
  runs once on zeros, which times it exactly, as timing never depends on the data), and the
  quantization (each staged tensor's scale and zero point, each command's scalar scales); `detail` holds
  all of it as one JSON string.
Each tensor has a value_info: host dtype and shape, and for a region's inputs and outputs the NPU layout
and dtype, in its doc_string and metadata_props. The file passes `onnx.checker.check_model`; it runs
nowhere (it describes; the library runs).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from .. import runtime
from ..contract.errors import NPUError
from ..contract.stream import decode
from ..runtime.files import replacing
from . import vm_program

NPU_DOMAIN = "npu"
TVM_DOMAIN = "tvm"
OPSET = 21
# Compiled CPU function names (fused_ / tir_ / relax_ prefixes dropped) that are ONNX ops.
ONNX_OPS = {
    "add": "Add",
    "subtract": "Sub",
    "multiply": "Mul",
    "divide": "Div",
    "sin": "Sin",
    "cos": "Cos",
    "exp": "Exp",
    "log": "Log",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "relu": "Relu",
    "sqrt": "Sqrt",
    "abs": "Abs",
    "negative": "Neg",
    "softmax": "Softmax",
    "matmul": "MatMul",
    "transpose": "Transpose",
    "permute_dims": "Transpose",
    "concat": "Concat",
    "take": "Gather",
    "erf": "Erf",
}
ELEM = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}
# Per compute opcode, the operands that give its tile's dimensions.
DIMS = {
    "CONV2D": ("in_h", "in_w", "in_c", "out_h", "out_w", "oc", "kh", "kw", "stride_h", "stride_w", "groups"),
    "POOL": ("kind", "in_h", "in_w", "c", "out_h", "out_w", "kh", "kw"),
    "MATMUL": ("batch", "m", "k", "n"),
}
ROW_OPS = ("ADD", "ELTWISE", "UNARY", "SOFTMAX", "NORM", "ROPE")
SRAM_OPERANDS = ("in_addr", "a_addr", "b_addr", "w_addr", "bias_addr", "out_addr")
SCALE_OPERANDS = ("scale", "in_scale", "out_scale")  # fp32 bits


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _signed(word: int) -> int:
    """A two's-complement operand word (zero points) as the integer it stands for."""
    return word - (1 << 32) if word >= 1 << 31 else word


def _load(lib):
    """(VM executable module, its NPU modules by symbol) of a path, an Executable or a loaded Module."""
    import tvm

    if isinstance(lib, (str, Path)):
        lib = runtime.load_module(lib)
    mod = getattr(lib, "mod", lib)
    return tvm.relax.VMExecutable(mod), {str(m["get_symbol"]()): m for m in runtime.npu_modules(mod)}


def _ddr_place(addr: int, s) -> str:
    wb = len(s.weights)
    if addr < wb:
        return f"weights+{addr}"
    if addr < s.ddr_bytes:
        return f"activations+{addr - wb}"
    return f"state+{addr - s.ddr_bytes}"


def region_detail(module, timing: dict | None) -> dict:
    """Everything the region node says, from the module's stream (and one timed call, if any)."""
    s = decode(bytes(module["get_stream"]()))
    symbol = str(module["get_symbol"]())
    name = symbol.removeprefix("fused_").removesuffix("_npu")
    layers = [op.removeprefix("relax_").rstrip("0123456789") for op in name.split("_relax_") if op]
    tiles, scales = [], []
    for i, c in enumerate(s.commands):
        if c.op in ("DMA_LOAD", "DMA_STORE", "END"):
            continue
        dims = DIMS.get(c.op, ("rows", "row_elems") if c.op in ROW_OPS else ())
        tile = {"index": i, "op": c.op, **{k: c.args[k] for k in dims if k in c.args}}
        tile["sram"] = {k: c.args[k] for k in SRAM_OPERANDS if k in c.args}
        if c.note:
            tile["layer"] = c.note
        tiles.append(tile)
        q = {k: _f32(c.args[k]) for k in SCALE_OPERANDS if c.args.get(k)}
        q.update({k: _signed(c.args[k]) for k in ("in_zp", "out_zp", "a_mult", "b_mult", "shift") if c.args.get(k)})
        if q:
            scales.append({"index": i, "op": c.op, **q})
    loads = [c for c in s.commands if c.op == "DMA_LOAD"]
    stores = [c for c in s.commands if c.op == "DMA_STORE"]
    weight_loads = [c for c in loads if c.args["ddr_addr"] < len(s.weights)]
    dma = {
        "loads": len(loads),
        "weight_loads": len(weight_loads),
        "weight_load_bytes": sum(c.args["rows"] * c.args["row_bytes"] for c in weight_loads),
        "activation_load_bytes": sum(c.args["rows"] * c.args["row_bytes"] for c in loads if c not in weight_loads),
        "stores": len(stores),
        "store_bytes": sum(c.args["rows"] * c.args["row_bytes"] for c in stores),
    }
    tensors = [_tensor_doc(t, s) for t in s.tensors if t.role in ("input", "output", "position")]
    return {
        "symbol": symbol,
        "layers": layers,
        "commands": len(s.commands),
        "tiling": tiles,
        "placement": {
            "sram_bytes_used": s.sram_bytes_used,
            "sram_bytes": s.config.sram_bytes,
            "weights_bytes": len(s.weights),
            "activation_bytes": s.ddr_bytes - len(s.weights),
            "state_bytes": s.state_bytes,
            "dma": dma,
            "tensors": tensors,
        },
        "quantization": {"tensors": [t for t in tensors if "scale" in t], "commands": scales},
        "timing": timing or {},
        "format": f"{s.version[0]}.{s.version[1]}",
    }


def _tensor_doc(t, s) -> dict:
    doc = {
        "role": t.role,
        "io_index": t.io_index,
        "npu_dtype": t.dtype,
        "npu_layout": f"NHWC view {list(t.view)}, rows of {t.row_stride} B",
        "host_dtype": t.host_dtype,
        "host_layout": t.host_layout,
        "host_shape": list(t.host_shape),
        "ddr": _ddr_place(t.ddr_addr, s),
    }
    if t.quantized:
        doc.update(scale=t.scale, zero_point=t.zero_point)
    return doc


def _timings(vm_exec, modules: dict, func: str, params: list) -> dict:
    """Per region symbol: cycles, MACs and DDR bytes of one call of `func` on zero inputs (the cycle
    model's count; it never depends on the data). Empty when the function cannot run that way (a
    symbolic shape), which the node then says."""
    import tvm
    from tvm import relax

    if not params or any(d < 0 for p in params for d in p.shape):
        return {}
    try:
        vm = relax.VirtualMachine(vm_exec.mod if hasattr(vm_exec, "mod") else vm_exec, tvm.cpu())
        vm[func](*[tvm.runtime.tensor(np.zeros(p.shape, p.dtype)) for p in params])
        out = {}
        for m in runtime.npu_modules(vm):
            last = runtime.profile_of(m)["last"]
            out[str(m["get_symbol"]())] = {
                k: last[k]
                for k in ("total_cycles", "mac_cycles", "vector_cycles", "macs", "ddr_read_bytes", "ddr_write_bytes")
            }
        return out
    except Exception:  # noqa: BLE001  (a library this tool cannot run still exports, untimed)
        return {}


def _cpu_node(func: str, inputs: list, outputs: list, name: str, extra: dict) -> onnx.NodeProto:
    """An ONNX op where `func` is one and the call fits its schema, else a "tvm" op named `func`."""
    base = func
    for prefix in ("fused_", "tir_", "relax_"):
        base = base.removeprefix(prefix)
    op = ONNX_OPS.get(base.rstrip("0123456789"))
    if op is not None:
        node = helper.make_node(op, inputs, outputs, name=name)
        try:
            ctx = onnx.checker.C.CheckerContext()
            ctx.ir_version, ctx.opset_imports = onnx.IR_VERSION, {"": OPSET}
            onnx.checker.check_node(node, ctx)
            return node
        except Exception:  # noqa: BLE001  (not that op's signature: described as the compiled function)
            pass
    return helper.make_node(func, inputs, outputs, name=name, domain=TVM_DOMAIN, **extra)


class _Builder:
    """Registers to SSA tensor names, nodes and value infos, for one VM function."""

    def __init__(self, consts: list):
        self.consts = consts
        self.reg: dict = {}  # register -> tensor name (or a list of names: a tuple)
        self.info: dict = {}  # tensor name -> (dtype, shape, doc dict)
        self.produced: set = set()
        self.fresh: set = set()  # allocated, not yet written
        self.nodes: list = []
        self.n = 0

    def name(self, reg: str) -> str:
        self.n += 1
        return f"t{self.n}_{reg.lstrip('%')}"

    def const(self, tok: str):
        return self.consts[int(tok[2:-1])] if tok.startswith("c[") else None

    def alloc(self, ins) -> None:
        t = self.name(ins.dst)
        shape, dtype = self.const(ins.args[2]), self.const(ins.args[3])
        self.reg[ins.dst] = t
        self.fresh.add(t)
        self.info[t] = (dtype if isinstance(dtype, str) else None, shape if isinstance(shape, tuple) else None, {})

    def output(self, reg: str) -> str:
        t = self.reg.get(reg)
        if t is None or t in self.produced or t not in self.fresh:
            old = self.info.get(t, (None, None, {})) if t else (None, None, {})
            t = self.name(reg)
            self.info[t] = (old[0], old[1], {})
            self.reg[reg] = t
        self.fresh.discard(t)
        self.produced.add(t)
        return t

    def inputs(self, regs: list) -> tuple:
        known = [self.reg[r] for r in regs if isinstance(self.reg.get(r), str) and self.reg[r] in self.produced]
        other = [r for r in regs if r not in self.reg or self.reg[r] not in known]
        return known, other


def build_model(lib, run: bool = True) -> onnx.ModelProto:
    """The ONNX model of `lib` (a library path, an Executable or a loaded Module); see the module doc.

    Parameters
    ----------
    lib : str, os.PathLike, Executable or Module
        The compiled model.
    run : bool
        Time each region by running the entry function once on zeros (default); False leaves the timing
        out.

    Returns
    -------
    onnx.ModelProto
        A model that passes `onnx.checker.check_model`.
    """
    vm_exec, modules = _load(lib)
    consts = vm_program.constants(vm_exec.stats())
    funcs = vm_program.functions(vm_exec.as_text())
    if "main" not in funcs:  # an LLM artifact: prefill / decode over a constant pool this reader does not parse
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"the library has no main function (it has {', '.join(sorted(funcs)) or 'none'}): export-graph draws "
            "a model's main; for an LLM artifact, `tvm-npu disasm lm.so` lists its NPU regions",
        )
    func = "main"
    params = vm_program.params(consts, func)
    timing = _timings(vm_exec, modules, func, params) if run else {}
    b = _Builder(consts)
    graph_inputs = []
    for i, p in enumerate(params):
        b.reg[f"%{i}"] = p.name
        b.produced.add(p.name)
        b.info[p.name] = (p.dtype, p.shape, {})
        graph_inputs.append(p.name)
    outputs = []
    for k, ins in enumerate(funcs[func]):
        if ins.op == "ret":
            ret = b.reg.get(ins.dst)
            outputs = ret if isinstance(ret, list) else [ret]
        elif ins.func == "vm.builtin.alloc_tensor":
            b.alloc(ins)
        elif ins.func == "vm.builtin.make_tuple":
            b.reg[ins.dst] = [b.reg.get(a) for a in ins.args]
        elif ins.func == "vm.builtin.tuple_getitem":
            tup = b.reg.get(ins.args[0])
            idx = int(ins.args[1].lstrip("i")) if ins.args[1].startswith("i") else 0
            b.reg[ins.dst] = tup[idx] if isinstance(tup, list) else tup
        elif ins.func in modules:
            _region_node(b, ins, modules[ins.func], timing.get(ins.func), k)
        elif not ins.func.startswith("vm."):
            _call_node(b, ins, k)
        elif ins.func == "vm.builtin.reshape":
            src, _ = b.inputs(ins.args[:1])
            out = b.output(ins.dst)
            shape = b.const(ins.args[1])
            b.info[out] = (
                b.info.get(src[0], (None,))[0] if src else None,
                shape if isinstance(shape, tuple) else None,
                {},
            )
            b.nodes.append(
                helper.make_node(
                    "reshape", src, [out], name=f"n{k}_reshape", domain=TVM_DOMAIN, shape=list(shape or ())
                )
            )
    outputs = [o for o in outputs if o in b.produced]
    return _model(b, graph_inputs, outputs, modules)


def _call_node(b: _Builder, ins, k: int) -> None:
    regs = [a for a in ins.args if a.startswith("%")]
    outs = [r for r in regs if isinstance(b.reg.get(r), str) and b.reg[r] in b.fresh]
    ins_regs = [r for r in regs if r not in outs]
    inputs, other = b.inputs(ins_regs)
    extra = {}
    if other or len(ins_regs) != len(ins.args) - len(outs):
        extra["other_args"] = ", ".join(a for a in ins.args if a not in outs and (a in other or not a.startswith("%")))
    names = [b.output(r) for r in outs] if outs else ([b.output(ins.dst)] if ins.dst != "%void" else [])
    b.nodes.append(_cpu_node(ins.func, inputs, names, f"n{k}_{ins.func}"[:120], extra))


def _region_node(b: _Builder, ins, module, timing: dict | None, k: int) -> None:
    detail = region_detail(module, timing)
    io = detail["placement"]["tensors"]
    n_in = sum(t["role"] in ("input", "position") for t in io)
    regs = [a for a in ins.args if a.startswith("%")]
    inputs, _ = b.inputs(regs[:n_in])
    outs = [b.output(r) for r in regs[n_in:]]
    by_io = {(t["role"] == "output", t["io_index"]): t for t in io}
    for names, is_out in ((inputs, False), (outs, True)):
        for j, t in enumerate(names):
            doc = by_io.get((is_out, j))
            if doc:
                dtype, shape, _ = b.info.get(t, (None, None, {}))
                b.info[t] = (dtype or doc["host_dtype"], shape or tuple(doc["host_shape"]), doc)
    attrs = {
        "symbol": detail["symbol"],
        "layers": detail["layers"],
        "tiling": [json.dumps(t) for t in detail["tiling"]],
        "sram_bytes_used": detail["placement"]["sram_bytes_used"],
        "weights_bytes": detail["placement"]["weights_bytes"],
        "placement": json.dumps(detail["placement"]),
        "quantization": json.dumps(detail["quantization"]),
        "detail": json.dumps(detail),
    }
    scales = [t["scale"] for t in detail["quantization"]["tensors"]]
    if scales:
        attrs["io_scales"] = [float(v) for v in scales]
    for key, value in (timing or {}).items():
        attrs["cycles" if key == "total_cycles" else key] = int(value)
    b.nodes.append(
        helper.make_node("NPURegion", inputs, outs, name=f"n{k}_{detail['symbol']}"[:120], domain=NPU_DOMAIN, **attrs)
    )


def _value_info(name: str, dtype, shape, doc: dict) -> onnx.ValueInfoProto:
    vi = helper.make_tensor_value_info(
        name, ELEM.get(dtype or "", TensorProto.FLOAT), list(shape) if shape is not None else None
    )
    if doc:
        vi.doc_string = ", ".join(f"{k} {v}" for k, v in doc.items())
        for k, v in doc.items():
            entry = vi.metadata_props.add()
            entry.key, entry.value = k, str(v)
    return vi


def _model(b: _Builder, inputs: list, outputs: list, modules: dict) -> onnx.ModelProto:
    vi = {t: _value_info(t, *b.info.get(t, (None, None, {}))) for t in b.produced}
    graph = helper.make_graph(
        b.nodes,
        "tvm_npu",
        [vi[t] for t in inputs],
        [vi[t] for t in outputs],
        value_info=[vi[t] for t in sorted(b.produced) if t not in inputs and t not in outputs],
    )
    model = helper.make_model(
        graph,
        opset_imports=[
            helper.make_opsetid("", OPSET),
            helper.make_opsetid(NPU_DOMAIN, 1),
            helper.make_opsetid(TVM_DOMAIN, 1),
        ],
        producer_name="tvm_npu",
        ir_version=10,
    )
    helper.set_model_props(model, {"npu_regions": str(len(modules))})
    return model


def export_graph(lib, path, run: bool = True) -> Path:
    """Write `lib` as an ONNX graph for Netron to `path` (see the module doc); returns the path.

    Parameters
    ----------
    lib : str, os.PathLike, Executable or Module
        The compiled model: a library file, `tvm_npu.build`'s result, or a loaded library.
    path : str or os.PathLike
        The .onnx file to write.
    run : bool
        Time each NPU region with one call on zeros (default True).
    """
    model = build_model(lib, run=run)
    onnx.checker.check_model(model)
    out = Path(path)
    with replacing(out) as tmp:
        onnx.save(model, str(tmp))
    return out


def serve(path, port: int = 8080, host: str = "localhost") -> tuple:
    """Serve `path` with Netron (the `netron` package, `pip install netron`) without opening a browser;
    returns its (host, port). `netron.stop(address)` stops it.

    Raises
    ------
    ImportError
        When the netron package is not installed (the message says how to install it).
    """
    try:
        import netron
    except ImportError as err:
        raise ImportError("serving needs the netron package: pip install netron (or open the file in Netron)") from err
    return tuple(netron.start(str(path), address=(host, port), browse=False))
