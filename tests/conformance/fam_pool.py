"""pool: MaxPool / AveragePool (kernels, strides, asymmetric pads, auto_pad, ceil_mode,
count_include_pad, dilations), GlobalAveragePool / GlobalMaxPool, ReduceMean (axes incl. negative,
keepdims)."""

from __future__ import annotations

import numpy as np

from .case import Case, quants, tag, variations
from .net import Net

POOL = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.mean", "relax.nn.adaptive_avg_pool2d", "relax.max")


def pool_net(p: dict):
    def make(rng) -> Net:  # noqa: ARG001 - no weights
        net = Net([("x", list(p["shape"]))])
        op = p["op"]
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            y = net.node(op, ["x"])
        elif op == "ReduceMean":
            if p.get("opset18"):
                net.opset = 18
                axes = net.init(np.array(p["axes"], np.int64), ("raw",))
                y = net.node(op, ["x", axes], keepdims=p["keepdims"])
            else:
                y = net.node(op, ["x"], axes=list(p["axes"]), keepdims=p["keepdims"])
        else:
            attrs = dict(kernel_shape=list(p["k"]), strides=list(p["stride"]), ceil_mode=p["ceil"])
            if isinstance(p["pads"], str):
                attrs["auto_pad"] = p["pads"]
            else:
                attrs["pads"] = list(p["pads"])
            if op == "AveragePool":
                attrs["count_include_pad"] = p["cip"]
            elif p["dil"] != (1, 1):
                attrs["dilations"] = list(p["dil"])
            y = net.node(op, ["x"], **attrs)
        net.outputs = [y]
        return net

    return make


def _valid(p) -> bool:
    if p["op"] not in ("MaxPool", "AveragePool") or isinstance(p["pads"], str):
        return True
    _, _, h, w = p["shape"]
    t, left, b, r = p["pads"]
    if max(t, b) >= p["k"][0] or max(left, r) >= p["k"][1]:
        return False  # ONNX: a pad must be smaller than the kernel
    eff = [p["dil"][i] * (p["k"][i] - 1) + 1 for i in range(2)]
    return h + t + b >= eff[0] and w + left + r >= eff[1]


BASE = dict(op="MaxPool", shape=(1, 8, 9, 7), k=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0), ceil=0, cip=0, dil=(1, 1))
AXES = dict(
    op=["AveragePool"],
    shape=[(1, 1, 1, 1), (1, 3, 1, 9), (2, 5, 7, 1), (1, 16, 12, 12)],
    k=[(1, 1), (3, 3), (3, 2), (1, 3)],
    stride=[(1, 1), (2, 1), (3, 3)],
    pads=[(1, 1, 1, 1), (0, 1, 1, 0), (1, 0, 0, 1), "SAME_UPPER", "SAME_LOWER", "VALID"],
    ceil=[1],
    cip=[1],
    dil=[(2, 2)],
)
GLOBAL = [
    dict(op="GlobalAveragePool", shape=(1, 8, 7, 5)),
    dict(op="GlobalAveragePool", shape=(2, 3, 1, 1)),
    dict(op="GlobalMaxPool", shape=(1, 8, 7, 5)),
    dict(op="ReduceMean", shape=(1, 8, 7, 5), axes=(2, 3), keepdims=1),
    dict(op="ReduceMean", shape=(1, 8, 7, 5), axes=(-2, -1), keepdims=1),
    dict(op="ReduceMean", shape=(1, 8, 7, 5), axes=(2, 3), keepdims=0),
    dict(op="ReduceMean", shape=(1, 8, 7, 5), axes=(1,), keepdims=1),
    dict(op="ReduceMean", shape=(1, 8, 7, 5), axes=(-1,), keepdims=1),
    dict(op="ReduceMean", shape=(2, 8, 3, 3), axes=(2, 3), keepdims=1, opset18=True),
    dict(op="ReduceMean", shape=(4, 16), axes=(-1,), keepdims=1),
]


def cases() -> list[Case]:
    out = []
    qs = quants()
    points = [p for p in variations(BASE, AXES, n_random=6, seed=4) if _valid(p)]
    points += [
        dict(BASE, op="AveragePool", **d)
        for d in (
            {"pads": (1, 1, 1, 1), "cip": 1},
            {"pads": (0, 1, 1, 0)},
            {"pads": "SAME_UPPER"},
            {"k": (3, 3), "ceil": 1},
        )
    ]
    for i, p in enumerate(points):
        name = tag({k: v for k, v in p.items() if BASE.get(k) != v}) or "base"
        out.append(Case("pool", name, "fp16", POOL, pool_net(p), attrs=p))
        for q in qs if i == 0 else [qs[i % len(qs)]]:
            out.append(Case("pool", name, "int8", POOL, pool_net(p), quant=q, attrs=p))
    for i, p in enumerate(GLOBAL):
        name = tag({k: v for k, v in p.items() if k != "shape"}) + "-" + tag({"": p["shape"]})
        out.append(Case("pool", name, "fp16", POOL, pool_net(p), attrs=p))
        out.append(Case("pool", name, "int8", POOL, pool_net(p), quant=qs[(i + 1) % len(qs)], attrs=p))
    for op in ("MaxPool", "AveragePool"):
        p = dict(BASE, op=op, k=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), cip=1)
        for values in ("fp16_max", "inf") + (("inf_nan",) if op == "AveragePool" else ()):
            out.append(Case("pool", op, "fp16", POOL, pool_net(p), values=values, attrs=p))
    return out
