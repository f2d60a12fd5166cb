"""tvm_npu.profile: per-layer cycles, DDR traffic and utilization, CSV and Chrome trace output, checked
against the runtime's own counters and against numbers computed here from the layer shapes."""

import csv
import json

import numpy as np
import pytest

import tvm_npu
from builders import chain, conv_layer, residual_block
from conftest import run_vm
from tvm_npu.tools.profiler import profile, random_inputs, to_csv
from tvm_npu.tools.trace import write_chrome_trace

CFG = tvm_npu.NPU_REF


def align(n, a=128):
    return -(-n // a) * a


def rows_bytes(n, h, w, c, elem=2):
    """A device tensor as stored: N*H rows of align(W*C*elem)."""
    return align(w * c * elem) * n * h


def conv_chain(rng):
    """(1,3,15,15) -> conv3x3 16 -> conv3x3/2 24 -> conv1x1 40, with odd widths so rows get padded."""
    layers = [conv_layer(rng, 3, 16, 3), conv_layer(rng, 16, 24, 3, stride=2), conv_layer(rng, 24, 40, 1)]
    return chain((1, 3, 15, 15), layers), layers


def conv_shapes(layers, h, w):
    """Per conv: (in NHWC, out NHWC, OC, KH, KW, IC), from the weights and strides alone."""
    out = []
    for lay in layers:
        oc, ic, kh, kw = lay["w"].shape
        s, p = lay["stride"], lay["pad"]
        oh, ow = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
        out.append(((1, h, w, ic), (1, oh, ow, oc), oc, kh, kw, ic))
        h, w = oh, ow
    return out


def runtime_profiles(mod, x):
    """The runtime's counters of an independent build and run of `mod`."""
    _, vm = run_vm(tvm_npu.build(mod), x, return_vm=True)
    return [tvm_npu.runtime.profile_of(m)["last"] for m in tvm_npu.runtime.npu_modules(vm)]


@pytest.fixture
def chain_profile(rng):
    mod, layers = conv_chain(rng)
    x = rng.standard_normal((1, 3, 15, 15)).astype(np.float32)
    return mod, layers, x, profile(mod, [x])


def test_totals_match_the_runtime(chain_profile):
    mod, _, x, prof = chain_profile
    runs = runtime_profiles(mod, x)
    assert prof["total_cycles"] == sum(r["total_cycles"] for r in runs) > 0
    assert prof["ddr_bytes"] == sum(r["ddr_read_bytes"] + r["ddr_write_bytes"] for r in runs)
    assert sum(lay["cycles"]["compute"] for lay in prof["layers"]) == sum(
        r["mac_cycles"] + r["vector_cycles"] for r in runs
    )
    assert sum(lay["ddr_read_bytes"] + lay["ddr_write_bytes"] for lay in prof["layers"]) == prof["ddr_bytes"]
    json.dumps(prof)  # plain JSON data


def test_layer_macs_bytes_and_utilization_from_the_shapes(chain_profile):
    _, layers, _, prof = chain_profile
    shapes = conv_shapes(layers, 15, 15)
    assert [lay["kind"] for lay in prof["layers"]] == ["conv"] * 3
    weights = 0
    io = {0: rows_bytes(*shapes[0][0]), len(shapes) - 1: rows_bytes(*shapes[-1][1])}
    for i, (lay, (_src, dst, oc, kh, kw, ic)) in enumerate(zip(prof["layers"], shapes)):
        assert lay["macs"] == dst[1] * dst[2] * oc * kh * kw * ic
        w = align(oc * kh * kw * ic * 2) + align(oc * 4)  # packed weight rows, then the fp32 bias
        weights += w
        # Constants, plus the region input (first layer) / output (last layer): intermediates may
        # stay in SRAM.
        assert lay["weight_bytes"] == w and lay["compulsory_ddr_bytes"] == w + io.get(i, 0)
        assert 0 < lay["mac_utilization"] <= 1
        assert lay["roofline_bound"] in ("compute", "memory")
        assert lay["intensity"] == pytest.approx(lay["macs"] / (lay["ddr_read_bytes"] + lay["ddr_write_bytes"]))
    (region,) = prof["regions"].values()
    assert region["compulsory_ddr_bytes"] == prof["compulsory_ddr_bytes"] == weights + sum(io.values())
    assert prof["ddr_bytes"] >= prof["compulsory_ddr_bytes"]
    macs = sum(lay["macs"] for lay in prof["layers"])
    peak = prof["total_cycles"] * CFG.mac_rows * CFG.mac_cols / CFG.fp16_rate_div
    assert prof["mac_utilization"] == pytest.approx(macs / peak) and 0 < prof["mac_utilization"] <= 1


def test_layer_cycles_partition_the_region(chain_profile):
    _, _, _, prof = chain_profile
    (region,) = prof["regions"].values()
    records = region["records"]
    for lay in prof["layers"]:
        c = lay["cycles"]
        assert 0 <= lay["start"] < lay["end"] <= region["total_cycles"]
        assert c["total"] == lay["end"] - lay["start"] <= region["total_cycles"]
        assert c["compute"] + c["overlap"] + c["stall"] == c["total"]
        assert min(c.values()) >= 0 and c["compute"] > 0
        own = [r for r in records if r["layer"] == lay["name"]]
        assert c["dma"] == sum(r["end"] - r["start"] for r in own if r["engine"].startswith("dma"))
        assert lay["commands"] == len(own)
    assert prof["sram_peak_bytes"] == region["sram_bytes_used"] > 0


def test_csv_has_a_header_and_a_row_per_layer(chain_profile, tmp_path):
    prof = chain_profile[3]
    to_csv(prof, tmp_path / "layers.csv")
    with open(tmp_path / "layers.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(prof["layers"]) == 3
    assert [int(r["macs"]) for r in rows] == [lay["macs"] for lay in prof["layers"]]
    assert [int(r["total_cycles"]) for r in rows] == [lay["cycles"]["total"] for lay in prof["layers"]]


def _trace(prof, path):
    write_chrome_trace(prof, path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in spans} <= set(names)  # every track is named
    for track in names:  # slices of one track never partly overlap (Perfetto would mis-nest them)
        on = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if (e["pid"], e["tid"]) == track)
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(on, on[1:])), names[track]
    return events, spans, names


