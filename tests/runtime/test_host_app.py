"""The C++ host app (apps/host_app, over include/tvm_npu/host.h): built with CMake, it loads an artifact
exported here and runs it without Python — bit for bit what Python gets, from 8 threads x 50 runs, and
through the asynchronous path with a timeout that leaves the model usable; a damaged library is refused
before dlopen."""

import re
import subprocess

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from damaged_libraries import damaged_copies
from host_app_build import build_host_app
from tvm_npu.models import mobilenet_v2_shaped, small_cnn
from tvm_npu.runtime.artifact import trailer


@pytest.fixture(scope="module")
def host_app(tmp_path_factory):
    return build_host_app(tmp_path_factory.mktemp("host_app"))


def export(model, x, path):
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    tvm_npu.export_library(ex, path / "model.so")
    np.save(path / "x.npy", x)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.fixture(scope="module")
def small_lib(tmp_path_factory):
    """A sealed small CNN with its input x.npy, and the output Python computes."""
    d = tmp_path_factory.mktemp("small_lib")
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return d, export(small_cnn(seed=0), x, d)


def run(app, *args):
    return subprocess.run([str(app), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_host_app_output_equals_python_bit_for_bit_from_many_threads(host_app, tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = export(small_cnn(seed=0), x, tmp_path)
    res = run(
        host_app,
        tmp_path / "model.so",
        tmp_path / "x.npy",
        "--out",
        tmp_path / "y.bin",
        "--profile",
        "--threads",
        8,
        "--runs",
        50,
    )
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), want.reshape(-1))
    assert "threads: 8 x 50 runs, 400 identical, 0 different" in res.stdout
    line = res.stdout.split("top-5:")[1].split("\n")[0]
    top = [int(i) for i in re.findall(r"(\d+) \(", line)]
    assert top == list(np.argsort(-want.reshape(-1), kind="stable")[:5])
    assert '"total_cycles"' in res.stdout  # the per-region profile came through the C++ API


def test_host_app_takes_paths_without_a_folder(host_app, tmp_path):
    """`npu_host model.so x.npy` from the folder that holds them (dlopen alone would search its path)."""
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = export(small_cnn(seed=0), x, tmp_path)
    res = subprocess.run(
        [str(host_app), "model.so", "x.npy", "--out", "y.bin"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32), want.reshape(-1))


def test_host_app_timeout_is_clean_and_the_model_stays_usable(host_app, tmp_path):
    # A MobileNetV2 call takes tens of milliseconds on the reference NPU: a 0 ms budget always times out.
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    export(mobilenet_v2_shaped(seed=0, size=64), x, tmp_path)
    res = run(host_app, tmp_path / "model.so", tmp_path / "x.npy", "--timeout-ms", 0)
    assert res.returncode == 0, res.stderr
    assert "async: ERR_TIMEOUT" in res.stdout and "after the wait: identical" in res.stdout


def test_host_app_bad_input_is_a_coded_error(host_app, tmp_path):
    export(small_cnn(seed=0), np.zeros((1, 3, 32, 32), np.float32), tmp_path)
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.float64))
    res = run(host_app, tmp_path / "model.so", tmp_path / "wrong.npy")
    assert res.returncode == 1 and "ERR_SHAPE_MISMATCH" in res.stderr and "float32" in res.stderr


@pytest.mark.parametrize("damage", ["flipped_middle", "flipped_dynamic", "truncated", "trailer_stripped"])
def test_host_app_damaged_library_is_a_coded_error(host_app, small_lib, damage):
    """Without the check, dlopen of flipped_dynamic dies of SIGSEGV and of truncated of SIGBUS, and
    flipped_middle runs a changed model; host::Model verifies the trailer (artifact.h) first."""
    d, _ = small_lib
    (d / "bad.so").write_bytes(damaged_copies((d / "model.so").read_bytes())[damage])
    res = run(host_app, d / "bad.so", d / "x.npy")
    assert res.returncode == 1, f"ended with {res.returncode}: {res.stderr[-2000:]}"
    assert res.stderr.startswith("npu_host: ERR_BAD_ARTIFACT: ") and "tvm_npu.export_library(ex, path)" in res.stderr
    if damage in ("truncated", "trailer_stripped"):
        assert "without tvm_npu's integrity trailer" in res.stderr and "--no-verify" in res.stderr
    else:
        assert "SHA-256 of the library disagrees with its trailer" in res.stderr


def test_host_app_no_verify_loads_a_library_without_the_trailer(host_app, small_lib):
    d, want = small_lib
    (d / "plain.so").write_bytes(damaged_copies((d / "model.so").read_bytes())["trailer_stripped"])
    res = run(host_app, d / "plain.so", d / "x.npy", "--no-verify", "--out", d / "y.bin")
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.fromfile(d / "y.bin", np.float32), want.reshape(-1))


@pytest.mark.parametrize("residue", [0, 55, 56, 63])
def test_host_app_sha256_agrees_with_hashlib_at_every_padding_case(host_app, small_lib, residue):
    """SHA-256 pads the last block in one or two blocks depending on the length mod 64: libraries grown
    by zero bytes after the ELF image (which the loader ignores) to each boundary case, sealed with
    hashlib's digest, must pass the C++ check."""
    d, want = small_lib
    image = (d / "model.so").read_bytes()[:-56]
    image += bytes((residue - len(image)) % 64)
    assert len(image) % 64 == residue
    (d / "padded.so").write_bytes(image + trailer(image))
    res = run(host_app, d / "padded.so", d / "x.npy", "--out", d / "y.bin")
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.fromfile(d / "y.bin", np.float32), want.reshape(-1))


def test_host_app_no_verify_still_refuses_a_truncated_library(host_app, small_lib):
    """The ELF check stays: dlopen of a cut library dies of SIGBUS."""
    d, _ = small_lib
    data = (d / "model.so").read_bytes()[:-56]
    (d / "cut.so").write_bytes(data[: len(data) // 2])
    res = run(host_app, d / "cut.so", d / "x.npy", "--no-verify")
    assert res.returncode == 1 and "ERR_BAD_ARTIFACT" in res.stderr and "not a complete shared library" in res.stderr
