"""concat, reshape / flatten, slice (views and joins that move no data on the NPU), requantize, and the
int8 model's quantize / dequantize at its float inputs and outputs."""

from __future__ import annotations

import numpy as np

from .case import Case, quants, tag
from .net import Net


def concat_net(shapes, axis):
    def make(rng) -> Net:  # noqa: ARG001
        net = Net([(f"x{i}", list(s)) for i, s in enumerate(shapes)])
        # Each input computed on the NPU (a sigmoid), as in a network: a concatenation of model inputs
        # alone would be an NPU region that computes nothing.
        ins = [net.node("Sigmoid", [f"x{i}"]) for i in range(len(shapes))]
        net.outputs = [net.node("Concat", ins, axis=axis)]
        return net

    return make


def view_net(shape, op, **kw):
    def make(rng) -> Net:  # noqa: ARG001
        net = Net([("x", list(shape))])
        if op == "Flatten":
            y = net.node("Flatten", ["x"], axis=kw["axis"])
        elif op == "Reshape":
            y = net.node("Reshape", ["x", net.init(np.array(kw["to"], np.int64), ("raw",))])
        elif op == "Slice":
            ins = ["x"] + [net.init(np.array(kw[k], np.int64), ("raw",)) for k in ("starts", "ends", "axes", "steps")]
            y = net.node("Slice", ins)
        else:  # requantize / quantize I/O: an Identity between the input's and the output's QDQ
            y = net.node("Identity", ["x"])
        net.outputs = [y]
        if kw.get("same_q"):
            net.same_q[y] = "x"
        return net

    return make


CONCATS = [
    ([(1, 8, 3, 5), (1, 8, 3, 5)], 1),
    ([(1, 16, 3, 5), (1, 8, 3, 5), (1, 24, 3, 5)], 1),
    ([(1, 16, 2, 2), (1, 16, 2, 2)], -3),
    ([(1, 3, 4, 4), (1, 5, 4, 4)], 1),
    ([(1, 8, 3, 5), (1, 8, 2, 5)], 2),
    ([(1, 8, 3, 5), (1, 8, 3, 1)], 3),
    ([(2, 8, 3, 5), (1, 8, 3, 5)], 0),
    ([(3, 16), (5, 16)], 0),
    ([(3, 16), (3, 7)], 1),
    ([(2, 3, 16), (1, 3, 16)], 0),
    ([(2, 3, 16), (2, 3, 16)], -1),
    ([(1, 7), (1, 7), (1, 7)], -2),
]
RESHAPES = [
    ((1, 16, 1, 1), "Flatten", dict(axis=1)),
    ((2, 8, 1, 1), "Flatten", dict(axis=1)),
    ((1, 4, 3, 5), "Flatten", dict(axis=1)),
    ((2, 3, 16), "Flatten", dict(axis=0)),
    ((2, 3, 16), "Flatten", dict(axis=-1)),
    ((1, 16, 1, 1), "Reshape", dict(to=[1, -1])),
    ((2, 8, 1, 1), "Reshape", dict(to=[0, 8])),
    ((4, 16), "Reshape", dict(to=[4, 16, 1, 1])),
    ((2, 3, 16), "Reshape", dict(to=[6, 16])),
    ((6, 16), "Reshape", dict(to=[2, 3, -1])),
    ((6, 16), "Reshape", dict(to=[16, 6])),
    ((1, 4, 3, 5), "Reshape", dict(to=[1, 4, 15])),
]
SLICES = [
    ((8, 16), dict(starts=[2], ends=[6], axes=[0], steps=[1])),
    ((8, 16), dict(starts=[-3], ends=[2**62], axes=[0], steps=[1])),
    ((8, 16), dict(starts=[0], ends=[-1], axes=[-2], steps=[1])),
    ((8, 16), dict(starts=[1], ends=[7], axes=[0], steps=[2])),
    ((8, 16), dict(starts=[7], ends=[0], axes=[0], steps=[-1])),
    ((8, 16), dict(starts=[3], ends=[11], axes=[1], steps=[1])),
    ((8, 16), dict(starts=[3], ends=[11], axes=[-1], steps=[1])),
    ((4, 3, 16), dict(starts=[1], ends=[3], axes=[0], steps=[1])),
    ((4, 3, 16), dict(starts=[1], ends=[3], axes=[1], steps=[1])),
    ((1, 8, 6, 5), dict(starts=[2], ends=[5], axes=[2], steps=[1])),
    ((1, 8, 6, 5), dict(starts=[0], ends=[4], axes=[1], steps=[1])),
    ((1, 9), dict(starts=[0], ends=[1], axes=[0], steps=[1])),
]
IO_SHAPES = [(1, 8, 5, 7), (3, 17), (2, 3, 5), (33,), (1, 1)]


def cases() -> list[Case]:
    qs = quants()
    out = []
    for i, (shapes, axis) in enumerate(CONCATS):
        name = f"axis{axis}-" + "-".join(tag({"": s}) for s in shapes)
        out.append(Case("concat", name, "fp16", ("relax.concat",), concat_net(shapes, axis)))
        q = qs[i % len(qs)]
        out.append(Case("concat", name, "int8", ("relax.concat",), concat_net(shapes, axis), quant=q))
    for i, (shape, op, kw) in enumerate(RESHAPES):
        name = f"{op}-{tag(kw)}-" + tag({"": shape})
        make = view_net(shape, op, same_q=True, **kw)
        out.append(Case("reshape", name, "fp16", ("relax.reshape",), make))
        out.append(Case("reshape", name, "int8", ("relax.reshape",), make, quant=qs[i % len(qs)]))
    for i, (shape, kw) in enumerate(SLICES):
        name = tag(kw) + "-" + tag({"": shape})
        make = view_net(shape, "Slice", same_q=True, **kw)
        out.append(Case("slice", name, "fp16", ("relax.strided_slice",), make))
        out.append(Case("slice", name, "int8", ("relax.strided_slice",), make, quant=qs[i % len(qs)]))
    for v in ("fp16_max", "inf_nan"):
        out.append(
            Case(
                "slice",
                "rows",
                "fp16",
                ("relax.strided_slice",),
                view_net(SLICES[0][0], "Slice", **SLICES[0][1]),
                values=v,
            )
        )
    # Requantize: the input's zero point and scale to the output's (different zero points: different
    # scales too); the quantize / dequantize of the model's float input and output around it.
    for i, q in enumerate(qs):
        if q.zp_in == q.zp_out:
            continue
        shape = IO_SHAPES[i % len(IO_SHAPES)]
        out.append(
            Case(
                "requantize",
                tag({"": shape}),
                "int8",
                ("relax.quantize",),
                view_net(shape, "Identity"),
                quant=q,
                amplitude=2.0,
            )
        )
    for i, shape in enumerate(IO_SHAPES):
        q = qs[i % len(qs)]
        make = view_net(shape, "Identity", same_q=True)
        for amp in (1.0, 100.0):  # 100: most codes saturate at the range's ends
            name = tag({"": shape}) + ("-saturating" if amp > 1 else "")
            out.append(
                Case("quantize_io", name, "int8", ("relax.quantize", "relax.dequantize"), make, quant=q, amplitude=amp)
            )
    return out