def test_trace_has_all_four_engine_tracks(rng, tmp_path):
    mod, _ = residual_block(rng)
    prof = profile(mod)
    assert {lay["kind"] for lay in prof["layers"]} == {"conv", "add", "pool"}
    assert all(lay["mac_utilization"] <= 1 for lay in prof["layers"]) and prof["mac_utilization"] <= 1
    assert all(lay["macs"] == 0 for lay in prof["layers"] if lay["kind"] != "conv")
    (region,) = prof["regions"].values()
    assert sum(lay["cycles"]["compute"] for lay in prof["layers"]) == region["mac_cycles"] + region["vector_cycles"]
    _, spans, names = _trace(prof, tmp_path / "trace.json")
    tracks = {names[(e["pid"], e["tid"])] for e in spans}
    assert {"DMA ch0", "DMA ch1", "MAC array", "vector unit", "layers"} <= tracks
    mac = [e for e in spans if names[(e["pid"], e["tid"])] == "MAC array"]
    assert sum(e["dur"] for e in mac) == pytest.approx(region["mac_cycles"] / CFG.clock_mhz)


def test_trace_shows_the_cpu_op_between_two_npu_regions(rng, tmp_path):
    mod = chain((1, 8, 12, 12), [conv_layer(rng, 8, 16, 3), {"op": "cpu", "fn": "sin"}, conv_layer(rng, 16, 16, 3)])
    prof = profile(mod)
    assert len(prof["regions"]) == 2 and len(prof["layers"]) == 2
    first, second = sorted(prof["regions"].values(), key=lambda r: r["host_start_ns"])
    assert 0 < first["host_start_ns"] < first["host_end_ns"] < second["host_start_ns"] < second["host_end_ns"]
    events, spans, names = _trace(prof, tmp_path / "trace.json")
    cpu = [
        e
        for e in spans
        if e["name"] == "cpu fallback"
        and (e["args"]["after"], e["args"]["before"]) == (first["alias"], second["alias"])
    ]
    assert len(cpu) == 1 and names[(cpu[0]["pid"], cpu[0]["tid"])] == "CPU"
    assert cpu[0]["dur"] == pytest.approx((second["host_start_ns"] - first["host_end_ns"]) / 1e3, abs=1e-3)
    # On the time axis: the first call's NPU spans, the CPU span, then the second call's.
    pid = {
        e["args"]["name"].split()[1]: e["pid"]
        for e in events
        if e["name"] == "process_name" and e["args"]["name"].startswith("NPU ")
    }
    one = [e for e in spans if e["pid"] == pid[first["alias"]]]
    two = [e for e in spans if e["pid"] == pid[second["alias"]]]
    assert max(e["ts"] + e["dur"] for e in one) <= cpu[0]["ts"] + 1e-9
    assert min(e["ts"] for e in two) >= cpu[0]["ts"] + cpu[0]["dur"] - 1e-9
    assert max(e["ts"] + e["dur"] for e in two) == pytest.approx(
        (first["total_cycles"] + second["total_cycles"]) / CFG.clock_mhz + cpu[0]["dur"]
    )


def test_report_keeps_the_layers_and_command_map(rng):
    mod, _ = conv_chain(rng)
    report = tvm_npu.BuildReport()
    tvm_npu.build(mod, report=report)
    (region,) = report.regions.values()
    json.dumps(report.to_dict())
    names = [lay["name"] for lay in region["layers"]]
    assert len(region["command_layers"]) == region["commands"]
    assert set(region["command_layers"]) == set(names) | {""}  # "" is END
    assert [lay["macs"] for lay in region["layers"]] == [lay["macs"] for lay in profile(mod)["layers"]]


def test_default_inputs_are_seeded_and_shaped(rng):
    mod, _ = conv_chain(rng)
    a, b = random_inputs(mod), random_inputs(mod)
    assert len(a) == 1 and a[0].shape == (1, 3, 15, 15) and a[0].dtype == np.float32
    np.testing.assert_array_equal(a[0], b[0])


def test_int8_layers_count_one_mac_slot_each():
    """A quantized CNN: int8 MACs take one slot, so utilization is MACs / (cycles * rows * cols)."""
    from tvm_npu.models import small_cnn

    mod = tvm_npu.from_onnx(small_cnn(seed=2))
    calib = [np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype(np.float32) for i in range(4)]
    qmod, _ = tvm_npu.quantize(mod, calib, progress=False)
    prof = profile(qmod)
    # The classifier's softmax stays float after the int8 region: alone it would not pay for an NPU
    # region's boundary (NPU_E_REGION_TOO_SMALL), so every NPU layer is int8.
    assert {lay["dtype"] for lay in prof["layers"]} == {"int8"}
    macs = sum(lay["macs"] for lay in prof["layers"])
    assert macs == sum(r["macs"] for r in prof["regions"].values()) > 0
    assert prof["mac_utilization"] == pytest.approx(macs / (prof["total_cycles"] * CFG.mac_rows * CFG.mac_cols))
    for lay in prof["layers"]:
        assert lay["mac_utilization"] <= 1 and lay["cycles"]["total"] <= prof["total_cycles"]
