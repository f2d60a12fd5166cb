"""The checked boundary of every call into compiled code (issue 32, runtime/boundary.py and
rewrite/check_indices.py): each wrong call is a coded NPUError saying what to pass, the right call gives
onnxruntime's numbers, a VM or an LLM shared by threads gives the serial results, and a Gather index
outside its table is a coded error compiled into the library (no garbage, no SIGSEGV).

Thread and out-of-range cases that used to corrupt the heap or segfault run in a subprocess with a
timeout, so a crash fails the test instead of the runner."""

import functools
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
import tvm_npu.llm
from tvm_npu.models.decoder import gpt2_step
from tvm_npu.runtime import boundary

X_SHAPE = (1, 3, 8, 8)


def _conv_model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "conv", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _gather_model():
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    nodes = [helper.make_node("Gather", ["table", "idx"], ["g"], axis=0), helper.make_node("Relu", ["g"], ["y"])]
    return helper.make_model(
        helper.make_graph(nodes, "gather", [idx], [y], [table]), opset_imports=[helper.make_opsetid("", 17)]
    )


def _ort(model, **feeds):
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    """(onnx model, built executable, path of its exported library)."""
    model = _conv_model()
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    path = tmp_path_factory.mktemp("boundary") / "conv.so"
    tvm_npu.export_library(ex, path)
    return model, ex, path


@pytest.fixture(scope="module")
def lm_path(tmp_path_factory):
    """An exported one-library LLM (gpt2, 1 layer, vocab 256, max_context 16)."""
    builder = functools.partial(gpt2_step, layers=1, d=64, heads=4, ffn=128, vocab=256)
    lm = tvm_npu.llm.compile(builder, max_context=16, prefill_len=8)
    path = tmp_path_factory.mktemp("boundary_lm") / "lm.so"
    lm.export_library(path)
    return path


