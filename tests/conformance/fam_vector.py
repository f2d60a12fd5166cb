"""add (same shapes), eltwise (Add / Sub / Mul / Max / Min with broadcasting and constant operands),
the unary activations (Sigmoid, Tanh, Gelu (erf and tanh), LeakyRelu, HardSwish,
SiLU as Sigmoid * x) and softmax (axes, ranks, opsets)."""

from __future__ import annotations

import numpy as np

from .case import FULL, Case, quants, tag
from .fam_conv import act
from .net import Net

BINARY = ("Add", "Sub", "Mul", "Max", "Min")
# TVM 0.27 imports ONNX Max / Min (variadic) as broadcast_to + stack + max / min, which no NPU pattern
# matches: relax.maximum / minimum reach the NPU only from Relax.
RELAX_BINARY = (
    ("relax.add",),
    ("relax.subtract",),
    ("relax.multiply",),
    ("relax.maximum", "relax.max"),
    ("relax.minimum", "relax.min"),
)
UNARY = (
    "relax.sigmoid",
    "relax.tanh",
    "relax.nn.gelu",
    "relax.nn.leakyrelu",
    "relax.multiply",
    "relax.nn.relu",
    "relax.clip",
    "relax.nn.gelu_tanh",
    "relax.nn.silu",
)

# The second operand, as (kind, shape for an NCHW [1, 8, 5, 7] output or a [3, 16] matrix): a second
# input of the output's shape, per-channel constants in every spelling, a scalar, the last axis of a map
# (W: not a channel), a broadcast model input, and a first operand that broadcasts.
OPERANDS = {
    4: [
        ("input", (1, 8, 5, 7)),
        ("const", (8, 1, 1)),
        ("const", (1, 8, 1, 1)),
        ("const", ()),
        ("const", (7,)),
        ("input", (1, 8, 1, 1)),
        ("input_first", (1, 8, 1, 1)),
        ("const", (1, 8, 5, 7)),
    ],
    2: [("input", (3, 16)), ("const", (16,)), ("const", (1, 16)), ("const", ()), ("const", (3, 1)), ("input", (1, 16))],
    3: [("input", (2, 3, 16)), ("const", (16,)), ("input", (1, 3, 16))],
}
SHAPES = {4: (1, 8, 5, 7), 2: (3, 16), 3: (2, 3, 16)}


def binary_net(op, rank, kind, shape, activation="none"):
    def make(rng) -> Net:
        full = list(SHAPES[rank])
        if kind == "const":
            net = Net([("a", full)])
            ins = ["a", net.init(rng.standard_normal(shape).astype(np.float32))]
        elif kind == "input_first":
            net = Net([("a", list(shape)), ("b", full)])
            ins = ["a", "b"]
        else:
            net = Net([("a", full), ("b", list(shape))])
            ins = ["a", "b"]
        net.outputs = [act(net, net.node(op, ins), activation)]
        return net

    return make


def unary_net(op, shape, **attrs):
    def make(rng) -> Net:  # noqa: ARG001
        net = Net([("x", list(shape))])
        if op == "Gelu":
            net.opset = 20
        if op == "SiLU":  # torch's export: x * Sigmoid(x), one UNARY silu after rewrite/fuse_silu.py
            net.outputs = [net.node("Mul", ["x", net.node("Sigmoid", ["x"])])]
        elif "bounds" in attrs:
            net.outputs = [net.node(op, ["x"] + [net.init(np.float32(b), ("raw",)) for b in attrs["bounds"]])]
        else:
            net.outputs = [net.node(op, ["x"], **attrs)]
        return net

    return make


def softmax_net(shape, axis, opset, computed=True):
    """Softmax over `axis`; `computed`: of x * 0.5 (exact in fp16), a value the NPU computes, since a
    softmax of a float32 model input stays on the CPU (NPU_E_RANGE: the staging's rounding)."""

    def make(rng) -> Net:  # noqa: ARG001
        net = Net([("x", list(shape))], opset=opset)
        data = net.node("Mul", ["x", net.init(np.float32(0.5))]) if computed else "x"
        net.outputs = [net.node("Softmax", [data], axis=axis)]
        return net

    return make


