"""Design-space exploration: the grid, tvm_npu.estimate against the emulator, energy / area / Pareto by
hand, and a small sweep on a thread pool, on a process pool (the CLI) and resumed."""

import concurrent.futures as cf
import json

import numpy as np
import onnx
import pytest

import tvm_npu
from builders import chain, conv_layer, dense_layer
from conftest import npu_modules, run_vm
from tvm_npu.backend.plan.energy import AreaModel, EnergyModel
from tvm_npu.dse.grid import grid, parse_mac, parse_sram
from tvm_npu.dse.table import pareto_flags
from tvm_npu.models import small_cnn
from tvm_npu.tools.cli import main

KiB = 1024


def test_grid_values_parse_and_name_their_points():
    assert parse_mac("16x16, 32X8,64") == [(16, 16), (32, 8), (64, 64)]
    assert parse_sram(["512KiB", "1MiB", "1048576", "0.5KiB", "2MiB"]) == [512 * KiB, 1 << 20, 512, 2 << 20]
    points = grid(tvm_npu.NPU_REF, "16x16", "1MiB,1000B", "8,16")
    assert [p.name for p in points] == [
        "mac16x16-sram1MiB-ddr8",
        "mac16x16-sram1MiB-ddr16",
        "mac16x16-sram1000B-ddr8",
        "mac16x16-sram1000B-ddr16",
    ]
    assert points[1].config.ddr_bytes_per_cycle == 16 and points[1].config.vector_lanes == 64  # base kept
    # 1000 bytes is not a multiple of alignment x banks: a point the contract forbids, not a mistake.
    assert points[2].config is None and points[2].error.code == "ERR_INVALID_CONFIG"
    # The issue's grid (the defaults): 36 configurations the contract allows, 64x64 and 4 MiB included.
    issue = grid(tvm_npu.NPU_REF, "16x16,32x32,64x64", "512KiB,1MiB,2MiB,4MiB", "8,16,32")
    assert len(issue) == 36 and all(p.config is not None for p in issue)
    assert issue[-1].config.replace(name="x") == tvm_npu.NPU_REF.replace(
        name="x", mac_rows=64, mac_cols=64, sram_bytes=4 << 20, ddr_bytes_per_cycle=32
    )


@pytest.mark.parametrize(
    "option, spec, hint",
    [
        ("mac", "16y16", "ROWSxCOLS"),
        ("mac", "0x16", "positive"),
        ("sram", "2MB", "KiB / MiB"),
        ("sram", "lots", "e.g. 512KiB"),
        ("sram", "512KiB,,1MiB", "without empty"),
        ("ddr_bw", "", "one value"),
        ("ddr_bw", "1.5", "whole bytes"),
    ],
)
def test_bad_grid_values_are_coded_errors_that_say_what_to_write(option, spec, hint):
    values = {"mac": "16x16", "sram": "1MiB", "ddr_bw": "8", option: spec}
    with pytest.raises(tvm_npu.NPUError) as info:
        grid(tvm_npu.NPU_REF, **values)
    assert info.value.code == "ERR_INVALID_CONFIG" and hint in str(info.value)


@pytest.mark.parametrize(
    "config",
    [
        tvm_npu.NPU_SMALL.replace(sram_bytes=64 * KiB, mac_rows=8),
        tvm_npu.NPU_REF.replace(mac_rows=64, mac_cols=64, ddr_bytes_per_cycle=32),
    ],
)
def test_estimate_equals_what_the_emulator_counts(rng, config):
    """The estimate (nothing runs) against the C++ emulator's own cycle and traffic counters."""
    layers = [conv_layer(rng, 3, 24, 3, stride=2), conv_layer(rng, 24, 40, 3), conv_layer(rng, 40, 16, 1)]
    mod = chain((1, 3, 40, 36), layers)
    est = tvm_npu.estimate(mod, config)
    ex = tvm_npu.build(mod, config=config)
    _, vm = run_vm(ex, rng.standard_normal((1, 3, 40, 36)).astype(np.float32), return_vm=True)
    runs = [tvm_npu.runtime.profile_of(m)["last"] for m in npu_modules(vm)]
    assert est["cycles"] == sum(r["total_cycles"] for r in runs)
    assert est["mac_cycles"] == sum(r["mac_cycles"] for r in runs)
    assert est["ddr_bytes"] == sum(r["ddr_read_bytes"] + r["ddr_write_bytes"] for r in runs)
    # MACs from the shapes: 20x18 outputs x 24 x 27, 20x18 x 40 x 216, 20x18 x 16 x 40.
    assert est["macs"] == est["macs_fp16"] == 360 * (24 * 27 + 40 * 216 + 16 * 40)
    assert est["latency_us"] == est["cycles"] / config.clock_mhz and est["npu_ops"] == est["ops"]


