"""Attention at widths where a head slice's offset is itself a multiple of the SRAM alignment (SD-1.5's
heads of 160 fp16 = 320 bytes put head 2 at 640 bytes; heads of 64 fp16 are 128 bytes, every one
aligned) and one image's heads go in one MATMUL (batch 1). Those streams are legal (format 1.8) but were
refused: the verifier took an aligned operand for a whole-row one, so its footprint reached into the
next buffer ("output overlaps its b"), and the version check took aligned interleaved batches for a 1.7
stream, which the runtime then refuses. Each block must now run as one NPU region within
1e-2 * max(1, max|ref|) of onnxruntime on the same ONNX model."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from head_attention import attention_model

ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize(
    "seq, heads, head_dim, ctx_seq",
    [
        (16, 2, 64, None),  # 128-byte heads: every head offset aligned, batches interleaved
        (16, 4, 160, None),  # SD-1.5 1280-wide heads: head 2 at 640 bytes
        (8, 8, 160, None),  # SD-1.5 1280-wide: its 8 heads of 160, heads 2, 4 and 6 aligned
        (8, 8, 80, None),  # SD-1.5 640-wide: 8 heads of 80 (160 bytes), head 4 at 640 bytes
    ],
)
def test_aligned_head_slices_run_on_the_npu(seq, heads, head_dim, ctx_seq):
    model, feeds = attention_model(1, seq, heads, head_dim, ctx_seq, seed=heads + head_dim)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), target="npu", config="npu-laptop", report=report)
    cpu = [(p.op, p.code, p.reason) for p in report.placements if p.device != "npu"]
    assert not cpu, cpu
    assert report.fallback_cost()["regions"] == 1
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    err, bound = float(np.abs(out - ref).max()), 1e-2 * max(1.0, float(np.abs(ref).max()))
    assert err <= bound, (err, bound)