def _x(seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(X_SHAPE).astype(dtype)


def test_signature_is_read_from_the_executable_and_the_loaded_library(conv):
    _, ex, path = conv
    for source in (ex, tvm_npu.load_module(path)):
        (p,) = boundary.signature(source)
        assert (p.name, p.dtype, p.dims) == ("x", "float32", X_SHAPE)


def test_right_call_gives_onnxruntimes_numbers(conv):
    model, ex, path = conv
    x = _x(1)
    want = _ort(model, x=x)
    for m in (tvm_npu.Model(ex), tvm_npu.Model(tvm_npu.load_module(path))):
        np.testing.assert_allclose(m(x), want, rtol=2e-2, atol=2e-2)  # the NPU computes in fp16
        np.testing.assert_allclose(m(tvm.runtime.tensor(x)), want, rtol=2e-2, atol=2e-2)
    strided = np.asfortranarray(x)  # copied into a compact tensor: the same numbers
    np.testing.assert_array_equal(tvm_npu.Model(ex)(strided), tvm_npu.Model(ex)(x))


WRONG = {
    "float64": ((_x(0, np.float64),), "cast with .astype(np.float32)"),
    "float16": ((_x(0, np.float16),), "cast with .astype(np.float32)"),
    "big-endian": ((_x(0).astype(">f4"),), "native byte order"),
    "shape": ((np.zeros((1, 3, 8, 9), np.float32),), "axis 3 is 9, the model was compiled for 8"),
    "rank": ((np.zeros((3, 8, 8), np.float32),), "rank 3, the model takes rank 4"),
    "no argument": ((), "main takes 1 input(s) (x: float32 [1, 3, 8, 8]), 0 given"),
    "two arguments": ((_x(), _x()), "main takes 1 input(s)"),
    "list": ((_x().tolist(),), "got a Python list: pass a numpy array"),
    "dict": (({"x": _x()},), "got a Python dict: pass a numpy array"),
    "scalar": ((1.0,), "got a Python float: pass a numpy array"),
    "numpy scalar": ((np.float32(1.0),), "rank 0, the model takes rank 4"),
    "int32 tensor": ((tvm.runtime.tensor(_x().astype(np.int32)),), "got tvm tensor int32"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_each_wrong_call_is_a_coded_error_saying_what_to_pass(conv, case):
    _, ex, path = conv
    args, phrase = WRONG[case]
    for m in (tvm_npu.Model(ex), tvm_npu.Model(tvm_npu.load_module(path))):
        with pytest.raises(tvm_npu.NPUError) as err:
            m(*args)
        assert err.value.code == "ERR_SHAPE_MISMATCH"
        assert phrase in str(err.value)
        assert "input 0 'x' of main: float32 [1, 3, 8, 8] expected" in str(err.value) or "given" in str(err.value)


def test_async_model_and_streaming_session_check_at_the_call(conv):
    model, ex, _ = conv
    am = tvm_npu.AsyncModel(ex)
    with pytest.raises(tvm_npu.NPUError, match="cast with .astype") as err:
        am.start(_x(0, np.float64))
    assert err.value.code == "ERR_SHAPE_MISMATCH"
    x = _x(2)
    np.testing.assert_allclose(am.start(x).wait(60), _ort(model, x=x), rtol=2e-2, atol=2e-2)
    sess = tvm_npu.StreamingSession(ex, {"x": X_SHAPE}, ["y"], {})
    with pytest.raises(tvm_npu.NPUError, match="axis 2 is 9") as err:
        sess(x=np.zeros((1, 3, 9, 8), np.float32))
    assert err.value.code == "ERR_SHAPE_MISMATCH"
    np.testing.assert_allclose(sess(x=x)["y"], _ort(model, x=x), rtol=2e-2, atol=2e-2)


def test_gather_index_out_of_range_is_a_coded_error_in_range_matches_onnxruntime():
    model = _gather_model()
    m = tvm_npu.Model(tvm_npu.build(tvm_npu.from_onnx(model)))
    for idx in ([1, -2, 9], [0, 0, -10]):
        i = np.array(idx, np.int64)
        np.testing.assert_array_equal(m(i), _ort(model, idx=i))
    for idx in ([1, 10, 2], [-11, 0, 0], [10**6, 0, 0], [-(10**6), 0, 0]):
        i = np.array(idx, np.int64)
        with pytest.raises(tvm_npu.NPUError, match=r"outside the 10 rows of axis 0 .*\[-10, 10\)") as err:
            m(i)
        assert err.value.code == "ERR_INVALID_ADDR"
        with pytest.raises(Exception, match="out of data bounds"):  # onnxruntime refuses them too
            _ort(model, idx=i)


def _run(script: str, *args, timeout=240):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_llm_library_raw_decode_checks_token_ids_and_position(lm_path):
    """The exported library's own `decode` entry, as a C++ host or a plain TVM script calls it: ids
    1e6, -1e6 and vocab segfaulted or ran silently; each is now a coded error from inside the library."""
    script = """
    import sys, numpy as np, tvm, tvm_npu
    from tvm import relax
    vm = relax.VirtualMachine(tvm_npu.load_module(sys.argv[1]), tvm.cpu())
    for tok, pos in ((3, 0), (255, 1), (256, 1), (10**6, 1), (-10**6, 1), (-1, 1), (3, 40)):
        try:
            out = vm["decode"](tvm.runtime.tensor(np.array([[tok]], np.int64)),
                               tvm.runtime.tensor(np.array([pos], np.int64)))
            print(tok, pos, "ok", bool(np.isfinite(out[0].numpy()).all()))
        except tvm_npu.NPUError as e:
            print(tok, pos, e.code, str(e).splitlines()[0])
    """
    res = _run(script, lm_path)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = {tuple(line.split()[:2]): line for line in res.stdout.splitlines()}
    assert lines[("3", "0")].endswith("ok True") and lines[("255", "1")].endswith("ok True")
    assert lines[("-1", "1")].endswith("ok True")  # ONNX Gather's count from the end, as onnxruntime reads it
    for tok in ("256", "1000000", "-1000000"):
        assert "ERR_LLM_TOKEN" in lines[(tok, "1")] and "outside the vocabulary of 256" in lines[(tok, "1")]
    assert "ERR_POSITION_RANGE" in lines[("3", "40")]


def test_llm_python_path_gives_the_same_logits_as_the_raw_entry(lm_path):
    """The checks inside the graph change no number: prefill + decode through tvm_npu.llm equal the
    library's entries called directly, bit for bit."""
    lm = tvm_npu.llm.load(lm_path)
    ids = np.array([5, 17, 3], np.int64)
    got = lm.prefill(ids)
    vm = relax.VirtualMachine(tvm_npu.load_module(lm_path), tvm.cpu())
    for m in tvm_npu.runtime.npu_modules(vm):
        m["reset_state"]()
    chunk = np.zeros((1, 8), np.int64)
    chunk[0, :3] = ids
    out = vm["prefill"](tvm.runtime.tensor(chunk), tvm.runtime.tensor(np.array([0], np.int64)))
    np.testing.assert_array_equal(got, out[0].numpy()[0][2])


THREADS = """
import sys, threading, numpy as np, tvm_npu
model = tvm_npu.Model(tvm_npu.load_module(sys.argv[1]))
ids, pos = np.array([[5, 17, 3, 9, 1, 2, 3, 4]], np.int64), np.array([0], np.int64)
want = model.call("prefill", ids, pos)[0].numpy()  # the same ids at 0: the cache rows it writes are the same
bad, errors = [], []
def work(t):
    try:
        for k in range(20):
            if not np.array_equal(model.call("prefill", ids, pos)[0].numpy(), want):
                bad.append(t)
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
print("mismatches", len(bad), "errors", errors)
"""


def test_one_model_shared_by_four_threads_gives_the_serial_results(lm_path):
    """4 threads x 20 calls of one Model (the LLM library's prefill entry: many CPU ops between the NPU
    regions). The bare VirtualMachine shared the same way dies of "double free or corruption" or
    "malloc(): unaligned tcache chunk" within the first calls."""
    res = _run(THREADS, lm_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mismatches 0 errors []" in res.stdout


LLM_THREADS = """
import sys, threading, numpy as np, tvm_npu, tvm_npu.llm
path = sys.argv[1]
prompts = [np.array([3 + t, 40 + t, 7], np.int64) for t in range(4)]
a, b = tvm_npu.llm.load(path), tvm_npu.llm.load(path)
serial = [a.generate(p, max_new_tokens=6).tolist() for p in prompts]
bad, errors = [], []
def work(lm, t):
    try:
        for k in range(5):
            p = (t + k) % 4
            if lm.generate(prompts[p], max_new_tokens=6).tolist() != serial[p]:
                bad.append((t, p))
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))
# two loads of one artifact (one state space), and one LLM object shared by two threads
threads = [threading.Thread(target=work, args=(lm, t)) for t, lm in enumerate((a, b, a, b))]
[t.start() for t in threads]; [t.join() for t in threads]
print("mismatches", len(bad), "errors", errors)
"""


def test_llms_of_one_artifact_and_one_llm_shared_by_threads_give_the_serial_tokens(lm_path):
    """Without the per-state-space lock this run raised "Check failed: reg < frame->register_file.size()",
    an AttributeError and ERR_LLM_STATE from inside generate, or returned other tokens."""
    res = _run(LLM_THREADS, lm_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "mismatches 0 errors []" in res.stdout


def test_a_foreign_takeover_between_prefill_and_decode_is_still_err_llm_state(lm_path):
    a, b = tvm_npu.llm.load(lm_path), tvm_npu.llm.load(lm_path)
    a.prefill(np.array([1, 2], np.int64))
    b.prefill(np.array([3, 4], np.int64))
    with pytest.raises(tvm_npu.NPUError) as err:
        a.decode(5)
    assert err.value.code == "ERR_LLM_STATE"


def test_profile_checks_its_inputs_against_mains_signature():
    mod = tvm_npu.from_onnx(_conv_model())
    with pytest.raises(tvm_npu.NPUError, match=r"expected shape \(1, 3, 8, 8\) float32, got \(1, 3, 8, 8\) float64"):
        tvm_npu.profile(mod, inputs=[_x(0, np.float64)])