def test_energy_and_area_from_the_documented_constants():
    e = EnergyModel()
    assert e.pj_per_sram_byte({"sram_bytes": 128 * KiB, "sram_banks": 16}) == 1.25  # 8 KiB banks
    assert e.pj_per_sram_byte(tvm_npu.NPU_REF) == 5.0  # 128 KiB banks: sqrt(16) x 1.25
    parts = e.energy_uj(tvm_npu.NPU_REF, macs_int8=10**6, macs_fp16=10**6, ddr_bytes=10**4, sram_bytes=10**5)
    assert parts["energy_mac_uj"] == pytest.approx(2.3) and parts["energy_ddr_uj"] == pytest.approx(1.6)
    assert parts["energy_sram_uj"] == pytest.approx(0.5) and parts["energy_uj"] == pytest.approx(4.4)
    assert AreaModel().area_mm2(1024, 2 << 20) == pytest.approx(1024 * 419e-6 + 2**24 * 0.5e-6)


def test_pareto_front_per_ddr_bandwidth():
    def row(name, lat, area, bw, ok=True):
        return {"name": name, "latency_us": lat, "area_mm2": area, "ddr_bytes_per_cycle": bw, "feasible": ok}

    rows = [
        row("a", 10, 1, 8),
        row("b", 5, 2, 8),
        row("c", 6, 3, 8),  # c: b is faster and smaller
        row("d", 10, 2, 8),
        row("e", 9, 9, 16),  # d: a is as fast and smaller; e: only one at 16 B/cycle
        row("f", 1, 1, 8, ok=False),
    ]  # an infeasible row dominates nothing
    assert pareto_flags(rows) == [True, True, False, False, True, False]
    assert pareto_flags(rows, group=None) == [True, True, False, False, False, False]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "small_cnn.onnx"
    onnx.save(small_cnn(seed=0, image=32), str(path))
    return path


GRID = {"mac": "8x8,16x16", "sram": "16KiB,32KiB,64KiB,1000B", "ddr_bw": "8"}


def test_sweep_on_threads_matches_direct_estimates_and_resumes(model_file, tmp_path):
    with cf.ThreadPoolExecutor(2) as pool:
        res = tvm_npu.sweep(model_file, **GRID, out=tmp_path, base="npu-small", executor=pool, progress=False)
    assert res.estimated == 8 and len(res.rows) == 8
    by = {r["name"]: r for r in res.rows}
    assert by["mac8x8-sram16KiB-ddr8"]["error_code"] == "ERR_SRAM_OVERFLOW"  # the model does not fit
    assert by["mac8x8-sram16KiB-ddr8"]["reason"].startswith("layer ")  # the code is apart, in error_code
    assert "does not fit 16384 bytes" in by["mac8x8-sram16KiB-ddr8"]["reason"]
    assert by["mac16x16-sram1000B-ddr8"]["error_code"] == "ERR_INVALID_CONFIG"  # the contract forbids it
    mod = tvm_npu.from_onnx(str(model_file))
    for name in ("mac8x8-sram32KiB-ddr8", "mac16x16-sram64KiB-ddr8"):
        r = by[name]
        want = tvm_npu.estimate(
            mod, tvm_npu.NPU_SMALL.replace(mac_rows=r["mac_rows"], mac_cols=r["mac_cols"], sram_bytes=r["sram_bytes"])
        )
        assert (r["cycles"], r["ddr_bytes"], r["mac_cycles"]) == (want["cycles"], want["ddr_bytes"], want["mac_cycles"])
        assert r["energy_uj"] == pytest.approx(want["energy_uj"])
    assert {f.name for f in res.files} >= {
        "results.jsonl",
        "sweep.csv",
        "latency_vs_sram.png",
        "latency_vs_macs.png",
        "latency_vs_area.png",
        "energy_vs_latency.png",
    }
    assert all(f.read_bytes()[:4] == b"\x89PNG" for f in res.files if f.suffix == ".png")
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8 and {json.loads(x)["name"] for x in lines} == set(by)
    # Resume: nothing to do; then a torn last line (a sweep killed mid-write) is estimated again.
    again = tvm_npu.sweep(model_file, **GRID, out=tmp_path, base="npu-small", executor=None, progress=False)
    assert again.estimated == 0 and again.rows == res.rows
    (tmp_path / "results.jsonl").write_text("\n".join(lines[:-1] + [lines[-1][:20]]) + "\n")
    with cf.ThreadPoolExecutor(1) as pool:
        third = tvm_npu.sweep(
            model_file, **GRID, out=tmp_path, base="npu-small", executor=pool, progress=False, plots=False
        )
    assert third.estimated == 1 and [r["cycles"] for r in third.rows if r["feasible"]] == [
        r["cycles"] for r in res.rows if r["feasible"]
    ]