def _binary_cases(qs) -> list[Case]:
    out = []
    i = 0
    for rank, operands in OPERANDS.items():
        for j, (kind, shape) in enumerate(operands):
            # Every op with every operand form in the full set; two ops per form (in turn) in CI's.
            picks = (
                range(len(BINARY)) if FULL else sorted({j % 5, (j + rank) % 5} | ({0} if kind == "input" else set()))
            )
            for op, rop in [(BINARY[k], RELAX_BINARY[k]) for k in picks]:
                same = kind == "input" and tuple(shape) == SHAPES[rank]
                family = "add" if op == "Add" and same else "eltwise"
                name = f"{op}-rank{rank}-{kind}" + tag({"": shape})
                make = binary_net(op, rank, kind, shape)
                out.append(Case(family, name, "fp16", rop, make))
                i += 1
                out.append(Case(family, name, "int8", rop, make, quant=qs[i % len(qs)]))
    for op, rop in zip(BINARY, RELAX_BINARY):
        for activation in ("relu", "clip6"):
            make = binary_net(op, 4, "const", (1, 8, 1, 1), activation)
            out.append(Case("eltwise", f"{op}-chan-{activation}", "fp16", rop, make))
            i += 1
            out.append(Case("eltwise", f"{op}-chan-{activation}", "int8", rop, make, quant=qs[i % len(qs)]))
        # Values near fp16's limits (the sum of two stays in range for Max / Min; Add / Sub / Mul at half
        # and tiny amplitudes) and infinities; NaN where the op defines it (arithmetic; Max / Min do not
        # say which operand a NaN comes from).
        make = binary_net(op, 4, "input", SHAPES[4])
        family = "add" if op == "Add" else "eltwise"
        values = ["inf", "fp16_tiny"] + (["inf_nan"] if op in ("Add", "Sub", "Mul") else [])
        values += ["fp16_max"] if op in ("Max", "Min") else []
        for v in values:
            out.append(Case(family, op, "fp16", rop, make, values=v))
        if op in ("Add", "Sub"):
            out.append(Case(family, f"{op}-large", "fp16", rop, make, amplitude=1.2e4))
    return out


def _unary_cases(qs) -> list[Case]:
    out = []
    specs = [
        ("Sigmoid", {}),
        ("Tanh", {}),
        ("Gelu", {}),
        ("Gelu", {"approximate": "tanh"}),
        ("SiLU", {}),
        ("LeakyRelu", {"alpha": 0.1}),
        ("LeakyRelu", {"alpha": 0.0}),
        ("LeakyRelu", {"alpha": 1.5}),
        ("LeakyRelu", {"alpha": -0.5}),
        ("HardSwish", {}),
        ("Relu", {}),
        ("Clip", {"bounds": (0.0, 6.0)}),
        ("Clip", {"bounds": (-1.0, 1.0)}),
    ]
    shapes = [(1, 8, 5, 7), (1, 1, 1, 1), (3, 17), (2, 3, 5), (9,)]
    i = 0
    for op, attrs in specs:
        for shape in shapes if op in ("Sigmoid", "HardSwish") else shapes[:1] + shapes[2:3]:
            name = f"{op}" + (f"-{tag(attrs)}" if attrs else "") + tag({"-": shape})
            make = unary_net(op, shape, **attrs)
            out.append(Case("unary", name, "fp16", UNARY, make, amplitude=3.0))
            i += 1
            out.append(Case("unary", name, "int8", UNARY, make, quant=qs[i % len(qs)], amplitude=3.0))
        make = unary_net(op, (1, 8, 5, 7), **attrs)
        name = f"{op}" + (f"-{tag(attrs)}" if attrs else "")
        for v in ("fp16_max", "inf", "inf_nan"):
            if v == "fp16_max" and abs(attrs.get("alpha", 0)) > 1:
                continue  # a result beyond fp16's range is inf by contract (docs/npu.md), not checked here
            if op == "HardSwish" and v == "inf":
                continue  # -inf * 0 (ONNX: x * relu6(x + 3) / 6 at x = -inf) is NaN: covered by inf_nan
            out.append(Case("unary", name, "fp16", UNARY, make, values=v))
    return out


def _softmax_cases(qs) -> list[Case]:
    out = []
    i = 0
    for shape in [(4, 10), (1, 1), (3, 1), (2, 3, 17), (1, 8, 5, 7), (33,)]:
        for axis in sorted({-1, 0, len(shape) - 1, min(1, len(shape) - 1)}):
            for opset in (13, 11):
                if opset == 11 and axis in (-1, len(shape) - 1):
                    continue  # opset 11 coerces to 2-D at the axis: the same as 13 only for the last one
                name = f"axis{axis}-opset{opset}" + tag({"-": shape})
                make = softmax_net(shape, axis, opset)
                out.append(Case("softmax", name, "fp16", ("relax.nn.softmax",), make, amplitude=3.0))
                i += 1
                out.append(
                    Case("softmax", name, "int8", ("relax.nn.softmax",), make, quant=qs[i % len(qs)], amplitude=3.0)
                )
    make = softmax_net((4, 10), -1, 13, computed=False)  # large values: the model-input refusal
    for v, amp in (("normal", 3000.0), ("fp16_tiny", 1.0), ("inf", 1.0), ("inf_nan", 1.0)):
        out.append(Case("softmax", f"rows-amp{amp:g}", "fp16", ("relax.nn.softmax",), make, values=v, amplitude=amp))
    return out


def cases() -> list[Case]:
    qs = quants()
    return _binary_cases(qs) + _unary_cases(qs) + _softmax_cases(qs)
