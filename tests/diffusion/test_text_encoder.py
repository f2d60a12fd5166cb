"""transformers' CLIPTextModel (tiny, seeded), exported at static shapes, built for the NPU: its
last_hidden_state against onnxruntime on the same file."""

import pytest

import tvm_npu
from tvm_npu.frontend import diffusion

from .reference import assert_close, feeds, npu, onnxruntime, placement


@pytest.mark.parametrize("batch", [1, 2])
def test_text_encoder_matches_onnxruntime(diffusers_export, batch):
    path = diffusers_export("text_encoder", batch=batch)
    inputs = feeds(path)
    report = tvm_npu.BuildReport()
    got = npu(diffusion.from_onnx(path, batch=batch), inputs, report)
    err = assert_close(got, onnxruntime(path, inputs))
    print(f"text encoder, batch {batch}: max error {err:.2e}; {placement(report)}")
    assert report.mac_percent() >= 99.0
    # the causal mask, built in the graph from static shapes, is a constant (frontend/static_fold.py):
    # the masked softmax fuses and the whole encoder is one NPU region (3 before issue 34); at batch 2 the
    # folded mask is [2, 1, 8, 8], two equal images, cut to one (rewrite/repeated_constants.py; 3 before)
    assert report.fallback_cost()["regions"] == 1
