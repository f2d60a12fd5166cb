"""Attention blocks in the form the torch exporter writes diffusers' and CLIP's scaled-dot-product
attention (ONNX opset 17), built with onnx.helper for the head-slice tests:

    Q: MatMul -> Reshape [B, S, H, D] -> Transpose [0, 2, 1, 3] -> Mul(sqrt(scale))
    K: MatMul -> Reshape [B, Sk, H, D] -> Transpose [0, 2, 3, 1] (K^T) -> Mul(sqrt(scale))
    V: MatMul -> Reshape [B, Sk, H, D] -> Transpose [0, 2, 1, 3]
    MatMul(Q, K^T) -> Softmax(-1) -> MatMul(., V) -> Transpose [0, 2, 1, 3] -> Reshape [B, S, H * D]
    -> MatMul(W_out) + bias

`decoder_form` writes K as ours does (models/decoder.py): Transpose [0, 2, 1, 3] then [0, 1, 3, 2]."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def attention_model(batch, seq, heads, head_dim, ctx_seq=None, decoder_form=False, seed=0):
    """(ModelProto, inputs dict) of one attention block: self-attention, or cross-attention over a
    context of `ctx_seq` rows (an input of its own, as the UNet's encoder states)."""
    rng = np.random.default_rng(seed)
    c = heads * head_dim
    cross = ctx_seq is not None
    sk = ctx_seq if cross else seq
    scale = float(np.float32(head_dim**-0.25))
    inits = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name):
        return const(name, (rng.standard_normal((c, c)) / np.sqrt(c)).astype(np.float32))

    nodes = []

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    ctx = "ctx" if cross else "x"
    q = node("MatMul", ["x", weight("wq")], "q")
    k = node("MatMul", [ctx, weight("wk")], "k")
    v = node("MatMul", [ctx, weight("wv")], "v")
    sq = const("sq", np.array([batch, seq, heads, head_dim], np.int64))
    sks = const("sk", np.array([batch, sk, heads, head_dim], np.int64))
    s_scale = const("scale", np.array(scale, np.float32))
    qh = node("Transpose", [node("Reshape", [q, sq], "q4")], "qh", perm=[0, 2, 1, 3])
    if decoder_form:
        kh = node("Transpose", [node("Reshape", [k, sks], "k4")], "kh0", perm=[0, 2, 1, 3])
        kh = node("Transpose", [kh], "kh", perm=[0, 1, 3, 2])
    else:
        kh = node("Transpose", [node("Reshape", [k, sks], "k4")], "kh", perm=[0, 2, 3, 1])
    vh = node("Transpose", [node("Reshape", [v, sks], "v4")], "vh", perm=[0, 2, 1, 3])
    qs = node("Mul", [qh, s_scale], "qs")
    ks = node("Mul", [kh, s_scale], "ks")
    p = node("Softmax", [node("MatMul", [qs, ks], "scores")], "probs", axis=-1)
    o = node("Transpose", [node("MatMul", [p, vh], "oh")], "o4", perm=[0, 2, 1, 3])
    so = const("so", np.array([batch, seq, c], np.int64))
    o = node("Reshape", [o, so], "o")
    bias = const("bo", (rng.standard_normal(c) * 0.1).astype(np.float32))
    node("Add", [node("MatMul", [o, weight("wo")], "proj"), bias], "y")
    f32 = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("x", f32, [batch, seq, c])]
    if cross:
        ins.append(helper.make_tensor_value_info("ctx", f32, [batch, sk, c]))
    graph = helper.make_graph(nodes, "attention", ins, [helper.make_tensor_value_info("y", f32, [batch, seq, c])],
                              inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    feeds = {"x": rng.standard_normal((batch, seq, c)).astype(np.float32)}
    if cross:
        feeds["ctx"] = rng.standard_normal((batch, sk, c)).astype(np.float32)
    return model, feeds
