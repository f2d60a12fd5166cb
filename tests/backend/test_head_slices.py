"""Attention's head split and merge on the NPU as MATMUL head slices (format 1.8): an attention block in the
torch exporter's form (tests/head_attention.py; B 1 and 2, 2-8 heads of 8, 40 and 64, self- and
cross-attention with Sk != S, and our decoder's two-permute K) runs as one NPU region, Q.K^T, softmax and
.V included, within 1e-2 * max(1, max|ref|) of onnxruntime on the same ONNX model; a head of 4 fp16 (8
bytes, no SRAM beat) keeps its split and merge on the CPU with the reason, and still gives the answer."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from head_attention import attention_model

ort = pytest.importorskip("onnxruntime")


def _build(model, feeds):
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), target="npu", report=report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    err, bound = float(np.abs(out - ref).max()), 1e-2 * max(1.0, float(np.abs(ref).max()))
    return report, err, bound


@pytest.mark.parametrize(
    "batch, seq, heads, head_dim, ctx_seq, decoder_form",
    [
        (1, 16, 2, 8, None, False),
        (1, 16, 2, 8, None, True),
        (2, 16, 4, 8, 24, False),
        (1, 8, 8, 40, 12, False),
        (2, 8, 2, 64, None, False),
    ],
)
def test_attention_runs_as_one_npu_region(batch, seq, heads, head_dim, ctx_seq, decoder_form):
    model, feeds = attention_model(batch, seq, heads, head_dim, ctx_seq, decoder_form, seed=heads + seq)
    report, err, bound = _build(model, feeds)
    cpu = [(p.op, p.reason) for p in report.placements if p.device != "npu"]
    assert not cpu, cpu
    assert report.fallback_cost()["regions"] == 1
    composites = [p.composite for p in report.placements if p.op == "relax.matmul"]
    assert composites.count("npu.matmul_heads") == 2  # Q.K^T and P.V, their splits and merge inside
    assert err <= bound, (err, bound)


def test_a_head_of_eight_bytes_stays_on_the_cpu_with_its_reason():
    model, feeds = attention_model(1, 16, 4, 4, seed=1)
    report, err, bound = _build(model, feeds)
    permutes = [p for p in report.placements if p.op == "relax.permute_dims"]
    splits = [p for p in permutes if p.device == "cpu"]  # Q's and V's split, the merge
    assert len(permutes) == 4 and len(splits) == 3, permutes
    assert all(p.code == "NPU_E_LAYOUT" and "4 x 2 = 8 bytes" in p.reason for p in splits), permutes
    # K's split-and-transpose, axes [0, 2, 3, 1] of [1, 16, 4, 4], is a map's pixels as rows: 16 channels
    # of 32 bytes, restrided by a POOL copy (backend/plan/restride_plan.py).
    assert [p.composite for p in permutes if p.device == "npu"] == ["npu.permute_view"], permutes
    assert err <= bound, (err, bound)
