"""The integrity trailer of tvm_npu.export_library, checked before dlopen by tvm_npu.load_module and
`tvm-npu run` (the C++ host app: test_host_app.py). Every load runs in a subprocess: without the check a
damaged library ends the process inside dlopen (SIGSEGV, SIGBUS), which the test must see as a failure,
not as a crash of the test run."""

import hashlib
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from damaged_libraries import damaged_copies
from tvm_npu.models import small_cnn


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """A sealed library of a small CNN, its input and the output of the in-memory executable."""
    d = tmp_path_factory.mktemp("sealed")
    ex = tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed=0)))
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(d / "x.npy", x)
    assert tvm_npu.export_library(ex, d / "model.so") == d / "model.so"
    return d, relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def _load_in_subprocess(path, cwd, verify=True):
    """Load `path` with tvm_npu.load_module and run it on x.npy in a fresh process: the NPUError's code and
    message, or "ok" and y.npy."""
    code = f"""
        import numpy as np, tvm, tvm_npu
        from tvm import relax
        try:
            lib = tvm_npu.load_module({str(path)!r}, verify={verify})
        except tvm_npu.NPUError as err:
            print(err.code, err)
            raise SystemExit(0)
        np.save("y.npy", relax.VirtualMachine(lib, tvm.cpu())["main"](tvm.runtime.tensor(np.load("x.npy"))).numpy())
        print("ok")
    """
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"the process ended with {res.returncode}: {res.stderr[-2000:]}"
    return res.stdout.strip()


def _cli_run(path, cwd, *options):
    return subprocess.run(
        [sys.executable, "-m", "tvm_npu", "run", str(path), "x.npy", "-o", "y_cli.npy", *options],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_trailer_is_the_sha256_of_the_library_before_it(sealed):
    d, _ = sealed
    data = (d / "model.so").read_bytes()
    magic, version, reserved, length, digest = struct.unpack("<8sIIQ32s", data[-56:])
    assert (magic, version, reserved, length) == (b"NPU-SEAL", 1, 0, len(data) - 56)
    assert digest == hashlib.sha256(data[:-56]).digest()
    assert data[:4] == b"\x7fELF"


def test_a_sealed_library_loads_and_runs_as_the_executable_did(sealed):
    """Through tvm_npu.load_module, `tvm-npu run`, and plain tvm.runtime.load_module (the loader ignores
    the bytes after the ELF image)."""
    d, want = sealed
    assert _load_in_subprocess(d / "model.so", d) == "ok"
    np.testing.assert_array_equal(np.load(d / "y.npy"), want)
    res = _cli_run(d / "model.so", d)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.load(d / "y_cli.npy"), want)
    np.testing.assert_array_equal(
        relax.VirtualMachine(tvm.runtime.load_module(str(d / "model.so")), tvm.cpu())["main"](
            tvm.runtime.tensor(np.load(d / "x.npy"))
        ).numpy(),
        want,
    )


@pytest.mark.parametrize("damage", ["flipped_middle", "flipped_dynamic", "truncated", "trailer_stripped"])
def test_a_damaged_library_is_a_coded_error_before_dlopen(sealed, damage):
    """Without the check, flipped_dynamic dies of SIGSEGV in dlopen, truncated of SIGBUS (or, past the ELF
    checks, loads garbage), and flipped_middle loads and runs a changed model."""
    d, _ = sealed
    path = d / f"{damage}.so"
    path.write_bytes(damaged_copies((d / "model.so").read_bytes())[damage])
    hint = "export the model again with tvm_npu.export_library"
    out = _load_in_subprocess(path, d)
    assert out.startswith("ERR_BAD_ARTIFACT ERR_BAD_ARTIFACT: ") and hint in out, out
    res = _cli_run(path, d)
    err = res.stderr.strip()
    assert res.returncode == 2 and err.startswith("tvm-npu: error: ERR_BAD_ARTIFACT: ") and "\n" not in err, err
    assert hint in err
    if damage in ("truncated", "trailer_stripped"):  # the trailer is gone: say how to load such a file
        assert "without tvm_npu's integrity trailer" in err and "--no-verify" in err
    else:
        assert "SHA-256 of the library disagrees with its trailer" in err


def test_a_library_without_the_trailer_loads_when_asked_to(sealed, tmp_path):
    """A library from plain ex.export_library (here: the sealed one with its trailer cut off) loads with
    verify=False / --no-verify, with the ELF check only; a truncated one is still refused."""
    d, want = sealed
    copies = damaged_copies((d / "model.so").read_bytes())
    (d / "plain.so").write_bytes(copies["trailer_stripped"])
    assert _load_in_subprocess(d / "plain.so", d, verify=False) == "ok"
    np.testing.assert_array_equal(np.load(d / "y.npy"), want)
    res = _cli_run(d / "plain.so", d, "--no-verify")
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(np.load(d / "y_cli.npy"), want)
    (d / "cut.so").write_bytes(copies["truncated"])
    out = _load_in_subprocess(d / "cut.so", d, verify=False)
    assert out.startswith("ERR_BAD_ARTIFACT") and "not a complete shared library" in out, out
