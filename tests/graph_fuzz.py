"""Differential graph fuzzing (issue 9): random ONNX DAGs of the ops tvm_npu supports, with a few it does
not (to interleave NPU and CPU), compiled for the NPU and compared with an independent reference.

A graph is a plain-data *spec* (so a minimized failure pastes into a regression test):

    {"dtype": "fp16" | "int8", "config": "npu-ref" | "npu-small", "seed": int,
     "input": [1, C, H, W] or [M, K], "nodes": [[op, [arg, ...], {attr: value}], ...], "outputs": [v, ...]}

Value 0 is the input; node i makes value i + 1. `graph_specs()` is the hypothesis strategy, `build_onnx`
turns a spec into an ONNX model (seeded weights) and `check(spec)` compiles it, runs it and returns an
`Outcome`:

- fp16 (a float32 model on the NPU's fp16 datapath) against TVM's own llvm build of the same import. Every
  NPU op rounds its inputs and its result to fp16 (unit roundoff u = 2^-11) and accumulates in fp32, so
  each op adds an error of about u times its operands' size; a chain of d ops adds up to about d * u.
  The bound is ||npu - ref||_2 <= 4 u (d + 1) (||ref||_2 + sqrt(n) rms(x)) with d the number of ops on
  the longest path to that output (4: two roundings per op, input and output, and headroom for the
  error a product or a sum of two rounded operands doubles). The sqrt(n) rms(x) term is the size of the
  operands (inputs are standard normal and the weights keep activations O(1)) for outputs that cancel
  out: a dot product near 0 has an error of u times its terms, not of its result. A wrong address,
  tile or layout is off by O(1).
- int8 (onnxruntime's quantize_static, QDQ) against tests/npu_ref's interpreter of the
  documented integer arithmetic, bit for bit, when every quantized op ran on the NPU. When the compiler
  left some on the CPU (a reasoned fallback: TVM computes those in float between dequantize and
  quantize, which may differ by 1 LSB and propagate), against onnxruntime's own int8 run within 2 LSB
  per op on the longest path (every test of test_int8.py stays within 1 - 2 LSB of it). The same holds
  for the few QDQ forms the numpy reference does not model (Concat, an op quantize_static left in float).
  When the output itself is float (quantize_static quantized nothing, or left the last ops in float, so
  they run on the fp16 datapath): against onnxruntime within the fp16 bound plus 2 LSB of the coarsest
  activation scale per op.

Outcomes: "pass"; "coded" (an NPUError with a code from docs/npu.md section 7 — the compiler refused the
graph and said why); "skip" (the graph is outside what the reference can judge: TVM or onnxruntime cannot
import or quantize it, or the float reference leaves the fp16 range); "fail" (a wrong answer) and "error"
(an uncoded exception) are bugs.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graph_fuzz_families

U_FP16 = 2.0**-11
MAP_UNARY = ("Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSwish")
INT8_UNARY = ("Sigmoid", "Tanh", "LeakyRelu", "HardSwish")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
CPU_ONLY = ("Transpose", "Sin")  # no NPU pattern: NPU_E_UNSUPPORTED_OP, the graph is split around them


# --------------------------------------------------------------------------------------------------
# Shapes


def conv_out(h, k, stride, dil, lo, hi):
    return (h + lo + hi - dil * (k - 1) - 1) // stride + 1


def out_shape(op, shapes, a):
    """The output shape of node `op` with input shapes `shapes` and attributes `a` (ONNX semantics)."""
    x = shapes[0]
    if op == "conv":
        cout = x[1] if a["group"] == "dw" else a["cout"]
        p = a["pads"]
        return [
            x[0],
            cout,
            conv_out(x[2], a["k"], a["stride"], a["dil"], p[0], p[2]),
            conv_out(x[3], a["k"], a["stride"], a["dil"], p[1], p[3]),
        ]
    if op == "pool":
        p = a["pads"]
        return [
            x[0],
            x[1],
            conv_out(x[2], a["k"], a["stride"], 1, p[0], p[2]),
            conv_out(x[3], a["k"], a["stride"], 1, p[1], p[3]),
        ]
    if op == "gap":
        return [x[0], x[1], 1, 1]
    if op == "concat":
        ax = a["axis"]
        return [d + shapes[1][i] if i == ax else d for i, d in enumerate(x)]
    if op == "Transpose":
        return x[:-2] + [x[-1], x[-2]]
    if op == "flatten":
        return [x[0], int(np.prod(x[1:]))]
    if op == "gemm":
        return [x[0], a["n"]]
    if op == "slice":
        return [a["stop"] - a["start"]] + x[1:]
    if op in graph_fuzz_families.ALL_KINDS:
        return graph_fuzz_families.out_shape(op, shapes, a)
    return list(x)  # binary, unary, softmax, Sin


# --------------------------------------------------------------------------------------------------
# The hypothesis strategy


@st.composite
def graph_specs(draw, dtype=None, max_nodes=7, big=None):
    """A random graph spec. `dtype` "fp16" or "int8" fixes the datapath (else drawn); `big` True makes
    every graph one with tensors or weights larger than npu-small's SRAM (else one in ten)."""
    dtype = dtype or draw(st.sampled_from(["fp16", "fp16", "int8"]))
    big = draw(st.integers(0, 9)) == 0 if big is None else big  # larger than the SRAM: tiling
    config = "npu-small" if big else draw(st.sampled_from(["npu-ref", "npu-small"]))
    if draw(st.integers(0, 3)) == 0:  # a matrix input: dense chains
        shape = [draw(st.integers(1, 12)), draw(st.integers(600, 2048) if big else st.integers(1, 160))]
    else:
        c = draw(st.sampled_from([16, 32]) if big else st.sampled_from([1, 2, 3, 4, 8, 16]))
        side = st.integers(64, 112) if big else st.integers(1, 24)
        shape = [1, c, draw(side), draw(side)]
    shapes, depth, nodes = [shape], [0], []
    for _ in range(draw(st.integers(1, max_nodes))):
        v = draw(st.integers(max(0, len(shapes) - 3), len(shapes) - 1))  # mostly recent values: chains
        node = draw(_node(shapes, v, dtype, big))
        if node is None:
            continue
        op, args, attrs = node
        nodes.append(node)
        shapes.append(out_shape(op, [shapes[i] for i in args], attrs))
        depth.append(1 + max(depth[i] for i in args))
    if not nodes:
        nodes.append(["unary", [0], {"kind": "Sigmoid"}])
        shapes.append(list(shape))
    # Sinks left out of the outputs are dead code, which the compiler must drop (it once did not).
    used = {i for _, args, _ in nodes for i in args}
    sinks = [i for i in range(1, len(shapes)) if i not in used]
    outputs = sinks[-1:] if dtype == "int8" else sinks[-3:]  # the int8 reference follows one output
    return {
        "dtype": dtype,
        "config": config,
        "seed": draw(st.integers(0, 2**16)),
        "input": shape,
        "nodes": nodes,
        "outputs": outputs,
    }


