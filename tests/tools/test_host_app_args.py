"""The C++ host app's command line (apps/host_app/options.h): a bad option value prints the usage with exit
status 2 (std::stoi ended the app with SIGABRT), an output it cannot write is exit status 1 naming the path
and strerror (it exited 0 having written nothing), and an output is never an input nor left half-written."""

import hashlib
import os
import subprocess

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from host_app_build import build_host_app


@pytest.fixture(scope="module")
def host_app(tmp_path_factory):
    return build_host_app(tmp_path_factory.mktemp("host_app"))


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """A sealed one-conv library, its input x.npy and the output TVM's VM computes for it."""
    d = tmp_path_factory.mktemp("lib")
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv", [x], [y], [w])
    ex = tvm_npu.build(tvm_npu.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])))
    tvm_npu.export_library(ex, d / "model.so")
    xv = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(d / "x.npy", xv)
    return d, relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()


def run(app, *args, cwd=None):
    return subprocess.run([str(app), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize(
    "args, says",
    [
        (["--threads", "x"], "--threads 'x' is not an integer: give one in [0, 64]"),
        (["--threads", "99999999999"], "--threads 99999999999 is outside [0, 64]"),
        (["--threads", "99999999999999999999999"], "is outside [0, 64]"),  # past int64: from_chars' range
        (["--runs", "0"], "--runs 0 is outside [1, 100000]"),
        (["--runs", "5x"], "--runs '5x' is not an integer"),
        (["--top", "2.5"], "--top '2.5' is not an integer"),
        (["--top", "-1"], "--top -1 is outside [1, 1048576]"),
        (["--timeout-ms", "1e3"], "--timeout-ms '1e3' is not an integer"),
        (["--timeout-ms", "-5"], "--timeout-ms -5 is outside [0, 86400000]"),
        (["--top"], "--top needs a value"),
        (["--threads", "64", "--runs", "100000"], "is more than 100000 inferences"),
        (["--frobnicate"], "unknown option --frobnicate"),
    ],
)
def test_a_bad_option_value_prints_the_usage(host_app, lib, args, says):
    d, _ = lib
    res = run(host_app, d / "model.so", d / "x.npy", *args)
    assert res.returncode == 2, (res.returncode, res.stderr)  # SIGABRT was -6
    assert says in res.stderr and "usage: npu_host" in res.stderr, res.stderr
    assert res.stdout == ""  # nothing ran


def test_in_range_values_run_and_write_the_output_whole(host_app, lib, tmp_path):
    d, want = lib
    out = tmp_path / "y.bin"
    out.write_bytes(b"an older output, longer than the new one " * 100)
    res = run(host_app, d / "model.so", d / "x.npy", "--top", 3, "--threads", 2, "--runs", 3, "--out", out)
    assert res.returncode == 0, res.stderr
    assert "threads: 2 x 3 runs, 6 identical, 0 different" in res.stdout
    np.testing.assert_array_equal(np.fromfile(out, np.float32), want.reshape(-1))
    assert [p.name for p in tmp_path.iterdir()] == ["y.bin"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_an_output_under_a_regular_file_is_an_error_naming_it(host_app, lib, tmp_path):
    d, _ = lib
    (tmp_path / "plain").write_text("a file")
    res = run(host_app, d / "model.so", d / "x.npy", "--out", tmp_path / "plain" / "y.bin")
    assert res.returncode == 1, res.stderr
    assert f"npu_host: ERR_INVALID_CONFIG: cannot write '{tmp_path / 'plain' / 'y.bin'}'" in res.stderr
    assert "Not a directory" in res.stderr and (tmp_path / "plain").read_text() == "a file"


def test_an_output_the_os_refuses_is_an_error(host_app, lib):
    d, _ = lib
    res = run(host_app, d / "model.so", d / "x.npy", "--out", "/proc/y.bin")
    assert res.returncode == 1 and "cannot write '/proc/y.bin'" in res.stderr, res.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_an_error(host_app, lib, tmp_path):
    d, _ = lib
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        res = run(host_app, d / "model.so", d / "x.npy", "--out", ro / "y.bin")
    finally:
        ro.chmod(0o700)
    assert res.returncode == 1 and "Permission denied" in res.stderr and not list(ro.iterdir())


@pytest.mark.parametrize("which", ["model.so", "x.npy", "link"])
def test_an_output_that_is_an_input_is_refused(host_app, lib, tmp_path, which):
    d, _ = lib
    target = d / which
    if which == "link":
        target = tmp_path / "y.bin"
        os.link(d / "x.npy", target)
    before = {p: _sha(d / p) for p in ("model.so", "x.npy")}
    res = run(host_app, d / "model.so", d / "x.npy", "--out", target)
    assert res.returncode == 2 and "would destroy the input" in res.stderr, res.stderr
    assert {p: _sha(d / p) for p in before} == before