def test_cli_sweep_on_a_process_pool(model_file, tmp_path, capsys):
    """The default executor (spawned processes) gives the rows the threads give."""
    args = [
        "sweep",
        str(model_file),
        "--mac",
        GRID["mac"],
        "--sram",
        GRID["sram"],
        "--ddr-bw",
        "8",
        "--base",
        "npu-small",
        "-j",
        "2",
        "--out",
        str(tmp_path / "p"),
        "--no-plots",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "8 configurations (4 feasible" in out and "8 estimated now" in out
    assert "ERR_SRAM_OVERFLOW: layer" in out and "ERR_INVALID_CONFIG: NPUConfig.sram_bytes" in out
    with cf.ThreadPoolExecutor(2) as pool:
        ref = tvm_npu.sweep(
            model_file, **GRID, out=tmp_path / "t", base="npu-small", executor=pool, progress=False, plots=False
        )
    rows = [json.loads(x) for x in (tmp_path / "p" / "results.jsonl").read_text().splitlines()]
    got = {r["name"]: (r["feasible"], r.get("cycles"), r.get("ddr_bytes")) for r in rows}
    assert got == {r["name"]: (r["feasible"], r.get("cycles"), r.get("ddr_bytes")) for r in ref.rows}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sram", "2MB"], "ERR_INVALID_CONFIG: --sram '2MB'"),
        (["--mac", ""], "ERR_INVALID_CONFIG: --mac ''"),
        (["--jobs", "0"], "--jobs 0"),
    ],
)
def test_cli_sweep_bad_input_is_one_line(model_file, tmp_path, capsys, extra, message):
    assert main(["sweep", str(model_file), "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tvm-npu: error: ") and message in err and len(err.splitlines()) == 1


def test_cli_sweep_missing_model(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.onnx"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(tvm_npu.NPUError, match="does not exist"):
        tvm_npu.sweep(tmp_path / "nope.onnx", out=tmp_path)


def test_sweep_runs_on_dask_when_installed(model_file, tmp_path):
    """docs/dse.md's recipe: a Dask cluster's executor (skipped where dask.distributed is not installed)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        res = tvm_npu.sweep(
            model_file,
            mac="8x8",
            sram="32KiB,64KiB",
            ddr_bw="8",
            out=tmp_path,
            base="npu-small",
            executor=client.get_executor(),
            progress=False,
            plots=False,
        )
    mod = tvm_npu.from_onnx(str(model_file))
    want = tvm_npu.estimate(mod, tvm_npu.NPU_SMALL.replace(mac_rows=8, mac_cols=8, sram_bytes=64 * KiB))
    assert res.estimated == 2 and res.rows[1]["cycles"] == want["cycles"]


def test_sweep_runs_on_ray_when_installed(model_file, tmp_path):
    """docs/dse.md's Ray adapter (skipped where ray is not installed)."""
    ray = pytest.importorskip("ray")
    from tvm_npu.dse.run import RayExecutor

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        res = tvm_npu.sweep(
            model_file,
            mac="8x8",
            sram="32KiB,64KiB",
            ddr_bw="8",
            out=tmp_path,
            base="npu-small",
            executor=RayExecutor(),
            progress=False,
            plots=False,
        )
    finally:
        ray.shutdown()
    mod = tvm_npu.from_onnx(str(model_file))
    want = tvm_npu.estimate(mod, tvm_npu.NPU_SMALL.replace(mac_rows=8, mac_cols=8, sram_bytes=32 * KiB))
    assert res.estimated == 2 and res.rows[0]["cycles"] == want["cycles"]


def test_estimate_counts_cpu_ops_without_timing_them(rng):
    mod = chain((4, 64), [dense_layer(rng, 64, 32), {"op": "cpu", "fn": "sin"}, dense_layer(rng, 32, 8)])
    est = tvm_npu.estimate(mod, "npu-ref")
    assert est["regions"] == 2 and est["ops"] - est["npu_ops"] >= 1 and est["macs"] == 4 * (64 * 32 + 32 * 8)