@st.composite
def _node(draw, shapes, v, dtype, big):
    x = shapes[v]
    int8 = dtype == "int8"
    if len(x) == 4:
        kinds = ["conv"] * 4 + ["pool", "gap", "binary", "binary", "unary", "concat", "flatten"]
        kinds += [] if int8 else ["Transpose", "Sin", "softmax"]
    else:
        kinds = (
            ["gemm"] * 3 + ["binary", "unary"] + ([] if int8 else ["softmax", "slice", "concat", "Transpose", "Sin"])
        )
    op = draw(st.sampled_from(kinds))
    if op == "conv":
        dw = x[1] > 1 and draw(st.integers(0, 3)) == 0
        k = draw(st.sampled_from([1, 3, 3, 5]))
        stride = draw(st.sampled_from([1, 1, 2, 2, 3]))  # 3: NPU_E_STRIDE, stays on the CPU
        dil = 2 if draw(st.integers(0, 7)) == 0 else 1
        pads = [draw(st.integers(0, k - 1)) for _ in range(4)]
        if draw(st.booleans()):
            pads = [k // 2] * 4
        a = {
            "cout": x[1] if dw else draw(st.sampled_from([1, 4, 8, 16, 24, 32] + ([64, 96] if big else []))),
            "k": k,
            "stride": stride,
            "dil": dil,
            "pads": pads,
            "group": "dw" if dw else 1,
            "bias": draw(st.booleans()),
            "act": draw(st.sampled_from([None, "Relu", "Clip"])),
        }
        if min(out_shape("conv", [x], a)[2:]) < 1:
            return None
        return ["conv", [v], a]
    if op == "pool":
        k = draw(st.sampled_from([2, 3]))
        pads = [0] * 4 if int8 or draw(st.integers(0, 3)) else [draw(st.integers(0, k - 1)) for _ in range(4)]
        a = {
            "kind": draw(st.sampled_from(["MaxPool", "AveragePool"])),
            "k": k,
            "stride": draw(st.sampled_from([1, 2])),
            "pads": pads,
        }
        if min(out_shape("pool", [x], a)[2:]) < 1:
            return None
        return ["pool", [v], a]
    if op == "gap":
        return ["gap", [v], {}]
    if op == "flatten":
        if int(np.prod(x[1:])) > 4096:
            return None
        return ["flatten", [v], {}]
    if op == "binary":
        kind = draw(st.sampled_from(BINARY))  # int8: quantize_static leaves Sub / Max / Min in float (CPU)
        same = [i for i, s in enumerate(shapes) if s == x]
        operand = draw(st.sampled_from(["tensor", "tensor", "channel", "scalar"]))
        a = {"kind": kind, "operand": operand, "const_first": operand != "tensor" and draw(st.booleans())}
        if operand == "tensor":
            return ["binary", [v, draw(st.sampled_from(same))], a]
        return ["binary", [v], a]
    if op == "unary":
        if int8:
            return ["unary", [v], {"kind": draw(st.sampled_from(INT8_UNARY))}]
        return ["unary", [v], {"kind": draw(st.sampled_from(MAP_UNARY))}]
    if op == "concat":
        axis = 1 if len(x) == 4 else 0
        fits = [
            i for i, s in enumerate(shapes) if len(s) == len(x) and all(d == x[j] for j, d in enumerate(s) if j != axis)
        ]
        return ["concat", [v, draw(st.sampled_from(fits))], {"axis": axis}]
    if op == "gemm":
        n = draw(st.integers(200, 600) if big else st.integers(1, 64))
        # MatMul (transB False) has no int8 form in the numpy reference: int8 takes Gemm.
        return [
            "gemm",
            [v],
            {
                "n": n,
                "bias": draw(st.booleans()),
                "transB": int8 or draw(st.booleans()),
                "act": draw(st.sampled_from([None, "Relu", "Clip"])),
            },
        ]
    if op == "slice":
        if x[0] < 2:
            return None
        start = draw(st.integers(0, x[0] - 1))
        return ["slice", [v], {"start": start, "stop": draw(st.integers(start + 1, x[0]))}]
    return [op, [v], {}]  # softmax, Transpose, Sin


# --------------------------------------------------------------------------------------------------
# Spec -> ONNX


class _Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def const(self, value, dtype=np.float32):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op, inputs, **attrs):
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def act(self, y, act):
        if act == "Relu":
            return self.node("Relu", [y])
        if act == "Clip":
            return self.node("Clip", [y, self.const(0.0), self.const(6.0)])
        return y


