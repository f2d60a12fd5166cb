"""Small QDQ ONNX models of the transformer ops' int8 forms (MATMUL, SOFTMAX, NORM; docs/npu.md section 2),
built node by node with per-tensor int8 scales and zero points, and onnxruntime on its integer kernels
(`session.qdqisint8allowed`), the int8 oracle of these tests."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class QDQGraph:
    """An ONNX graph under construction: float inputs, constants, QuantizeLinear / DequantizeLinear pairs."""

    def __init__(self):
        self.nodes, self.init, self.inputs = [], [], []
        self._n = 0

    def _name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def const(self, value, dtype) -> str:
        name = self._name("c")
        self.init.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    def node(self, op: str, ins: list, **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def q(self, x: str, scale: float, zp: int) -> str:
        """QuantizeLinear to int8 with a per-tensor scale and zero point: the codes' name."""
        return self.node("QuantizeLinear", [x, self.const(scale, np.float32), self.const(zp, np.int8)])

    def dq(self, codes: str, scale: float, zp: int) -> str:
        return self.node("DequantizeLinear", [codes, self.const(scale, np.float32), self.const(zp, np.int8)])

    def qdq(self, x: str, scale: float, zp: int) -> str:
        return self.dq(self.q(x, scale, zp), scale, zp)

    def model(self, out: str, shape, opset: int = 19) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "y"  # the last node is the output
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
        graph = helper.make_graph(self.nodes, "qdq", self.inputs, outputs, self.init)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 9
        onnx.checker.check_model(m)
        return m


def ort_int8(model):
    """onnxruntime's CPU provider with its integer kernels for every QDQ group it can fuse (QLinearMatMul, ...)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def lsb_diff(got, want, scale: float) -> np.ndarray:
    """|got - want| in output codes (both dequantized with `scale`)."""
    return np.rint(np.abs(np.asarray(got, np.float64) - want) / scale).astype(np.int64)
