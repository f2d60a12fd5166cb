"""A fresh probe of the entry points (issue 32's numbers, "any fresh one like it"): 424 bad or edge inputs
a new user would plausibly hit, run by a driver outside the repo; these are the cases that were not a
correct result or a coded error before (an uncoded exception, a crash, a silently wrong answer), each
asserting the coded error or the correct result against onnxruntime, plus one already-right case per
class. The C++ host app's cases are in test_probe_fresh_host.py."""

import math
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from probe_files import conv_files
from tvm_npu.tools import cli


def _lstm_model(state_dim=1):
    """An ONNX LSTM (hidden 4, 5 steps) whose initial_h / initial_c are graph inputs: a streaming model."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((1, 16, 3)) * 0.5).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 16, 4)) * 0.5).astype(np.float32), "R")
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 1, 3]),
        helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, state_dim, 4]),
        helper.make_tensor_value_info("c0", TensorProto.FLOAT, [1, 1, 4]),
    ]
    outs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
        for n, s in (("Y", [5, 1, 1, 4]), ("Y_h", [1, 1, 4]), ("Y_c", [1, 1, 4]))
    ]
    node = helper.make_node("LSTM", ["X", "W", "R", "", "", "h0", "c0"], ["Y", "Y_h", "Y_c"], hidden_size=4)
    g = helper.make_graph([node], "lstm", inputs, outs, [w, r])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """model.onnx, its sealed library lib.so, an input x.npy and onnxruntime's output for it."""
    d = tmp_path_factory.mktemp("fresh")
    return (d, *conv_files(d))


def _close(got, want):
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= 2e-2 * float(np.abs(want).max())  # the fp16 datapath