def build_onnx(spec) -> onnx.ModelProto:
    """The spec's ONNX model (opset 17), weights drawn from the spec's seed."""
    b = _Builder(spec["seed"])
    names, shapes = ["input"], [list(spec["input"])]
    for op, args, a in spec["nodes"]:
        ins = [names[i] for i in args]
        x = shapes[args[0]]
        y = _emit(b, op, ins, x, a)
        names.append(y)
        shapes.append(out_shape(op, [shapes[i] for i in args], a))
    fam = graph_fuzz_families
    outs = [
        helper.make_tensor_value_info(names[i], TensorProto.FLOAT, fam.output_shape(spec, shapes[i]))
        for i in spec["outputs"]
    ]
    graph = helper.make_graph(b.nodes, "fuzz", fam.graph_inputs(spec), outs, b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _emit(b, op, ins, x, a):
    rng = b.rng
    if op in graph_fuzz_families.ALL_KINDS:
        return graph_fuzz_families.emit(b, op, ins, x, a)
    if op == "conv":
        group = x[1] if a["group"] == "dw" else 1
        cout = x[1] if group > 1 else a["cout"]
        fan_in = x[1] // group * a["k"] ** 2
        w = rng.standard_normal((cout, x[1] // group, a["k"], a["k"])) * np.sqrt(2.0 / fan_in)
        inputs = [ins[0], b.const(w)] + ([b.const(rng.standard_normal(cout) * 0.1)] if a["bias"] else [])
        y = b.node(
            "Conv",
            inputs,
            kernel_shape=[a["k"]] * 2,
            strides=[a["stride"]] * 2,
            pads=a["pads"],
            dilations=[a["dil"]] * 2,
            group=group,
        )
        return b.act(y, a["act"])
    if op == "pool":
        return b.node(a["kind"], ins, kernel_shape=[a["k"]] * 2, strides=[a["stride"]] * 2, pads=a["pads"])
    if op == "gap":
        return b.node("GlobalAveragePool", ins)
    if op == "flatten":
        return b.node("Flatten", ins)
    if op == "binary":
        if len(ins) == 1:
            if a["operand"] == "scalar":
                c = np.float32(rng.uniform(0.5, 1.5) * rng.choice([-1, 1]))
                c = np.full([1] * len(x), c) if a["kind"] in ("Max", "Min") else c
            else:
                shape = [1, x[1], 1, 1] if len(x) == 4 else [x[-1]]
                c = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
            ins = [b.const(c), ins[0]] if a["const_first"] else [ins[0], b.const(c)]
        return b.node(a["kind"], ins)
    if op == "unary":
        if a["kind"] == "Clip":
            return b.node("Clip", [ins[0], b.const(-1.0), b.const(1.0)])
        if a["kind"] == "LeakyRelu":
            return b.node("LeakyRelu", ins, alpha=0.1)
        return b.node(a["kind"], ins)
    if op == "concat":
        return b.node("Concat", ins, axis=a["axis"])
    if op == "gemm":
        k = x[1]
        w = rng.standard_normal((a["n"], k)) * np.sqrt(1.0 / k)
        if a["transB"]:
            inputs = [ins[0], b.const(w)] + ([b.const(rng.standard_normal(a["n"]) * 0.1)] if a["bias"] else [])
            y = b.node("Gemm", inputs, transB=1)
        else:
            y = b.node("MatMul", [ins[0], b.const(w.T)])
            if a["bias"]:
                y = b.node("Add", [y, b.const(rng.standard_normal(a["n"]) * 0.1)])
        return b.act(y, a["act"])
    if op == "softmax":
        return b.node("Softmax", ins, axis=-1)
    if op == "slice":
        return b.node("Slice", [ins[0]] + [b.const([i], np.int64) for i in (a["start"], a["stop"], 0)])
    if op == "Transpose":
        perm = list(range(len(x)))
        perm[-2:] = perm[-1], perm[-2]
        return b.node("Transpose", ins, perm=perm)
    return b.node(op, ins)  # Sin


# --------------------------------------------------------------------------------------------------
# Running and judging one spec


@dataclass
class Outcome:
    kind: str  # pass | coded | skip | fail | error | internal
    detail: str = ""
    worst: float = 0.0  # fp16: the worst ratio of error to bound; int8: the worst LSB difference
    npu_ops: int = 0
    cpu_ops: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def bug(self) -> bool:
        return self.kind in ("fail", "error", "internal")


def depths(spec):
    """Per value, the number of fp16 roundings on its longest path (a family node may count several)."""
    d, shapes = [0], [list(spec["input"])]
    for op, args, a in spec["nodes"]:
        d.append(graph_fuzz_families.node_depth(op, a, shapes[args[0]]) + max(d[i] for i in args))
        shapes.append(out_shape(op, [shapes[i] for i in args], a))
    return d


def inputs_for(spec, n=1, seed_offset=0):
    """`n` draws of the model's input (standard normal); with graph inputs beyond it (a family spec's
    "inputs"), `n` lists of arrays, the input first."""
    rng = np.random.default_rng(spec["seed"] + 1000 + seed_offset)
    extra = spec.get("inputs", [])
    draws = [
        [rng.standard_normal(spec["input"]).astype(np.float32)]
        + [np.array(v[0], np.int64) if v else rng.standard_normal(s).astype(np.float32) for _, s, *v in extra]
        for _ in range(n)
    ]
    return [d if len(d) > 1 else d[0] for d in draws]


def check(spec, tmp_dir=None) -> Outcome:
    """Compile `spec` for the NPU, run it and judge it against the reference (module docstring)."""
    import warnings

    import tvm_npu
    from tvm_npu.backend.fallback import STOPS

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tvm_npu.NPUFallbackWarning)  # the report says it (internal)
            return (_check_int8 if spec["dtype"] == "int8" else _check_fp16)(spec, tmp_dir)
    except Exception as err:  # pylint: disable=broad-except  # classify, never let the fuzzer die
        # A coded error is an answer only when it is a documented compile-time refusal (the reference
        # ran the graph): any other code on a graph TVM compiles is a bug, as is an uncoded exception.
        if isinstance(err, tvm_npu.NPUError) and err.code in STOPS:
            return Outcome("coded", f"{err.code}: {str(err)[:300]}")
        return Outcome("error", f"{type(err).__name__}: {err}\n{traceback.format_exc()[-3000:]}")


def _internal(report):
    """An Outcome "internal" when a region fell back with NPU_E_INTERNAL (a compiler bug the build
    survived: the answer is right, the fallback hides the bug), else None."""
    hit = [p for p in report.placements if p.code == "NPU_E_INTERNAL"]
    if not hit:
        return None
    return Outcome("internal", f"{len(hit)} op(s) fell back with NPU_E_INTERNAL: {hit[0].reason}")


def _build(mod, spec):
    import tvm_npu

    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, config=spec["config"], report=report)
    return ex, report


def _run(ex, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (x if isinstance(x, list) else [x])])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def _check_fp16(spec, tmp_dir):
    import tvm

    import tvm_npu

    model = build_onnx(spec)
    try:
        mod = tvm_npu.from_onnx(model)
        ref_ex = tvm.compile(mod, target="llvm")
    except Exception as err:  # pylint: disable=broad-except
        return Outcome("skip", f"reference: {type(err).__name__}: {str(err)[:200]}")
    ex, report = _build(mod, spec)
    if (bad := _internal(report)) is not None:
        return bad
    d = depths(spec)
    out = Outcome("pass", npu_ops=report.npu_ops, cpu_ops=len(report.placements) - report.npu_ops)
    for x in inputs_for(spec, 2):
        want, got = _run(ref_ex, x), _run(ex, x)
        for i, (w, g) in enumerate(zip(want, got)):
            if not np.all(np.isfinite(w)) or np.abs(w).max(initial=0) > 3.0e4:
                return Outcome("skip", "the float reference leaves the fp16 range")
            if g.shape != w.shape:
                return Outcome("fail", f"output {i}: shape {g.shape}, reference {w.shape}")
            bound = 4 * U_FP16 * (d[spec["outputs"][i]] + 1)
            ref_norm = float(np.linalg.norm(w))
            err = float(np.linalg.norm(np.nan_to_num(g.astype(np.float64) - w, nan=1e30, posinf=1e30, neginf=1e30)))
            # Roundings are relative to the operands, which stay O(rms(x)) here (He-scaled weights,
            # constants of magnitude 0.5 - 1.5), not to a result that cancelled out (a dot product
            # near 0, relu of negatives): hence the sqrt(n) rms(x) term.
            scale = ref_norm + np.sqrt(w.size) * float(np.sqrt(np.mean(np.square(x[0] if isinstance(x, list) else x))))
            ratio = err / (bound * scale)
            out.worst = max(out.worst, ratio)
            if ratio > 1:
                return Outcome(
                    "fail",
                    f"output {i}: ||npu - ref|| = {err:.3g} > {bound:.3g} * (||ref|| + "
                    f"sqrt(n) rms(x)) = {bound * scale:.3g} (max abs diff {np.abs(g - w).max():.3g})",
                    worst=ratio,
                    npu_ops=out.npu_ops,
                    cpu_ops=out.cpu_ops,
                )
    return out


