"""The sweep's sustained objectives (dse/sustained.py): every feasible row's sustained fps and energy per
inference equal a direct power.simulate of the same configuration's compiled streams, the stored time
split adds up to the cycle model's cycles, and the sustained front is the rows no other dominates."""

import concurrent.futures as cf

import onnx
import pytest

import tvm_npu
from tvm_npu.contract import stream
from tvm_npu.contract.config import NPUConfig
from tvm_npu.models import small_cnn
from tvm_npu.power import simulate, work_of

RUN = {"fps": 2000.0, "seconds": 5.0, "policy": "throttle", "thermal": "phone", "cpu_ms": 0.1}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    path = folder / "small_cnn.onnx"
    onnx.save(small_cnn(seed=0, image=32), str(path))
    with cf.ThreadPoolExecutor(2) as pool:
        res = tvm_npu.sweep(path, mac="8x8,16x16", sram="32KiB,64KiB", ddr_bw="8", out=folder, base="npu-small",
                            executor=pool, progress=False, plots=False, sustain=RUN)  # fmt: skip
    return path, res


def test_sustained_objectives_match_a_direct_simulation(swept):
    path, res = swept
    feasible = [r for r in res.rows if r["feasible"]]
    assert len(feasible) >= 2
    for r in feasible:
        cfg = NPUConfig(**r["config"])
        ex = tvm_npu.build(tvm_npu.from_onnx(str(path)), config=cfg)
        works = [
            work_of(cfg, stream.decode(bytes(m["get_stream"]())).commands) for m in tvm_npu.runtime.npu_modules(ex)
        ]
        work = sum(works[1:], works[0])
        assert work.cycles == r["cycles"]
        want = simulate(cfg, work, 1e-4, 2000.0, 5.0, "throttle", "phone").summary
        assert r["sustained_fps"] == pytest.approx(want["sustained_fps"])
        assert r["sustained_mj"] == pytest.approx(want["energy_per_inference_mj"])
        assert r["holds_fps"] == (want["sustained_fps"] >= 2000.0 - 3 / 5.0)


def test_sustained_front_is_the_undominated_rows(swept):
    _, res = swept
    rows = [r for r in res.rows if "sustained_mj" in r]
    for r in rows:
        dominated = any(
            o["sustained_frame_ms"] <= r["sustained_frame_ms"]
            and o["sustained_mj"] <= r["sustained_mj"]
            and (o["sustained_frame_ms"], o["sustained_mj"]) != (r["sustained_frame_ms"], r["sustained_mj"])
            for o in rows
        )
        assert r["pareto_sustained"] == (not dominated)
    assert any(r["pareto_sustained"] for r in rows)
    assert all(not r["pareto_sustained"] for r in res.rows if "sustained_mj" not in r)
