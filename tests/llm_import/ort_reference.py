"""The onnxruntime reference of the decoder tests and benchmarks/import_matrix.py: onnxruntime running a
decoder-with-past file (or an onnxruntime-genai folder's model.onnx) with its growing past, fed only the
inputs the file declares (`input_ids`, `attention_mask` of ones, `position_ids` = arange when it takes
them, `past_key_values.{i}.key/value`), and onnxruntime's MatMulNBitsQuantizer applied to an export.

`exact=True` runs quantized weights as the file means them, in float: MatMulNBits' `accuracy_level` set
to 0 (the genai builder's 4 lets the CPU kernel quantize the activations to int8 blocks, a speed
option) and QDQ DequantizeLinear + MatMul kept float (onnxruntime's default
`session.qdq_matmulnbits_accuracy_level` 4 fuses them into MatMulNBits with int8 activations).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort


class OrtDecoder:
    """onnxruntime on `path` (a .onnx file or a folder holding model.onnx); `layers`, `kv_heads`,
    `head_dim` the past's shape (a step model's `tvm_npu.step` metadata, or `lm.meta["step"]`).
    Call with a list of token ids: the last row's logits [V]; `presents` holds the last call's."""

    def __init__(self, path: str, layers: int, kv_heads: int, head_dim: int, exact: bool = True):
        if os.path.isdir(path):
            path = os.path.join(path, "model.onnx")
        model = onnx.load(path)
        so = ort.SessionOptions()
        if exact:
            for node in model.graph.node:
                for attr in node.attribute:
                    if node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                        attr.i = 0
            so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        present = [n.replace("past_key_values.", "present.") for n in self.names]
        # present.{i}.* by name when the file uses optimum's names, else the outputs after the logits in order
        self.order = [self.outputs.index(n) for n in present] if set(present) <= set(self.outputs) else None
        self.past = [np.zeros((1, kv_heads, 0, head_dim), np.float32) for _ in self.names]
        self.pos = 0
        self.presents: list[np.ndarray] = []

    def __call__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, np.int64).reshape(1, -1)
        s = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((1, self.pos + s), np.int64)}
        if "position_ids" in self.inputs:
            feed["position_ids"] = np.arange(self.pos, self.pos + s, dtype=np.int64)[None]
        feed.update(zip(self.names, self.past))
        out = self.sess.run(None, {k: v for k, v in feed.items() if k in self.inputs})
        logits = out[self.outputs.index("logits") if "logits" in self.outputs else 0]
        self.presents = [out[i] for i in self.order] if self.order else out[1 : 1 + len(self.names)]
        self.past, self.pos = self.presents, self.pos + s
        return logits[0, -1]


def quantize_nbits(src: str, out: str, symmetric: bool, qdq: bool, block: int = 32) -> str:
    """`src` quantized by onnxruntime's MatMulNBitsQuantizer (4 bits, `block`): QOperator -> com.microsoft
    MatMulNBits, QDQ -> int4 / uint4 DequantizeLinear with `block_size` on axis 0 before a plain MatMul
    (opset 21: the model converted first, as a user would). Saved to `out`, returned."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(src)
    if qdq:  # int4 DequantizeLinear is opset 21; the quantizer would only relabel an opset 17 model
        model = onnx.version_converter.convert_version(model, 21)
    fmt = QuantFormat.QDQ if qdq else QuantFormat.QOperator
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=block, is_symmetric=symmetric, quant_format=fmt)
    quantizer.process()
    quantizer.model.save_model_to_file(out, use_external_data_format=False)
    return out
