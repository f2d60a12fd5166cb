"""`tvm_npu.tools.sustain` and `tvm-npu sustain` on built models: the NPU part of a frame is the time the
C++ emulator's cycle model counts when the library runs, the CPU part is measured outside the NPU calls,
and the command line writes the HTML report, the Perfetto counter tracks and the JSON."""

import json
import time

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from builders import chain, conv_layer
from tvm_npu.tools.cli import main
from tvm_npu.tools.sustain import measure_cpu_s, sustain


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(5)
    layers = [conv_layer(rng, 8, 16, 3), {"op": "cpu", "fn": "sin"}, conv_layer(rng, 16, 16, 3)]
    return chain((1, 8, 32, 32), layers)


@pytest.fixture(scope="module")
def library(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sustain")
    ex = tvm_npu.build(model, config="npu-small")
    lib = tvm_npu.export_library(ex, folder / "model.so")
    x = np.random.default_rng(0).standard_normal((1, 8, 32, 32)).astype(np.float32)
    np.save(folder / "x.npy", x)
    return ex, lib, folder / "x.npy", x


def test_npu_time_is_what_the_emulator_counts(library):
    ex, lib, _, x = library
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(x))
    cycles = sum(tvm_npu.runtime.profile_of(m)["last"]["total_cycles"] for m in tvm_npu.runtime.npu_modules(vm))
    assert cycles > 0
    res = sustain(lib, cpu_ms=0.25, fps=None, seconds=2, thermal="large").summary
    assert res["npu_ms_fastest"] == pytest.approx(cycles / 500e3)  # npu-small: 500 MHz
    assert res["config"] == "npu-small" and res["cpu_ms"] == 0.25 and not res["cpu_measured"]
    assert res["burst_fps"] == pytest.approx(1e3 / max(0.25, cycles / 500e3))


def test_cpu_part_is_measured_outside_the_npu_calls(library):
    ex, _, _, x = library
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(x)]
    vm["main"](*args)
    t0 = time.perf_counter()
    for _ in range(20):
        vm["main"](*args)
    wall = (time.perf_counter() - t0) / 20
    cpu = measure_cpu_s(vm, [x], repeats=20)
    assert 0 < cpu < 3 * wall + 0.005  # the sin on the CPU, the VM; not the emulator's time (load adds noise)
    slept = measure_cpu_s(vm, [x], repeats=5, pre=lambda: time.sleep(0.005))
    assert slept >= 0.005  # every sample holds the sleep, which the NPU calls' time does not cover


def test_an_irmodule_is_built_and_timed_with_random_inputs(model):
    res = sustain(model, config="npu-small", fps=30, seconds=3, policy="target", repeats=3).summary
    assert res["cpu_measured"] and res["cpu_ms"] > 0 and res["fps"] == pytest.approx(30, abs=1)


def test_cli_writes_report_trace_and_json(library, tmp_path, capsys):
    _, lib, x, _ = library
    html, trace, js = tmp_path / "s.html", tmp_path / "t.json", tmp_path / "s.json"
    argv = ["sustain", str(lib), "--input", str(x), "--seconds", "4", "--fps", "60", "--policy", "throttle"]
    assert main([*argv, "--html", str(html), "--trace", str(trace), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "throttle policy, phone cooler" in out and "peak temperature" in out
    assert (tmp_path / "s_sustain.png").stat().st_size > 1000 and "s_sustain.png" in html.read_text()
    events = json.loads(trace.read_text())["traceEvents"]
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"temperature C", "NPU clock MHz", "fps"}
    fps = [e["args"]["fps"] for e in events if e["name"] == "fps"]
    assert len(fps) == 4 and all(abs(f - 60) <= 1 for f in fps)
    doc = json.loads(js.read_text())
    assert doc["summary"]["fps"] == pytest.approx(60, abs=0.5) and len(doc["timeline"]["t_s"]) > 200


def test_cli_back_to_back_with_a_given_cpu_part(library, capsys):
    _, lib, _, _ = library
    assert main(["sustain", str(lib), "--cpu-ms", "1", "--fps", "0", "--seconds", "2", "--back-to-back"]) == 0
    assert "back to back" in capsys.readouterr().out


def test_cli_library_without_inputs_says_what_to_give(library, capsys):
    _, lib, _, _ = library
    assert main(["sustain", str(lib), "--seconds", "1"]) == 2
    err = capsys.readouterr().err
    assert "ERR_SHAPE_MISMATCH" in err and "--input" in err and "--cpu-ms" in err


def _two_blocks(helper) -> list:
    """Two identical weight-free attention blocks (x x^T, softmax, times x) around a CPU Sin."""

    def block(i, src):
        return [helper.make_node("Transpose", [src], [f"t{i}"], perm=[0, 2, 1]),
                helper.make_node("MatMul", [src, f"t{i}"], [f"s{i}"]),
                helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1),
                helper.make_node("MatMul", [f"p{i}", src], [f"o{i}"])]  # fmt: skip

    return block(0, "x") + [helper.make_node("Sin", ["o0"], ["m"])] + block(1, "m")


def test_a_region_called_twice_counts_twice(tmp_path):
    """Two identical attention blocks (x x^T softmax x) around a CPU Sin are one NPU module called twice
    per frame: the frame's NPU time is both calls' cycles, as the emulator counts them (it was one call's:
    the sustained frame rate came out about twice too high for such models). Without inputs the calls
    cannot be counted, and the summary says so."""
    from onnx import TensorProto, helper

    nodes = _two_blocks(helper)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32])],
                          [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [1, 16, 32])])  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    x = np.random.default_rng(0).standard_normal((1, 16, 32)).astype(np.float32)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(x))
    modules = tvm_npu.runtime.npu_modules(vm)
    assert [tvm_npu.runtime.profile_of(m)["calls"] for m in modules] == [2]  # one module, two calls
    cycles = tvm_npu.runtime.profile_of(modules[0])["total"]["total_cycles"]
    res = sustain(ex, inputs=[x], fps=None, seconds=1, thermal="large", repeats=2).summary
    assert res["npu_ms_fastest"] == pytest.approx(cycles / 1000e3) and res["region_calls_counted"]  # npu-ref
    lib = tvm_npu.export_library(ex, tmp_path / "m.so")
    assert not sustain(lib, cpu_ms=0.1, fps=None, seconds=1, thermal="large").summary["region_calls_counted"]


def test_estimate_counts_a_shared_region_once_per_call():
    """tvm_npu.estimate (the sweep's numbers) on the same two-block model: its cycles are the runtime's
    two calls of the one module (the cost model is the emulator's cycle model), not one."""
    from onnx import TensorProto, helper

    nodes = _two_blocks(helper)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32])],
                          [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [1, 16, 32])])  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    est = tvm_npu.estimate(tvm_npu.from_onnx(model))
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.zeros((1, 16, 32), np.float32)))
    (module,) = tvm_npu.runtime.npu_modules(vm)
    prof = tvm_npu.runtime.profile_of(module)
    assert prof["calls"] == 2 and est["cycles"] == prof["total"]["total_cycles"]
    split = sum(est[f"split_{k}_cycles"] for k in ("compute", "ddr", "overlap", "idle"))
    assert split == est["cycles"]
