"""The fresh probe's C++ host app cases (test_probe_fresh.py has the rest): a wrong input shape, rank or
dtype reaches TVM's "Check failed ... match_cast" no more (host::Model checks the signature the executable
carries), a folder given as a file and a file dlopen refuses are coded errors, an empty --out is a usage
error rather than nothing written with exit 0, and an LLM's options may come in any order."""

import subprocess

import numpy as np
import pytest

from host_app_build import build_host_app
from probe_files import conv_files


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The host app built for this module, and a sealed one-conv library with its input and onnxruntime's
    output."""
    d = tmp_path_factory.mktemp("files")
    _, _, want = conv_files(d, "model.so")
    return build_host_app(d / "build"), d, want


def run(app, *args, cwd=None):
    res = subprocess.run([str(app), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)
    return res.returncode, " ".join(res.stderr.split()), res.stdout


@pytest.mark.parametrize(
    "array, got",
    [
        (np.zeros((1, 3, 9, 8), np.float32), "float32 [1, 3, 9, 8]"),
        (np.zeros((3, 8, 8), np.float32), "float32 [3, 8, 8]"),
        (np.zeros((1, 3, 8, 8), np.int8), "int8 [1, 3, 8, 8]"),
        (np.float32(1.0), "float32 []"),
        (np.zeros((0, 3, 8, 8), np.float32), "float32 [0, 3, 8, 8]"),
    ],
)
def test_an_input_the_model_does_not_take_is_coded(files, tmp_path, array, got):
    app, d, _ = files
    np.save(tmp_path / "b.npy", array)
    code, err, _ = run(app, d / "model.so", tmp_path / "b.npy")
    assert code == 1 and "Check failed" not in err, err
    assert f"ERR_SHAPE_MISMATCH: input 0 'x' of main: float32 [1, 3, 8, 8] expected, got {got}" in err


def test_folders_and_executables_are_coded(files, tmp_path):
    app, d, _ = files
    code, err, _ = run(app, d / "model.so", tmp_path)  # basic_filebuf::underflow before
    assert code == 1 and "ERR_SHAPE_MISMATCH" in err and "not a file" in err
    code, err, _ = run(app, tmp_path, d / "x.npy")
    assert code == 1 and "ERR_BAD_ARTIFACT" in err and "not a file" in err
    code, err, _ = run(app, "/bin/ls", d / "x.npy", "--no-verify")  # "Failed to get file format" before
    assert code == 1 and "ERR_BAD_ARTIFACT" in err and "could not be loaded as a library" in err


def test_an_empty_output_path_is_a_usage_error(files):
    app, d, _ = files
    code, err, out = run(app, d / "model.so", d / "x.npy", "--out", "")
    assert code == 2 and "--out '': give a file path" in err and "usage:" in err and out == ""


def test_the_right_input_still_matches_onnxruntime(files, tmp_path):
    app, d, want = files
    code, err, _ = run(app, d / "model.so", d / "x.npy", "--out", tmp_path / "y.bin")
    assert code == 0, err
    y = np.fromfile(tmp_path / "y.bin", np.float32).reshape(want.shape)
    assert float(np.abs(y - want).max()) <= 2e-2 * float(np.abs(want).max())


def test_llm_options_in_any_order_and_their_errors_with_the_usage(files, tmp_path):
    """--prompt-ids after another option ran the model mode on a file named "--max-new-tokens"; an unknown
    option printed a bare line; a --max-new-tokens near 2^63 overflowed the context check and decoded
    until the cache was full."""
    from llm.reference import BUILDERS, OrtDecoder, T, compiled

    app = files[0]
    lm = compiled("gpt2").export_library(tmp_path / "lm.so")
    want = OrtDecoder(BUILDERS["gpt2"], T).run([5, 17, 42], 4)[1]
    code, err, out = run(app, lm, "--max-new-tokens", "4", "--prompt-ids", "5,17,42")
    assert code == 0, err
    assert out.splitlines()[0] == "new tokens: " + ",".join(map(str, want))
    code, err, _ = run(app, lm, "--prompt-ids", "1", "--bogus")
    assert code == 2 and "unknown option --bogus" in err and "usage:" in err
    code, err, out = run(app, lm, "--prompt-ids", "1,2,3", "--max-new-tokens", "9223372036854775807")
    assert code == 1 and "ERR_LLM_CONTEXT: 3 prompt tokens + 9223372036854775807 new ones" in err and out == ""
    code, err, _ = run(app, lm, "--prompt-ids", "1", "--logits-out", "")
    assert code == 2 and "--logits-out '': give a file path" in err
