"""Per-region fallback (backend/fallback.py): a region the compiler fails on unexpectedly runs on the CPU
with reason NPU_E_INTERNAL and an NPUFallbackWarning, the other regions stay on the NPU, and the answer
is TVM's own; a documented compile-time refusal (ERR_SRAM_OVERFLOW) still fails the build."""

import logging

import numpy as np
import pytest

import tvm_npu
from builders import chain, conv_layer, dense_layer
from conftest import npu_modules, run_cpu, run_vm
from tvm_npu.backend.lower import registry


def two_regions(rng):
    """conv (NPU) -> sin (CPU) -> flatten (CPU: it crosses NCHW rows) -> dense (NPU)."""
    layers = [
        conv_layer(rng, 3, 8, 3),
        {"op": "cpu", "fn": "sin"},
        {"op": "cpu", "fn": "reshape", "shape": (1, 8 * 6 * 6)},
        dense_layer(rng, 8 * 6 * 6, 10),
    ]
    return chain((1, 3, 6, 6), layers)


def fail_dense(monkeypatch, error):
    def boom(comp):
        raise error

    monkeypatch.setitem(registry._LOWERINGS, "dense", boom)


def build_with_one_failure(rng, mod, match):
    """Build `mod`, expecting the NPUFallbackWarning `match`; the answer must be TVM's and only the conv's
    region left on the NPU. Returns the report."""
    report = tvm_npu.BuildReport()
    with pytest.warns(tvm_npu.NPUFallbackWarning, match=match):
        ex = tvm_npu.build(mod, report=report)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=2e-2, atol=2e-2)
    assert len(npu_modules(ex)) == 1  # the conv's region
    return report


def test_a_region_that_fails_to_lower_runs_on_the_cpu(rng, monkeypatch):
    mod = two_regions(rng)
    fail_dense(monkeypatch, RuntimeError("injected failure\nsecond line"))
    report = build_with_one_failure(rng, mod, "NPU_E_INTERNAL.*RuntimeError: injected failure")
    assert [p.op for p in report.placements if p.device == "npu"] == ["relax.nn.conv2d", "relax.add", "relax.nn.relu"]
    internal = [p for p in report.placements if p.code == "NPU_E_INTERNAL"]
    assert {p.op for p in internal} >= {"relax.matmul"} and all(p.device == "cpu" for p in internal)
    assert "RuntimeError: injected failure" in internal[0].reason and "second line" not in internal[0].reason
    assert "NPU_E_INTERNAL" in report.table()
    assert len(report.regions) == 1


def test_a_coded_lowering_refusal_falls_back_too(rng, monkeypatch):
    """ERR_OP_NOT_SUPPORTED from a lowering means a pattern accepted what its lowering cannot take: a
    compiler bug as far as the user is concerned, so the region runs on the CPU."""
    mod = two_regions(rng)
    fail_dense(monkeypatch, tvm_npu.NPUError("ERR_OP_NOT_SUPPORTED", "unexpected binding"))
    with pytest.warns(tvm_npu.NPUFallbackWarning, match="NPUError: ERR_OP_NOT_SUPPORTED"):
        ex = tvm_npu.build(mod)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=2e-2, atol=2e-2)
    assert len(npu_modules(ex)) == 1


def test_a_documented_compile_time_refusal_still_fails_the_build(rng, monkeypatch):
    mod = two_regions(rng)
    fail_dense(monkeypatch, tvm_npu.NPUError("ERR_SRAM_OVERFLOW", "does not fit"))
    with pytest.raises(tvm_npu.NPUError, match="ERR_SRAM_OVERFLOW"):
        tvm_npu.build(mod)


