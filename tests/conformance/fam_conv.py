"""conv2d (dense, depthwise, grouped; bias; relu / clip), batch norm folded into it, and a zero Pad
folded into its padding."""

from __future__ import annotations

import numpy as np

from .case import Case, quants, tag, variations
from .net import Net

CONV = ("relax.nn.conv2d",)


def act(net: Net, y: str, kind: str) -> str:
    """A fused activation after `y` (its input stays float in the QDQ form)."""
    if kind == "none":
        return y
    net.fused.add(y)
    if kind == "relu":
        return net.node("Relu", [y])
    lo, hi = {"clip6": (0.0, 6.0), "clip1": (-1.0, 1.0), "clipmin": (-0.5, None)}[kind]
    ins = [y, net.init(np.float32(lo), ("raw",))]
    if hi is not None:
        ins.append(net.init(np.float32(hi), ("raw",)))
    return net.node("Clip", ins)


def conv_out(size, k, stride, dil, lo, hi):
    return (size + lo + hi - dil * (k - 1) - 1) // stride + 1


def _valid(p) -> bool:
    _, c, h, w = p["shape"]
    if p["group"] == 2 and c % 2:
        return False
    if isinstance(p["pads"], str):
        return p["pads"] != "VALID" or (
            h >= p["dil"][0] * (p["k"][0] - 1) + 1 and w >= p["dil"][1] * (p["k"][1] - 1) + 1
        )
    t, left, b, r = p["pads"]
    return (
        conv_out(h, p["k"][0], p["stride"][0], p["dil"][0], t, b) >= 1
        and conv_out(w, p["k"][1], p["stride"][1], p["dil"][1], left, r) >= 1
    )


def conv_net(p: dict):
    def make(rng) -> Net:
        n, c, h, w = p["shape"]
        groups, cout = {1: (1, p["cout"]), 2: (2, p["cout"]), "dw": (c, c), "dw2": (c, 2 * c)}[p["group"]]
        kh, kw = p["k"]
        fan_in = c // groups * kh * kw
        wgt = rng.standard_normal((cout, c // groups, kh, kw)) / np.sqrt(fan_in)
        net = Net([("x", [n, c, h, w])])
        x = "x"
        pads = p["pads"]
        if p.get("pad_op"):  # a zero Pad node before the convolution (rewrite/fuse_pad.py folds it)
            t, left, b, r = pads
            x = net.node("Pad", [x, net.init(np.array([0, 0, t, left, 0, 0, b, r], np.int64), ("raw",))])
            pads = [0, 0, 0, 0]
        wn = net.init(wgt.astype(np.float32), ("weight", 0))
        ins = [x, wn]
        if p["bias"]:
            ins.append(net.init((rng.standard_normal(cout) * 0.3).astype(np.float32), ("bias", wn, x)))
        attrs = dict(kernel_shape=[kh, kw], strides=list(p["stride"]), dilations=list(p["dil"]), group=groups)
        if isinstance(pads, str):
            attrs["auto_pad"] = pads
        else:
            t, left, b, r = pads
            attrs["pads"] = [t, left, b, r]
        y = net.node("Conv", ins, **attrs)
        if p.get("bn"):
            net.fused.add(y)
            stats = [
                1 + 0.3 * rng.standard_normal(cout),  # scale
                0.2 * rng.standard_normal(cout),  # B
                0.2 * rng.standard_normal(cout),  # mean
                0.5 + rng.random(cout),  # var
            ]
            y = net.node("BatchNormalization", [y] + [net.init(s.astype(np.float32), ("raw",)) for s in stats])
        net.outputs = [act(net, y, p["act"])]
        return net

    return make


BASE = dict(
    shape=(1, 8, 9, 7), cout=8, k=(3, 3), stride=(1, 1), dil=(1, 1), pads=(1, 1, 1, 1), group=1, bias=True, act="none"
)
AXES = dict(
    shape=[(1, 1, 1, 1), (1, 3, 1, 9), (1, 5, 7, 1), (2, 4, 5, 5), (1, 16, 11, 13), (1, 3, 17, 3)],
    cout=[1, 5, 24],
    k=[(1, 1), (2, 2), (3, 1), (1, 5), (5, 5)],
    stride=[(2, 2), (2, 1), (3, 3)],
    dil=[(2, 2), (1, 2)],
    pads=[(0, 0, 0, 0), (0, 1, 1, 0), (2, 0, 1, 2), "SAME_UPPER", "SAME_LOWER", "VALID"],
    group=["dw", 2, "dw2"],
    bias=[False],
    act=["relu", "clip6", "clip1", "clipmin"],
)


def cases() -> list[Case]:
    out = []
    # onnxruntime has no dilated SAME convolution: no independent reference for those combinations.
    points = [
        p
        for p in variations(BASE, AXES, n_random=8, seed=1)
        if _valid(p) and not (isinstance(p["pads"], str) and p["pads"] != "VALID" and max(p["dil"]) > 1)
    ]
    qs = quants()
    for i, p in enumerate(points):
        name = tag({k: v for k, v in p.items() if v != BASE[k]}) or "base"
        out.append(Case("conv2d", name, "fp16", CONV, conv_net(p), attrs=p))
        for q in qs if i == 0 else [qs[i % len(qs)]]:
            out.append(Case("conv2d", name, "int8", CONV, conv_net(p), quant=q, attrs=p))
    # Large inputs (a 1x1 sum of 8 terms of |x| ~ 3000 stays in fp16's range), tiny ones, infinities.
    small = dict(BASE, cout=4, k=(1, 1), pads=(0, 0, 0, 0))
    out.append(Case("conv2d", "1x1-large", "fp16", CONV, conv_net(small), amplitude=3000.0, attrs=small))
    for values in ("fp16_tiny", "inf", "inf_nan"):
        out.append(Case("conv2d", "1x1", "fp16", CONV, conv_net(small), values=values, attrs=small))
    for extra in (dict(bn=True), dict(bn=True, act="relu"), dict(bn=True, group="dw", act="clip6")):
        p = dict(BASE, **extra)
        name = tag(extra)
        out.append(Case("batch_norm", name, "fp16", CONV, conv_net(p), attrs=p))
        out.append(Case("batch_norm", name, "int8", CONV, conv_net(p), quant=qs[1], attrs=p))
    for pads in [(1, 1, 1, 1), (0, 2, 1, 0)]:
        p = dict(BASE, pads=pads, pad_op=True)
        name = tag({"pad_op": pads})
        out.append(Case("conv2d", name, "fp16", CONV, conv_net(p), attrs=p))
        out.append(Case("conv2d", name, "int8", CONV, conv_net(p), quant=qs[2], attrs=p))
    return out
