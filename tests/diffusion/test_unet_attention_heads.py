"""The tiny diffusers UNet's attention on the NPU (format 1.8's head slices): every matmul of two
activations (Q.K^T and P.V of its self- and cross-attention, heads of 8 channels at both widths) runs
as npu.matmul_heads, with its head split and merge inside and none of their reshapes or permutes on the
CPU, and the UNet still matches onnxruntime on the same file. Before format 1.8 the splits ran on the CPU
and cut this UNet into 27 NPU regions (43 with the former heads of 4); now 23 (the rest: the NCHW <-> rows
transposes around each transformer, the timestep embedding, resize)."""

import tvm_npu

from .reference import assert_close, feeds, npu, onnxruntime


def test_unet_attention_heads_run_in_the_matmul(diffusers_export):
    path = diffusers_export("unet")
    inputs = feeds(path)
    report = tvm_npu.BuildReport()
    assert_close(npu(tvm_npu.from_onnx(path), inputs, report), onnxruntime(path, inputs))
    rows = report.placements
    activations = [p for p in rows if p.op == "relax.matmul" and "dense" not in p.composite]
    # Four transformers (down, mid, two up) of self- and cross-attention: 8 attentions, 2 matmuls each.
    assert len(activations) == 16 and all(p.composite == "npu.matmul_heads" for p in activations), activations
    heads = [p for p in rows if p.composite == "npu.matmul_heads"]
    assert sum(p.op == "relax.permute_dims" for p in heads) == 8 * 4  # Q, K^T, V splits and the merge
    assert report.fallback_cost()["regions"] <= 23
