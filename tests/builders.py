"""Relax modules for the tests, built with the BlockBuilder from numpy weights."""

import numpy as np
from tvm import relax

from npu_ref import fp16


def module_of(fn, shapes):
    """main(x0, x1, ...) = fn(x0, x1, ...) on float32 inputs of `shapes`."""
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(fn(*xs)))
        bb.emit_func_output(out)
    return bb.get()


def chain(input_shape, layers):
    """A module whose main applies `layers` in order. A layer is a dict:
    {"op": "conv", "w": OIHW, "b": [OC] or None, "stride", "pad", "dil", "act"},
    {"op": "dense", "w": [N, K], "b": [N] or None, "act"}, or {"op": "cpu", "fn": "sin"|"reshape", ...}.
    """
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(input_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for layer in layers:
                y = _emit(bb, y, layer)
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _emit(bb, y, layer):
    op = layer["op"]
    if op == "conv":
        w = relax.const(layer["w"].astype(np.float32))
        y = bb.emit(
            relax.op.nn.conv2d(
                y,
                w,
                strides=layer.get("stride", 1),
                padding=layer.get("pad", 0),
                dilation=layer.get("dil", 1),
                groups=layer.get("groups", 1),
            )
        )
        if layer.get("b") is not None:
            y = bb.emit(relax.op.add(y, relax.const(layer["b"].astype(np.float32).reshape(1, -1, 1, 1))))
    elif op == "dense":
        w = relax.const(layer["w"].astype(np.float32))
        y = bb.emit(relax.op.matmul(y, relax.op.permute_dims(w)))
        if layer.get("b") is not None:
            y = bb.emit(relax.op.add(y, relax.const(layer["b"].astype(np.float32))))
    elif op == "cpu":
        if layer["fn"] == "sin":
            return bb.emit(relax.op.sin(y))
        return bb.emit(relax.op.reshape(y, layer["shape"]))
    act = layer.get("act", "none")
    if act == "relu":
        y = bb.emit(relax.op.nn.relu(y))
    elif act == "clip":
        y = bb.emit(relax.op.clip(y, 0, 6))
    return y


def chain_reference(x, layers):
    """What the NPU computes for chain(x.shape, layers): the layers on the numpy reference model (a "cpu"
    layer may only reshape)."""
    for layer in layers:
        act = layer.get("act", "none")
        if layer["op"] == "conv":
            s, d, p = layer.get("stride", 1), layer.get("dil", 1), layer.get("pad", 0)
            pad = p if isinstance(p, tuple) else (p,) * 4
            x = fp16.conv2d_nchw(x, layer["w"], layer["b"], (s, s), pad, (d, d), act)
        elif layer["op"] == "dense":
            x = fp16.dense(x, layer["w"], layer["b"], act)
        else:
            assert layer["fn"] == "reshape", layer
            x = x.reshape(layer["shape"])
    return x


def conv_layer(rng, cin, cout, k, stride=1, pad=None, dil=1, act="relu", bias=True):
    pad = k // 2 if pad is None else pad
    w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) / np.float32(np.sqrt(cin * k * k))
    b = rng.standard_normal(cout).astype(np.float32) * 0.1 if bias else None
    return {"op": "conv", "w": w, "b": b, "stride": stride, "pad": pad, "dil": dil, "act": act}


def dense_layer(rng, k, n, act="none", bias=True):
    w = rng.standard_normal((n, k)).astype(np.float32) / np.float32(np.sqrt(k))
    b = rng.standard_normal(n).astype(np.float32) * 0.1 if bias else None
    return {"op": "dense", "w": w, "b": b, "act": act}


def residual_block(rng, c=16, hw=20):
    """conv3x3+relu -> depthwise3x3+clip -> conv1x1 -> add(residual) -> maxpool 2x2 -> avgpool 3x3/2
    -> global mean; weights returned for the numpy reference."""
    w1 = (rng.standard_normal((c, 3, 3, 3)) / np.sqrt(27)).astype(np.float32)
    wd = (rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, hw, hw), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w1), padding=1)))
            d = bb.emit(relax.op.clip(relax.op.nn.conv2d(a, relax.const(wd), padding=1, groups=c), 0, 6))
            p = bb.emit(relax.op.nn.conv2d(d, relax.const(w2)))
            r = bb.emit(relax.op.add(a, p))
            m = bb.emit(relax.op.nn.max_pool2d(r, pool_size=2, strides=2))
            v = bb.emit(relax.op.nn.avg_pool2d(m, pool_size=3, strides=2))
            out = bb.emit_output(bb.emit(relax.op.mean(v, axis=[2, 3], keepdims=True)))
        bb.emit_func_output(out)
    return bb.get(), (w1, wd, w2)
