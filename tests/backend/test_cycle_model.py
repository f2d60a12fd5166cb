"""The emulator's cycle counts against the formulas of docs/npu.md section 5."""

import math

import numpy as np
import pytest

import tvm_npu
from builders import chain, dense_layer
from conftest import npu_modules, run_vm
from tvm_npu.contract import stream
from tvm_npu.contract.config import NPU_REF


def test_large_gemm_is_compute_bound_within_10_percent(rng):
    m, k, n = 1024, 512, 512
    ex = tvm_npu.build(chain((m, k), [dense_layer(rng, k, n, bias=False)]))
    x = rng.standard_normal((m, k)).astype(np.float32)
    _, vm = run_vm(ex, x, return_vm=True)
    (module,) = npu_modules(vm)
    measured = tvm_npu.runtime.profile_of(module)["last"]["total_cycles"]
    c = NPU_REF
    formula = m * math.ceil(k / c.mac_rows) * math.ceil(n / c.mac_cols) * c.fp16_rate_div
    assert measured == pytest.approx(formula, rel=0.10)


def test_dma_only_copy_runs_at_ddr_bandwidth():
    c = NPU_REF
    rows, row_bytes = 4096, 1024  # 4 MiB through SRAM in 512 KiB pieces
    piece = 512
    cmds = []
    for i in range(rows // piece):
        cmds.append(
            stream.Command(
                "DMA_LOAD",
                dict(
                    channel=0,
                    ddr_addr=i * piece * row_bytes,
                    sram_addr=(i % 2) * piece * row_bytes,
                    rows=piece,
                    row_bytes=row_bytes,
                    ddr_stride=row_bytes,
                    sram_stride=row_bytes,
                ),
                {"dma1": 1},
            )
        )
        cmds.append(
            stream.Command(
                "DMA_STORE",
                dict(
                    channel=1,
                    sram_addr=(i % 2) * piece * row_bytes,
                    ddr_addr=(rows + i * piece) * row_bytes,
                    rows=piece,
                    row_bytes=row_bytes,
                    sram_stride=row_bytes,
                    ddr_stride=row_bytes,
                ),
                {"dma0": 0},
            )
        )
    cmds.append(stream.Command("END", {}, {"dma0": 0, "dma1": 0}))
    # Input and output are one [1, rows, 1, row_bytes/2] fp16 tensor each, staged by the runtime.
    view = (1, rows, 1, row_bytes // 2)
    tensors = [
        stream.TensorDesc("input", 0, "float16", "float32", "ROWS", (rows, row_bytes // 2), view, 0, row_bytes),
        stream.TensorDesc(
            "output", 0, "float16", "float32", "ROWS", (rows, row_bytes // 2), view, rows * row_bytes, row_bytes
        ),
    ]
    blob = stream.encode(stream.Stream(c, tensors, cmds, b"", 2 * rows * row_bytes, piece * row_bytes * 2))
    module = tvm_npu.runtime.create_module("copy", blob)
    import tvm

    x = np.random.default_rng(0).standard_normal((rows, row_bytes // 2)).astype(np.float32)
    y = tvm.runtime.tensor(np.zeros_like(x))
    module["copy"](tvm.runtime.tensor(x), y)
    np.testing.assert_array_equal(y.numpy(), x.astype(np.float16).astype(np.float32))
    measured = tvm_npu.runtime.profile_of(module)["last"]
    moved = 2 * rows * row_bytes
    assert measured["ddr_read_bytes"] + measured["ddr_write_bytes"] == moved
    assert measured["total_cycles"] == pytest.approx(moved / c.ddr_bytes_per_cycle, rel=0.10)
    assert measured["total_cycles"] == tvm_npu.backend.plan.cost_model.estimate(c, cmds).total_cycles