def _check_int8(spec, tmp_dir):
    import tempfile
    from pathlib import Path

    import tvm_npu
    from npu_ref import QDQInterpreter
    from qdq_models import quantize_with_ort

    model = build_onnx(spec)
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice to pre-process, every call
    with tempfile.TemporaryDirectory(dir=tmp_dir) as tmp:
        try:
            q = quantize_with_ort(model, inputs_for(spec, 8, seed_offset=50), Path(tmp) / "q.onnx")
            sess = _ort_int8(q)
        except Exception as err:  # pylint: disable=broad-except
            return Outcome("skip", f"onnxruntime quantize: {type(err).__name__}: {str(err)[:200]}")
    try:
        mod = tvm_npu.from_onnx(q)
    except Exception as err:  # pylint: disable=broad-except
        return Outcome("skip", f"import: {type(err).__name__}: {str(err)[:200]}")
    ex, report = _build(mod, spec)
    if (bad := _internal(report)) is not None:
        return bad
    boundary = ("relax.quantize", "relax.dequantize")
    cpu = [p for p in report.placements if p.device == "cpu" and p.op not in boundary]
    out = Outcome("pass", npu_ops=report.npu_ops, cpu_ops=len(cpu))
    s_y = _output_scale(q)
    d = depths(spec)[spec["outputs"][0]]
    if s_y is None:  # the output is not dequantized: float ops at the end, on the fp16 datapath
        return _check_float_tail(spec, q, ex, sess, out, d)
    ref = QDQInterpreter(q) if not cpu else None
    out.extra["oracle"] = "numpy" if ref is not None else "onnxruntime"
    for x in inputs_for(spec, 2):
        (got,) = _run(ex, x)
        want = None
        if ref is not None:
            try:
                want = ref.run(x)
            except (NotImplementedError, KeyError, ValueError):  # a QDQ form the numpy reference does
                ref, out.extra["oracle"] = None, "onnxruntime"  # not model (Concat; ops ORT left in float)
        if want is not None:
            lsb = np.abs(got.astype(np.float64) - want) / s_y
            out.worst = max(out.worst, float(np.nanmax(lsb, initial=0)))
            if not np.array_equal(got, want):
                return Outcome(
                    "fail",
                    f"int8, all on the NPU: not bit-exact against the numpy reference "
                    f"(max {lsb.max():.0f} LSB, {int((lsb > 0.5).sum())} of {lsb.size})",
                    worst=out.worst,
                    npu_ops=out.npu_ops,
                )
        else:
            want = sess.run(None, {"input": x})[0]
            lsb = np.rint(np.abs(got.astype(np.float64) - want) / s_y)
            out.worst = max(out.worst, float(lsb.max(initial=0)))
            if out.worst > 2 * (d + 1):
                return Outcome(
                    "fail",
                    f"int8 with CPU ops {sorted({p.op for p in cpu})}: {out.worst:.0f} LSB "
                    f"from onnxruntime > {2 * (d + 1)}",
                    worst=out.worst,
                    npu_ops=out.npu_ops,
                    cpu_ops=len(cpu),
                )
    return out


