"""A Hugging Face decoder-with-past export quantized by onnxruntime's own MatMulNBits quantizer (4 bits,
block 32, the format the onnxruntime-genai builder writes), compiled with tvm_npu.llm.compile: its dense
layers run as int4 (W4A16) on the NPU, and every logits vector along onnxruntime's path is within 3e-2 x
max(1, max |ref|) of onnxruntime running the same quantized export (issue 21).

onnxruntime's quantizer takes MatMul nodes only: all of the Llama export's dense layers, and of GPT-2's
(whose Conv1D layers export as Gemm) the LM head. The model is compiled with its own codes (weights
"fp16": nothing else is quantized), so both sides run the same model."""

import numpy as np
import onnx
import pytest

import tvm_npu
from llm_import.test_step_model import ARCHS, PROMPT, _kv, _Reference
from tvm_npu.contract import stream
from tvm_npu.frontend import to_step_model

NEW = 10
INT4_CODES = (7, 8)  # docs/npu.md section 2: int4, uint4 (w_dtype's low byte)


def _quantized(path, out) -> str:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(path), bits=4, block_size=32, is_symmetric=False)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    assert any(n.op_type == "MatMulNBits" for n in onnx.load(str(out)).graph.node)
    return str(out)


@pytest.mark.parametrize("arch", ARCHS)
def test_matmul_nbits_export_runs_int4_within_3e2_of_onnxruntime(hf_export, tmp_path, arch):
    path = _quantized(hf_export(arch), tmp_path / f"{arch}-q4.onnx")
    lm = tvm_npu.llm.compile(path, max_context=32, prefill_len=8)
    convs = [
        c
        for m in lm._runners["decode"].modules
        for c in stream.decode(bytes(m["get_stream"]())).commands
        if c.op == "CONV2D"
    ]
    int4 = [c for c in convs if c.args["w_dtype"] & 0xFF in INT4_CODES]
    assert int4 and (arch != "llama" or len(int4) == len(convs)), [c.args["w_dtype"] for c in convs]
    ref = _Reference(path, *_kv(to_step_model(path, 32, 1)))
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0][0, -1]
    for _ in range(NEW):  # onnxruntime's tokens, so both follow one path
        assert np.abs(logits - want).max() <= 3e-2 * max(1.0, np.abs(want).max())
        token = int(want.argmax())
        logits, want = lm.decode(token), ref(np.array([[token]], np.int64))[0][0, -1]
