"""Float references for `tvm_npu.llm.perplexity`: the model a compiled LLM came from, run on the CPU on the
same tokens, `reference(window_ids int64 [w]) -> logits float32 [w, vocab]`. onnxruntime (the test extra)
on a decoder-with-past export, or torch (the llm extra) on a Hugging Face checkpoint folder; neither is a
run-time dependency of tvm_npu, so each is imported when asked for.
"""

from __future__ import annotations

import os

import numpy as np

from ..contract.errors import NPUError


def onnxruntime_logits(export):
    """The reference of a decoder-with-past ONNX export (a path or ModelProto): one onnxruntime call per
    window with an empty past, float32 throughout."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise NPUError("ERR_INVALID_CONFIG", "the float reference needs onnxruntime: pip install onnxruntime") from None
    data = export.SerializeToString() if hasattr(export, "SerializeToString") else os.fspath(export)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}

    def run(ids: np.ndarray) -> np.ndarray:
        n = ids.size
        feed = {"input_ids": ids.reshape(1, n).astype(np.int64)}
        if "attention_mask" in inputs:
            feed["attention_mask"] = np.ones((1, n), np.int64)
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(n, dtype=np.int64).reshape(1, n)
        for name, info in inputs.items():
            if name.startswith("past_key_values."):
                heads, dim = info.shape[1], info.shape[3]
                feed[name] = np.zeros((1, heads, 0, dim), np.float32)
        return sess.run(["logits"], feed)[0][0]

    return run


def torch_logits(folder):
    """The reference of a Hugging Face checkpoint folder: transformers' model in float32 on the CPU."""
    try:
        import torch
        import transformers
    except ImportError:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            "the float reference of a folder needs torch and transformers: pip install 'tvm_npu[llm]'",
        ) from None
    model = transformers.AutoModelForCausalLM.from_pretrained(os.fspath(folder), dtype=torch.float32).eval()

    def run(ids: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(input_ids=torch.from_numpy(ids.reshape(1, -1).astype(np.int64))).logits[0].numpy()

    return run