def _coded(code, fn, *args, **kwargs):
    with pytest.raises(tvm_npu.NPUError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, str(info.value)
    return str(info.value)


def _cli(args, capsys):
    code = cli.main([str(a) for a in args])
    return code, " ".join(capsys.readouterr().err.split())


# -- what is passed where a model is expected (AttributeError / ValueError from TVM before) ---------------


@pytest.mark.parametrize("bad", [None, 42])
def test_from_onnx_of_something_else_is_coded(bad):
    assert "from_onnx takes an onnx.ModelProto" in _coded("ERR_INVALID_MODEL", tvm_npu.from_onnx, bad)


def test_build_of_a_path_says_to_import_it(made):
    d, *_ = made
    msg = _coded("ERR_INVALID_MODEL", tvm_npu.build, str(d / "model.onnx"))
    assert "tvm_npu.from_onnx(model)" in msg
    _coded("ERR_INVALID_MODEL", tvm_npu.build, None)


@pytest.mark.parametrize("target, says", [("cuda", "is a cuda target"), ("npu-x", "is not a TVM target")])
def test_build_for_a_target_that_is_not_the_host_is_refused(made, target, says):
    """target="cuda" built and returned an executable, for a GPU the NPU's host is not."""
    mod = tvm_npu.from_onnx(str(made[0] / "model.onnx"))
    assert says in _coded("ERR_INVALID_CONFIG", tvm_npu.build, mod, target=target)


def test_build_for_an_llvm_host_still_runs(made):
    d, _, x, y = made
    _close(tvm_npu.Model(tvm_npu.build(tvm_npu.from_onnx(str(d / "model.onnx")), target="llvm"))(x), y)


@pytest.mark.parametrize("what", ["path", "irmodule", "none"])
def test_model_of_something_that_is_not_a_model_is_coded(made, what):
    d, *_ = made
    given = {"path": str(d / "lib.so"), "irmodule": tvm_npu.from_onnx(str(d / "model.onnx")), "none": None}[what]
    msg = _coded("ERR_INVALID_CONFIG", tvm_npu.Model, given)
    assert ("tvm_npu.load_module(path)" if what == "path" else "tvm_npu.build") in msg
    with pytest.raises(tvm_npu.NPUError):
        tvm_npu.AsyncModel(given)


def test_model_arguments_python_would_refuse_are_coded(made):
    _, ex, x, _ = made
    _coded("ERR_INVALID_CONFIG", tvm_npu.Model, ex, device="cpu")
    assert "in order, not by name" in _coded("ERR_SHAPE_MISMATCH", tvm_npu.Model(ex), x=x)


def test_a_zero_size_symbolic_axis_is_refused_not_a_sigfpe():
    """An LSTM whose h0 has a symbolic batch: h0 of size 0 there ended the process with SIGFPE (TVM's
    generated code divides by the size)."""
    model = _lstm_model(state_dim="B")
    m = tvm_npu.Model(tvm_npu.build(tvm_npu.from_onnx(model)))
    z = np.zeros
    msg = _coded("ERR_SHAPE_MISMATCH", m, z((5, 1, 3), np.float32), z((1, 0, 4), np.float32), z((1, 1, 4), np.float32))
    assert "(B) is 0" in msg
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.StreamingSession.from_onnx(model, state={"h0": "Y_h", "c0": "Y_c"})
    assert info.value.code == "ERR_SHAPE_MISMATCH" and "static state shapes" in str(info.value)


# -- artifacts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [123, None])
def test_load_module_of_something_else_is_coded(bad):
    _coded("ERR_BAD_ARTIFACT", tvm_npu.load_module, bad)


def test_an_executable_loaded_without_the_trailer_check_is_coded():
    """verify=False on /bin/ls: tvm-ffi's "Failed to get file format" RuntimeError before."""
    msg = _coded("ERR_BAD_ARTIFACT", tvm_npu.load_module, "/bin/ls", verify=False)
    assert "could not be loaded as a library" in msg


def test_a_library_without_the_so_suffix_loads_and_runs(made, tmp_path):
    """export_library(ex, "model") wrote it, load_module("model") failed: tvm-ffi picks its loader by suffix."""
    _, ex, x, y = made
    tvm_npu.export_library(ex, tmp_path / "model")
    _close(tvm_npu.Model(tvm_npu.load_module(tmp_path / "model"))(x), y)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the private copy is gone again


def test_export_library_of_something_else_is_coded(made, tmp_path):
    d, ex, *_ = made
    _coded("ERR_INVALID_CONFIG", tvm_npu.export_library, None, tmp_path / "a.so")
    _coded("ERR_INVALID_CONFIG", tvm_npu.export_library, tvm_npu.from_onnx(str(d / "model.onnx")), tmp_path / "b.so")
    _coded("ERR_INVALID_CONFIG", tvm_npu.export_library, ex, 5)
    assert "copy that file" in _coded(
        "ERR_INVALID_CONFIG", tvm_npu.export_library, tvm_npu.load_module(d / "lib.so"), tmp_path / "c.so"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_loaded_llm_exports_again_by_copy_and_generates_onnxruntime_tokens(tmp_path):
    """lm = tvm_npu.llm.load(path); lm.export_library(other) raised "does not support SaveToBytes"."""
    from llm.reference import BUILDERS, OrtDecoder, T, compiled

    first = compiled("gpt2").export_library(tmp_path / "lm.so")
    lm = tvm_npu.llm.load(first)
    again = lm.export_library(tmp_path / "copy.so")
    lm.export_library(first)  # onto the file it was loaded from: the same bytes
    want = OrtDecoder(BUILDERS["gpt2"], T).run([5, 17, 42], 6)[1]
    assert list(tvm_npu.llm.load(again).generate([5, 17, 42], max_new_tokens=6)) == want
    assert "lm.export_library" in _coded("ERR_INVALID_CONFIG", tvm_npu.export_library, lm, tmp_path / "x.so")


# -- sessions, samplers, quantization, tools --------------------------------------------------------------


@pytest.mark.parametrize("timeout", [math.inf, 1e300])
def test_async_wait_without_a_practical_limit_waits(made, timeout):
    """OverflowError ("timestamp out of range for platform time_t") before."""
    _, ex, x, y = made
    _close(tvm_npu.AsyncModel(ex).start(x).wait(timeout), y)


def test_a_streaming_session_from_a_path_matches_onnxruntime(tmp_path):
    model = _lstm_model()
    onnx.save(model, str(tmp_path / "lstm.onnx"))
    s = ort.InferenceSession(model.SerializeToString())
    chunks = [np.random.default_rng(i).standard_normal((5, 1, 3)).astype(np.float32) for i in range(3)]
    sess = tvm_npu.StreamingSession.from_onnx(str(tmp_path / "lstm.onnx"), state={"h0": "Y_h", "c0": "Y_c"})
    h = c = np.zeros((1, 1, 4), np.float32)
    for chunk in chunks:
        want, h, c = s.run(None, {"X": chunk, "h0": h, "c0": c})
        assert float(np.abs(sess(X=chunk)["Y"] - want).max()) < 5e-3
    assert "by name" in _coded("ERR_SHAPE_MISMATCH", sess, chunks[0])
    _coded("ERR_INVALID_CONFIG", tvm_npu.StreamingSession.from_onnx, model, state=["h0", "Y_h"])
    _coded("ERR_INVALID_MODEL", tvm_npu.StreamingSession.from_onnx, None, state={})


def test_samplers_refuse_logits_with_nan_and_take_an_infinite_one():
    """top_k / top_p raised numpy's "Probabilities contain NaN"; greedy returned token 0 for all-NaN logits."""
    nan = np.full(8, np.nan, np.float32)
    for sampler in (tvm_npu.llm.greedy, tvm_npu.llm.top_k(3, seed=0), tvm_npu.llm.top_p(0.9, seed=0)):
        assert "NaN" in _coded("ERR_INVALID_MODEL", sampler, nan)
    _coded("ERR_INVALID_MODEL", tvm_npu.llm.greedy, np.full(4, -np.inf, np.float32))
    logits = np.array([0.0, np.inf, 1.0], np.float32)
    assert {tvm_npu.llm.top_p(0.9, seed=s)(logits) for s in range(20)} == {1}
    assert {tvm_npu.llm.top_k(2, seed=s)(logits) for s in range(20)} == {1}


@pytest.mark.parametrize(
    "batches, kw, code, says",
    [
        ([], {}, "ERR_INVALID_CONFIG", "gave no batches"),
        ([[np.zeros((1, 1, 8, 8), np.float32)]], {}, "ERR_SHAPE_MISMATCH", "has shape [1, 1, 8, 8]"),
        ([[np.full((1, 3, 8, 8), np.nan, np.float32)]], {}, "ERR_SHAPE_MISMATCH", "holds NaN or inf"),
        ([[np.zeros((1, 3, 8, 8), np.float32)]], {"method": "bogus"}, "ERR_INVALID_CONFIG", "calibration method"),
        ([[np.zeros((1, 3, 8, 8), np.float32)]], {"weight_bits": 3}, "ERR_INVALID_CONFIG", "weight_bits"),
    ],
)
def test_quantize_arguments_it_cannot_use_are_coded(made, batches, kw, code, says):
    """ValueError, or TVM's "Check failed ... match_cast" for a wrong shape; a NaN batch quantized silently."""
    mod = tvm_npu.from_onnx(str(made[0] / "model.onnx"))
    assert says in _coded(code, tvm_npu.quantize, mod, batches, **kw)


def test_profile_estimate_and_their_writers_refuse_what_they_do_not_take(made, tmp_path):
    d, _, x, _ = made
    _coded("ERR_INVALID_MODEL", tvm_npu.profile, str(d / "model.onnx"))
    _coded("ERR_INVALID_MODEL", tvm_npu.estimate, str(d / "model.onnx"))
    _coded("ERR_INVALID_CONFIG", tvm_npu.profile_to_csv, {"x": 1}, tmp_path / "p.csv")
    _coded("ERR_INVALID_CONFIG", tvm_npu.write_chrome_trace, {"x": 1}, tmp_path / "t.json")
    _coded("ERR_INVALID_CONFIG", tvm_npu.tools.asm, None)
    prof = tvm_npu.profile(tvm_npu.from_onnx(str(d / "model.onnx")), inputs=[x])  # the right case still runs
    tvm_npu.profile_to_csv(prof, tmp_path / "p.csv")
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + len(prof["layers"])


def test_sweep_refuses_an_unreadable_model_an_out_file_and_zero_jobs(made, tmp_path):
    """A library given as the model made every row ERR_INVALID_MODEL and exited 0; an --out that is a file
    raised FileExistsError; jobs=0 was taken."""
    d, *_ = made
    args = dict(mac="16x16", sram="1MiB", ddr_bw="8", progress=False, plots=False)
    _coded("ERR_INVALID_MODEL", tvm_npu.sweep, str(d / "lib.so"), out=tmp_path / "a", jobs=1, **args)
    (tmp_path / "file").write_text("x")
    assert "File exists" in _coded(
        "ERR_INVALID_CONFIG", tvm_npu.sweep, str(d / "model.onnx"), out=tmp_path / "file", jobs=1, **args
    )
    _coded("ERR_INVALID_CONFIG", tvm_npu.sweep, str(d / "model.onnx"), out=tmp_path / "b", jobs=0, **args)


def test_threads_sharing_one_model_get_onnxruntime_results(made):
    """Already right (the class's representative): 4 threads x 10 calls on one Model."""
    d, _, x, y = made
    model, got = tvm_npu.Model(tvm_npu.load_module(d / "lib.so")), []
    workers = [threading.Thread(target=lambda: got.extend(model(x) for _ in range(10))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(got) == 40
    for g in got:
        _close(g, y)


def test_plain_tvm_compile_still_matches_onnxruntime(made):
    """Already right: the README's path."""
    d, _, x, y = made
    ex = tvm.compile(tvm_npu.from_onnx(str(d / "model.onnx")), target="npu", relax_pipeline="npu")
    _close(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy(), y)


# -- the CLI ------------------------------------------------------------------------------------------------


def test_an_empty_output_path_is_a_coded_error(made, capsys, monkeypatch):
    """`-o ""` was "ValueError: PosixPath('.') has an empty name ... please report it"."""
    monkeypatch.chdir(made[0])
    code, err = _cli(["compile", "model.onnx", "-o", ""], capsys)
    assert code == 2 and "--output '': give a file path" in err


def test_asm_of_a_binary_file_is_a_coded_error(made, capsys):
    code, err = _cli(["asm", made[0] / "lib.so", "-o", made[0] / "never.bin"], capsys)
    assert code == 2 and "is not a text listing" in err and "UnicodeDecodeError" not in err


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--ambient", "1000"], "from -40 to 125 C"),  # OverflowError before
        (["--ambient", "nan"], "from -40 to 125 C"),  # NaN figures before
        (["--ambient", "-300"], "from -40 to 125 C"),  # a peak temperature of -300 C before
        (["--cpu-w", "-1"], "cannot be negative"),  # a negative CPU power
        (["--other-w", "inf"], "finite number"),  # NaN energies
        (["--fps", "1e-9"], "less than one frame"),  # figures of no frame
    ],
)
def test_sustain_numbers_that_describe_no_device_are_coded(made, capsys, extra, says):
    code, err = _cli(["sustain", made[0] / "lib.so", "--cpu-ms", "1", "--seconds", "1", *extra], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and says in err, err


def test_sustain_in_range_still_runs(made, capsys):
    code, _ = _cli(["sustain", made[0] / "lib.so", "--cpu-ms", "1", "--seconds", "2", "--ambient", "40"], capsys)
    assert code == 0


def test_generate_options_an_artifact_has_its_own_are_refused(tmp_path, capsys):
    """--kv-dtype int8 / --weights int8 on an artifact ran it as it was compiled, without a word."""
    from llm.reference import compiled

    lib = compiled("gpt2").export_library(tmp_path / "lm.so")
    for flag, value in (("--kv-dtype", "int8"), ("--weights", "int8"), ("--config", "npu-small")):
        code, err = _cli(["generate", lib, "--prompt-ids", "1,2", "--max-new-tokens", "2", flag, value], capsys)
        assert code == 2 and "ERR_INVALID_CONFIG" in err and flag in err, err
    code, err = _cli(["export-graph", lib, "-o", tmp_path / "g.onnx", "--no-run"], capsys)  # IndexError before
    assert code == 2 and "no main function" in err and not (tmp_path / "g.onnx").exists()


def test_run_matches_an_npz_by_name(made, tmp_path, capsys):
    """An .npz whose array is named z ran as the input x."""
    d, _, x, y = made
    np.savez(tmp_path / "bad.npz", z=x)
    code, err = _cli(["run", d / "lib.so", tmp_path / "bad.npz"], capsys)
    assert code == 2 and "ERR_SHAPE_MISMATCH" in err and "missing ['x'], unknown ['z']" in err
    np.savez(tmp_path / "good.npz", x=x)
    assert cli.main(["run", str(d / "lib.so"), str(tmp_path / "good.npz"), "-o", str(tmp_path / "y.npy")]) == 0
    _close(np.load(tmp_path / "y.npy"), y)


def test_sweep_of_a_library_exits_with_the_error(made, tmp_path, capsys):
    args = ["--mac", "16x16", "--sram", "1MiB", "--ddr-bw", "8", "--jobs", "1", "--no-plots", "--out", tmp_path / "s"]
    code, err = _cli(["sweep", made[0] / "lib.so", *args], capsys)
    assert code == 2 and "ERR_INVALID_MODEL" in err and not (tmp_path / "s" / "results.jsonl").exists()


def test_quantize_on_nan_calibration_is_refused(made, tmp_path, capsys):
    """It printed "activation range of x is empty or not finite" and wrote a library anyway."""
    (tmp_path / "cal").mkdir()
    np.save(tmp_path / "cal" / "0.npy", np.full((1, 3, 8, 8), np.nan, np.float32))
    out = tmp_path / "q.so"
    code, err = _cli(["quantize", made[0] / "model.onnx", "--calib", tmp_path / "cal", "-o", out], capsys)
    assert code == 2 and "holds NaN or inf" in err and not out.exists()


def test_run_names_the_file_np_save_writes(made, tmp_path, capsys, monkeypatch):
    """Already right: `-o y` saves y.npy, and says so."""
    d, _, x, y = made
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", str(d / "lib.so"), str(d / "x.npy"), "-o", "y"]) == 0
    assert "saved y.npy" in capsys.readouterr().out
    _close(np.load(tmp_path / "y.npy"), y)


def test_llm_and_config_arguments_python_would_refuse_are_coded():
    """TypeError before: llm.load(None), a builder without seq_len= / max_context=, NPUConfig(macs=16)."""
    _coded("ERR_BAD_ARTIFACT", tvm_npu.llm.load, None)
    msg = _coded("ERR_INVALID_MODEL", tvm_npu.llm.compile, lambda: None, max_context=16, prefill_len=8)
    assert "builder(seq_len=S, max_context=T)" in msg
    assert "no field macs" in _coded("ERR_INVALID_CONFIG", tvm_npu.NPUConfig, macs=16)
    assert tvm_npu.NPUConfig(mac_rows=32, mac_cols=32).mac_rows == 32
