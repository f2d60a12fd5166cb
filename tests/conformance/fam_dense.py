"""dense: MatMul with a constant weight (+ Add bias), Gemm (transposes, alpha, beta, bias shapes), with
relu / clip; a MatMul of two activations (no constant weight)."""

from __future__ import annotations

import numpy as np

from .case import Case, quants, tag, variations
from .fam_conv import act
from .net import Net

DENSE = ("relax.matmul",)


def dense_net(p: dict):
    def make(rng) -> Net:
        m, k, n = p["mkn"]
        lead = list(p.get("lead", ()))
        if p["form"] == "gemm":
            a_shape = [k, m] if p["transA"] else [m, k]
            net = Net([("x", a_shape)])
            w = rng.standard_normal((n, k) if p["transB"] else (k, n)) / np.sqrt(k)
            wn = net.init(w.astype(np.float32), ("weight", 0 if p["transB"] else 1))
            ins = ["x", wn]
            if p["bias"] != "none":
                shape = {"n": (n,), "1n": (1, n), "mn": (m, n), "scalar": ()}[p["bias"]]
                role = ("bias", wn, "x") if p["bias"] in ("n",) and p["beta"] == 1.0 else ("const",)
                ins.append(net.init((rng.standard_normal(shape) * 0.3).astype(np.float32), role))
            y = net.node("Gemm", ins, transA=p["transA"], transB=p["transB"], alpha=p["alpha"], beta=p["beta"])
        elif p["form"] == "matmul2":  # both operands activations
            net = Net([("x", lead + [m, k]), ("w", [k, n])])
            y = net.node("MatMul", ["x", "w"])
        else:
            net = Net([("x", lead + [m, k])])
            wn = net.init((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), ("weight", 1))
            y = net.node("MatMul", ["x", wn])
            if p["bias"] != "none":
                net.fused.add(y)
                y = net.node("Add", [y, net.init((rng.standard_normal(n) * 0.3).astype(np.float32), ("bias", wn, "x"))])
        net.outputs = [act(net, y, p["act"])]
        return net

    return make


MATMUL_BASE = dict(form="matmul", mkn=(4, 16, 8), lead=(), bias="n", act="none")
MATMUL_AXES = dict(
    mkn=[(1, 1, 1), (1, 16, 8), (3, 7, 5), (4, 33, 1), (8, 64, 40)],
    lead=[(1,), (2,), (2, 3)],
    bias=["none"],
    act=["relu", "clip6", "clip1"],
)
GEMM_BASE = dict(form="gemm", mkn=(3, 12, 6), transA=0, transB=1, alpha=1.0, beta=1.0, bias="n", act="none")
GEMM_AXES = dict(
    mkn=[(1, 5, 3), (5, 9, 1)],
    transA=[1],
    transB=[0],
    alpha=[0.5],
    beta=[2.0],
    bias=["none", "1n", "mn", "scalar"],
    act=["relu", "clip6"],
)


def cases() -> list[Case]:
    out = []
    qs = quants()
    points = variations(MATMUL_BASE, MATMUL_AXES, n_random=3, seed=2)
    points += variations(GEMM_BASE, GEMM_AXES, n_random=3, seed=3)
    points += [
        dict(form="matmul2", mkn=(4, 8, 6), act="none"),
        dict(form="matmul2", mkn=(2, 8, 6), lead=(3,), act="none"),
    ]
    for i, p in enumerate(points):
        base = MATMUL_BASE if p["form"] == "matmul" else GEMM_BASE if p["form"] == "gemm" else {}
        name = p["form"] + (
            "-" + tag({k: v for k, v in p.items() if base.get(k) != v and k != "form"}) if p != base else ""
        )
        out.append(Case("dense", name, "fp16", DENSE, dense_net(p), attrs=p))
        if p["form"] == "gemm" and p["transA"]:
            continue  # (onnxruntime's QDQ Gemm with transA: its int8 path is not the reference here)
        for q in qs if p in (MATMUL_BASE, GEMM_BASE) else [qs[i % len(qs)]]:
            out.append(Case("dense", name, "int8", DENSE, dense_net(p), quant=q, attrs=p))
    small = dict(MATMUL_BASE, mkn=(2, 4, 3))
    out.append(Case("dense", "matmul-large", "fp16", DENSE, dense_net(small), amplitude=3000.0, attrs=small))
    for values in ("fp16_tiny", "inf", "inf_nan"):
        out.append(Case("dense", "matmul", "fp16", DENSE, dense_net(small), values=values, attrs=small))
    return out
