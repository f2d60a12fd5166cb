"""The C++ host app's LLM mode (`npu_host lm.so --prompt-ids ... --max-new-tokens N`, include/tvm_npu/
llm_host.h): from the one library of lm.export_library, without Python, its greedy tokens equal
`tvm_npu.llm.load(...).generate(...)`'s and the logits it picked them from equal Python's prefill / decode
logits bit for bit, for the resident cache, the host-held cache and one step model serving both; bad
input is a coded error and exit status 1, never a crash."""

import re
import subprocess

import numpy as np
import onnx
import pytest

import tvm_npu
from host_app_build import build_host_app
from llm.reference import BUILDERS, compiled


@pytest.fixture(scope="module")
def npu_host(tmp_path_factory):
    return build_host_app(tmp_path_factory.mktemp("host_app"))


@pytest.fixture(scope="module")
def gpt2_library(tmp_path_factory):
    return compiled("gpt2").export_library(tmp_path_factory.mktemp("lm") / "lm.so")


def run(app, *args):
    return subprocess.run([str(app), *map(str, args)], capture_output=True, text=True, timeout=300)


def python_path(lm, ids, new):
    """Python's greedy tokens and the logits each was picked from (prefill's, then each decode's)."""
    tokens = lm.generate(ids, max_new_tokens=new).tolist()
    logits = [lm.prefill(ids)] + [lm.decode(t) for t in tokens[:-1]]
    return tokens, np.stack(logits)


def check_same_as_python(app, lm, tmp_path, ids, new):
    path = lm.export_library(tmp_path / "lm.so")
    res = run(
        app, path, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", new, "--logits-out", tmp_path / "l.bin"
    )
    assert res.returncode == 0, res.stderr
    got = [int(t) for t in re.search(r"new tokens: ([\d,]+)", res.stdout).group(1).split(",")]
    want, logits = python_path(tvm_npu.llm.load(path), np.array(ids), new)
    assert got == want
    np.testing.assert_array_equal(np.fromfile(tmp_path / "l.bin", np.float32).reshape(logits.shape), logits)
    speed = re.search(r"decode: (\d+) tokens, (\d+) NPU cycles: cycle model ([\d.]+) tokens/s", res.stdout)
    assert int(speed.group(1)) == new - 1 and int(speed.group(2)) > 0 and float(speed.group(3)) > 0
    assert "host wall" in res.stdout
    return res


def test_decode_loop_equals_python_with_the_resident_cache(npu_host, lm, tmp_path):
    # 11 prompt tokens: two prefill chunks of 8, the second padded.
    check_same_as_python(npu_host, lm, tmp_path, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 6)


def test_decode_loop_equals_python_with_a_host_held_cache(npu_host, tmp_path):
    lm = tvm_npu.llm.compile(BUILDERS["gpt2"], max_context=20, prefill_len=8, kv_cache="host")
    assert not lm.resident
    # 18 tokens + 3 new = 20 rows: the third prefill chunk moves back to T - S = 12.
    check_same_as_python(npu_host, lm, tmp_path, list(range(7, 25)), 3)


def test_decode_loop_equals_python_with_one_step_model_serving_both(npu_host, tmp_path):
    onnx.save(BUILDERS["llama"](seq_len=1, max_context=12), tmp_path / "step.onnx")
    lm = tvm_npu.llm.compile(str(tmp_path / "step.onnx"))
    assert lm.prefill_len == 1
    check_same_as_python(npu_host, lm, tmp_path, [5, 4, 3], 5)


@pytest.mark.parametrize(
    "args, code",
    [
        (["--prompt-ids", ",".join(["1"] * 45)], "ERR_LLM_CONTEXT"),  # max_context is 44
        (["--prompt-ids", "1,2", "--max-new-tokens", 44], "ERR_LLM_CONTEXT"),  # 45 cache rows
        (["--prompt-ids", "1,256"], "ERR_LLM_TOKEN"),  # vocab 256
        (["--prompt-ids", "-3"], "ERR_LLM_TOKEN"),
        (["--prompt-ids", "1,x"], "ERR_SHAPE_MISMATCH"),
        (["--prompt-ids", "1", "--max-new-tokens", "many"], "ERR_SHAPE_MISMATCH"),
    ],
)
def test_bad_input_is_a_coded_error(npu_host, gpt2_library, args, code):
    res = run(npu_host, gpt2_library, *args)
    assert res.returncode == 1 and f"npu_host: {code}: " in res.stderr, res.stderr


def test_a_library_that_is_not_an_llm_is_refused(npu_host, tmp_path):
    from tvm_npu.models import small_cnn

    path = tvm_npu.export_library(tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed=0))), tmp_path / "cnn.so")
    res = run(npu_host, path, "--prompt-ids", "1,2")
    assert res.returncode == 1 and "npu_host: ERR_BAD_ARTIFACT: " in res.stderr and "llm_meta" in res.stderr


def test_logits_out_that_cannot_be_written_is_an_error_not_a_success(npu_host, gpt2_library, tmp_path):
    """It printed the tokens and exited 0 with nothing written; an output that is the library is refused."""
    (tmp_path / "plain").write_text("a file")
    res = run(npu_host, gpt2_library, "--prompt-ids", "1,2", "--logits-out", tmp_path / "plain" / "l.bin")
    assert res.returncode == 1 and f"cannot write '{tmp_path / 'plain' / 'l.bin'}'" in res.stderr, res.stderr
    assert "Not a directory" in res.stderr
    before = gpt2_library.read_bytes()
    res = run(npu_host, gpt2_library, "--prompt-ids", "1,2", "--logits-out", gpt2_library)
    assert res.returncode == 2 and "would destroy the input" in res.stderr, res.stderr
    assert gpt2_library.read_bytes() == before
