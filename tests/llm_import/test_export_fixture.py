"""The fixture itself: the ONNX export computes what the transformers model computes (a tracer that
froze a shape-dependent branch would make every other test compare against a wrong model)."""

import numpy as np
import onnxruntime as ort
import pytest

from tvm_npu.models import hf_export as export_hf


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_export_matches_torch(hf_export, arch):
    import torch

    model = export_hf.build_model(arch)
    ids = np.array([[3, 17, 200, 45, 9, 1, 2]], np.int64)
    with torch.no_grad():
        full = model(torch.from_numpy(ids)).logits.numpy()
    sess = ort.InferenceSession(hf_export(arch))
    layers, heads = 2, 4 if arch == "gpt2" else 2
    past = {f"past_key_values.{i}.{kv}": np.zeros((1, heads, 0, 16), np.float32)
            for i in range(layers) for kv in ("key", "value")}  # fmt: skip
    out = sess.run(None, {"input_ids": ids[:, :4], "attention_mask": np.ones((1, 4), np.int64),
                          "position_ids": np.arange(4)[None], **past})  # fmt: skip
    np.testing.assert_allclose(out[0], full[:, :4], atol=1e-4, rtol=0)
    past = dict(zip(past, out[1:]))  # then 3 tokens against a past of 4
    out = sess.run(None, {"input_ids": ids[:, 4:], "attention_mask": np.ones((1, 7), np.int64),
                          "position_ids": np.arange(4, 7)[None], **past})  # fmt: skip
    np.testing.assert_allclose(out[0], full[:, 4:], atol=1e-4, rtol=0)