def test_fallback_in_a_main_with_match_cast(monkeypatch):
    """An Expand to a shape given at run time imports with match_cast, which leaves every composite a
    region of its own and main not plain dataflow: the failing region is still inlined where it is
    called."""
    import graph_fuzz

    conv = {"cout": 4, "k": 3, "stride": 1, "dil": 1, "pads": [1] * 4, "group": 1, "bias": True, "act": "Relu"}
    spec = {
        "dtype": "fp16",
        "config": "npu-ref",
        "seed": 5,
        "input": [1, 4, 8, 8],
        "inputs": [["s0", [4], [1, 4, 8, 8]]],
        "nodes": [["conv", [0], conv], ["conv", [1], conv], ["expand_input", [2], {"name": "s0"}]],
        "outputs": [3],
    }
    mod = tvm_npu.from_onnx(graph_fuzz.build_onnx(spec))
    assert "match_cast" in str(mod)
    real = registry._LOWERINGS["conv2d"]
    calls = []

    def second_fails(comp):
        calls.append(comp)
        if len(calls) == 2:
            raise ValueError("injected")
        return real(comp)

    monkeypatch.setitem(registry._LOWERINGS, "conv2d", second_fails)
    report = tvm_npu.BuildReport()
    with pytest.warns(tvm_npu.NPUFallbackWarning, match="ValueError: injected"):
        ex = tvm_npu.build(mod, report=report)
    (x,) = graph_fuzz.inputs_for(spec)
    np.testing.assert_allclose(run_vm(ex, *x), run_cpu(mod, *x), rtol=2e-2, atol=2e-2)
    rows = [(p.op, p.device, p.code) for p in report.placements if p.op == "relax.nn.conv2d"]
    assert sorted(rows) == [("relax.nn.conv2d", "cpu", "NPU_E_INTERNAL"), ("relax.nn.conv2d", "npu", "")]


def test_a_pattern_check_that_raises_leaves_the_op_on_the_cpu(rng, monkeypatch):
    """A check that meets a graph it did not foresee and raises refuses its match (NPU_E_INTERNAL) instead
    of ending the build inside TVM's FuseOpsByPattern; the other ops keep their NPU placement."""
    from tvm_npu.partition import checks

    def boom(*args):
        raise ValueError("unforeseen operand\nsecond line")

    mod = two_regions(rng)
    monkeypatch.setattr(checks, "constraint_weight_2d", boom)  # only the dense's check calls it
    report = build_with_one_failure(rng, mod, "NPU_E_INTERNAL, ValueError: unforeseen operand")
    internal = [p for p in report.placements if p.code == "NPU_E_INTERNAL"]
    assert [p.op for p in internal] == ["relax.matmul"] and internal[0].device == "cpu"
    assert "ValueError: unforeseen operand" in internal[0].reason


def _fail_lowering(monkeypatch):
    fail_dense(monkeypatch, RuntimeError("injected failure\nsecond line"))
    return "tvm_npu.backend.fallback", "falls back to the CPU", "RuntimeError: injected failure"


def _fail_check(monkeypatch):
    from tvm_npu.partition import checks

    def boom(*args):
        raise ValueError("unforeseen operand\nsecond line")

    monkeypatch.setattr(checks, "constraint_weight_2d", boom)
    return "tvm_npu.partition.checks", "its check failed, the op stays on the CPU", "ValueError: unforeseen operand"


@pytest.mark.parametrize("fail", [_fail_lowering, _fail_check])
def test_a_fallback_logs_one_line_at_warning_and_the_traceback_at_debug(rng, monkeypatch, caplog, fail):
    """A build that goes on after a fallback is not buried in tracebacks (the tutorials run at WARNING):
    one line saying what runs on the CPU and why; the traceback, for the bug report, at DEBUG."""
    logger, what, detail = fail(monkeypatch)
    text = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    with caplog.at_level(logging.WARNING, logger="tvm_npu"):
        build_with_one_failure(rng, two_regions(rng), "NPU_E_INTERNAL")
    mine = [r for r in caplog.records if r.name == logger]  # a check may refuse two patterns' matches
    assert mine and all(r.levelno == logging.WARNING for r in mine)
    for r in mine:
        line = text.format(r)
        assert "\n" not in line and what in line and line.endswith(detail) and "Traceback" not in line, line

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tvm_npu"):
        build_with_one_failure(rng, two_regions(rng), "NPU_E_INTERNAL")
    mine = [r for r in caplog.records if r.name == logger]
    assert [r.levelno for r in mine] == [logging.WARNING, logging.DEBUG] * (len(mine) // 2) and mine
    for warning, debug in zip(mine[::2], mine[1::2]):
        assert "\n" not in text.format(warning)
        trace = text.format(debug)
        assert "Traceback (most recent call last)" in trace and "second line" in trace and detail in trace
        assert f"{type(debug.exc_info[1]).__name__}: {debug.exc_info[1]}".startswith(detail)
