"""Operator-format quantized ONNX (QLinearConv, QLinearMatMul) rewritten into the QDQ format.

TVM's ONNX frontend imports QDQ models (QuantizeLinear / DequantizeLinear around float ops) but not the
QOperator format. Both mean the same arithmetic, so the rewrite is exact:
QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B) == Q(Conv(DQ(x), DQ(w), DQ(B, sx * sw)), sy, zy).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..contract.errors import NPUError

# Integer-output ops with no QDQ equivalent the NPU patterns take: say what to do instead.
UNSUPPORTED = {
    "QLinearAdd": "Add",
    "QLinearMul": "Mul",
    "QLinearAveragePool": "AveragePool",
    "QLinearGlobalAveragePool": "GlobalAveragePool",
    "QLinearSigmoid": "Sigmoid",
    "QLinearLeakyRelu": "LeakyRelu",
    "QLinearConcat": "Concat",
    "QGemm": "Gemm",
}


def _bias_scale_initializer(model, sx_name, sw_name, out_name):
    """An initializer sx * sw (float32), the scale of a QLinearConv's int32 bias."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if sx_name not in init or sw_name not in init:
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"QLinearConv with non-constant scales ({sx_name}, {sw_name}); "
            "re-export the model in QDQ format (onnxruntime quantize_static, QuantFormat.QDQ)",
        )
    value = (init[sx_name].astype(np.float32) * init[sw_name].astype(np.float32)).astype(np.float32)
    return numpy_helper.from_array(value, out_name)


def qoperator_to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite QLinearConv / QLinearMatMul into DequantizeLinear -> op -> QuantizeLinear; refuse the
    other QOperator ops with ERR_OP_NOT_SUPPORTED naming the QDQ alternative."""
    ops = {n.op_type for n in model.graph.node}
    bad = sorted(ops & set(UNSUPPORTED))
    if bad:
        op = bad[0]
        raise NPUError(
            "ERR_OP_NOT_SUPPORTED",
            f"{op} (QOperator format) is not supported; quantize the model in QDQ format "
            f"(onnxruntime quantize_static(..., quant_format=QuantFormat.QDQ)), where it is "
            f"DequantizeLinear -> {UNSUPPORTED[op]} -> QuantizeLinear",
        )
    if not ops & {"QLinearConv", "QLinearMatMul"}:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for i, node in enumerate(model.graph.node):
        if node.op_type not in ("QLinearConv", "QLinearMatMul"):
            nodes.append(node)
            continue
        ins = list(node.input)
        p = f"_npu_qdq{i}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        nodes.append(helper.make_node("DequantizeLinear", ins[0:3], [p + "_x"]))
        if node.op_type == "QLinearConv":
            w_axis = {"axis": 0}
            nodes.append(helper.make_node("DequantizeLinear", ins[3:6], [p + "_w"], **w_axis))
            conv_in = [p + "_x", p + "_w"]
            if len(ins) > 8 and ins[8]:
                out.graph.initializer.append(_bias_scale_initializer(model, ins[1], ins[4], p + "_bs"))
                nodes.append(helper.make_node("DequantizeLinear", [ins[8], p + "_bs"], [p + "_b"], axis=0))
                conv_in.append(p + "_b")
            nodes.append(helper.make_node("Conv", conv_in, [p + "_y"], **attrs))
        else:
            nodes.append(helper.make_node("DequantizeLinear", ins[3:6], [p + "_w"]))
            nodes.append(helper.make_node("MatMul", [p + "_x", p + "_w"], [p + "_y"]))
        nodes.append(helper.make_node("QuantizeLinear", [p + "_y", ins[6], ins[7]], list(node.output)))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