def _ort_int8(q):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _check_float_tail(spec, q, ex, sess, out, d):
    """An "int8" graph whose output quantize_static left in float (it quantized nothing, or the last
    ops are ones it does not quantize): the tail runs in fp16. Against onnxruntime, within the fp16
    bound plus 2 LSB of the coarsest activation scale per op: ||npu - ort||_2 <= 4 u (d + 1) ||ort||_2
    + 2 (d + 1) s_max sqrt(n)."""
    init = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    scales = [float(init[n.input[1]]) for n in q.graph.node if n.op_type == "QuantizeLinear"]
    s_max = max(scales, default=0.0)
    out.extra["oracle"] = "onnxruntime (float output)"
    for x in inputs_for(spec, 2):
        (got,) = _run(ex, x)
        want = sess.run(None, {"input": x})[0]
        if not np.all(np.isfinite(want)) or np.abs(want).max(initial=0) > 3.0e4:
            return Outcome("skip", "the float reference leaves the fp16 range")
        bound = 4 * U_FP16 * (d + 1) * np.linalg.norm(want) + 2 * (d + 1) * s_max * np.sqrt(want.size)
        err = float(np.linalg.norm(np.nan_to_num(got.astype(np.float64) - want, nan=1e30)))
        out.worst = max(out.worst, err / max(bound, 1e-30))
        if err > bound + 1e-6 * np.sqrt(want.size):  # (an all-zero output with nothing quantized: bound 0)
            return Outcome(
                "fail",
                f"int8 graph with a float output: ||npu - ort|| = {err:.3g} > {bound:.3g}",
                worst=out.worst,
                npu_ops=out.npu_ops,
                cpu_ops=out.cpu_ops,
            )
    return out


def _output_scale(q) -> float | None:
    """The scale of the dequantize giving the model's output, or None when the output is float."""
    init = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    last = next(n for n in q.graph.node if n.output[0] == q.graph.output[0].name)
    return float(init[last.input[1]]) if last.op_type == "DequantizeLinear" else None
