"""`tvm-npu compile / run / profile / report`, run in-process through cli.main as a user would."""

import csv
import json

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.models import small_cnn
from tvm_npu.tools.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    onnx.save(small_cnn(seed=0), str(d / "model.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(d / "x.npy", x)
    return d, x


def _error_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm-npu: error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_compile_then_run_matches_in_process_build(files, tmp_path, capsys):
    d, x = files
    lib = tmp_path / "out" / "model.so"
    assert main(["compile", str(d / "model.onnx"), "-o", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "17 of 17 ops, 100.0% of MACs on the NPU" in out  # the softmax too (SOFTMAX)
    report = json.loads((tmp_path / "out" / "model.report.json").read_text())
    assert report["summary"] == "17 of 17 ops, 100.0% of MACs on the NPU"
    assert (tmp_path / "out" / "model.report.txt").read_text().strip()

    assert main(["run", str(lib), str(d / "x.npy"), "-o", str(tmp_path / "y.npy")]) == 0
    assert "shape (1, 10) float32" in capsys.readouterr().out
    ex = tvm_npu.build(tvm_npu.from_onnx(str(d / "model.onnx")), config="npu-ref")
    want = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)


def test_profile_writes_csv_json_and_trace(files, tmp_path, capsys):
    d, _ = files
    paths = {k: tmp_path / f"prof.{k}" for k in ("csv", "json")}
    paths["trace"] = tmp_path / "trace.json"
    assert (
        main(
            [
                "profile",
                str(d / "model.onnx"),
                "--input",
                str(d / "x.npy"),
                "--config",
                "npu-small",
                *[a for k, p in paths.items() for a in (f"--{k}", str(p))],
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    prof = json.loads(paths["json"].read_text())
    assert prof["config"]["mac_rows"] == 16 and prof["layers"]
    assert prof["total_cycles"] > 0
    assert prof["total_cycles"] == sum(r["total_cycles"] for r in prof["regions"].values())
    total_line = next(line for line in out.splitlines() if line.startswith("total"))
    assert str(prof["total_cycles"]) in total_line and str(prof["ddr_bytes"]) in total_line
    with open(paths["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(prof["layers"])
    assert [int(r["total_cycles"]) for r in rows] == [lay["cycles"]["total"] for lay in prof["layers"]]
    assert json.loads(paths["trace"].read_text())["traceEvents"]


def test_report_prints_the_partition_table(files, capsys):
    d, _ = files
    assert main(["report", str(d / "model.onnx")]) == 0
    out = capsys.readouterr().out
    assert "17 of 17 ops, 100.0% of MACs on the NPU" in out and "npu.softmax" in out


def test_missing_model_is_a_one_line_error(tmp_path, capsys):
    missing = tmp_path / "nope.onnx"
    assert main(["compile", str(missing), "-o", str(tmp_path / "m.so")]) != 0
    assert "nope.onnx" in _error_line(capsys) and not (tmp_path / "m.so").exists()
    assert main(["report", str(missing)]) != 0
    assert "does not exist" in _error_line(capsys)


def test_corrupt_onnx_is_a_one_line_coded_error(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not an onnx model")
    assert main(["profile", str(bad)]) != 0
    err = _error_line(capsys)
    assert "ERR_INVALID_MODEL" in err and "bad.onnx" in err


def test_run_with_wrong_inputs_is_a_one_line_error(files, tmp_path, capsys):
    d, _ = files
    lib = tmp_path / "model.so"
    assert main(["compile", str(d / "model.onnx"), "-o", str(lib)]) == 0
    capsys.readouterr()
    assert main(["run", str(lib), str(d / "x.npy"), str(d / "x.npy")]) == 2  # the checked boundary's count
    err = _error_line(capsys)
    assert "ERR_SHAPE_MISMATCH" in err and "main takes 1 input(s)" in err and "2 given" in err
    assert main(["run", str(lib), str(tmp_path / "missing.npy")]) != 0
    assert "missing.npy" in _error_line(capsys)


@pytest.mark.parametrize(
    "bad, says",
    [
        (np.zeros((1, 3, 16, 16), np.float32), "axis 2 is 16, the model was compiled for 32"),
        (np.zeros((3, 32, 32), np.float32), "rank 3, the model takes rank 4"),
        (np.zeros((1, 3, 32, 32), np.float64), "float64 [1, 3, 32, 32]: cast with .astype(np.float32)"),
    ],
)
def test_run_of_a_wrong_input_is_the_boundarys_coded_error(files, tmp_path, bad, says):
    """`tvm-npu run` calls through runtime.Model: a wrong shape, rank or dtype is ERR_SHAPE_MISMATCH
    naming the input and what to pass (TVM's own "Check failed ... match_cast" before), exit 2, no
    traceback. Run as the installed command would, in a fresh process."""
    import subprocess
    import sys

    d, _ = files
    lib = tmp_path / "model.so"
    assert main(["compile", str(d / "model.onnx"), "-o", str(lib)]) == 0
    np.save(tmp_path / "bad.npy", bad)
    code = "import sys; from tvm_npu.tools.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "run", str(lib), str(tmp_path / "bad.npy")], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("tvm-npu: error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr and "Check failed" not in done.stderr, done.stderr
    assert "ERR_SHAPE_MISMATCH: input 0" in lines[0] and says in lines[0], lines[0]


def test_run_of_a_truncated_library_is_a_one_line_coded_error(files, tmp_path, capsys):
    d, _ = files
    lib = tmp_path / "model.so"
    assert main(["compile", str(d / "model.onnx"), "-o", str(lib)]) == 0
    capsys.readouterr()
    lib.write_bytes(lib.read_bytes()[:4096])  # dlopen of this would end the process with SIGBUS
    assert main(["run", str(lib), str(d / "x.npy")]) != 0
    err = _error_line(capsys)
    assert "ERR_BAD_ARTIFACT" in err and "without tvm_npu's integrity trailer" in err and "--no-verify" in err
    assert main(["run", str(lib), str(d / "x.npy"), "--no-verify"]) != 0  # the ELF check still refuses it
    err = _error_line(capsys)
    assert "ERR_BAD_ARTIFACT" in err and "not a complete shared library" in err


def test_profile_with_a_wrong_input_shape_is_a_one_line_error(files, tmp_path, capsys):
    d, _ = files
    np.save(tmp_path / "small.npy", np.zeros((1, 3, 16, 16), np.float32))
    assert main(["profile", str(d / "model.onnx"), "--input", str(tmp_path / "small.npy")]) != 0
    assert "expected shape (1, 3, 32, 32) float32" in _error_line(capsys)


def test_quantize_then_run_stays_close_to_float(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=4), model)
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(5)
    for i in range(6):
        np.save(calib / f"{i}.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    lib = tmp_path / "int8.so"
    assert (
        main(["quantize", str(model), "--calib", str(calib), "-o", str(lib), "--method", "percentile", "--sqnr"]) == 0
    )
    out = capsys.readouterr().out
    assert "of MACs on the NPU" in out and "dB" in out
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(lib), str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")]) == 0
    got = np.load(tmp_path / "y.npy")
    ref = relax.VirtualMachine(tvm.compile(tvm_npu.from_onnx(str(model)), target="llvm"), tvm.cpu())
    want = ref["main"](tvm.runtime.tensor(x)).numpy()
    assert np.abs(got - want).max() < 0.05 and got.argmax() == want.argmax()


def test_quantize_without_calibration_files_is_one_line(tmp_path, capsys):
    onnx.save(small_cnn(seed=4), tmp_path / "cnn.onnx")
    (tmp_path / "empty").mkdir()
    assert (
        main(["quantize", str(tmp_path / "cnn.onnx"), "--calib", str(tmp_path / "empty"), "-o", str(tmp_path / "q.so")])
        != 0
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no .npy / .npz files" in err[0]
