"""Probes of the edges a user touches (issue 32): no output may destroy an input or be left half-written,
a failed write is a coded error with the path and the reason, no argument runs for hours or crashes,
and every bad argument of the samplers, generate, compile, AsyncModel.wait and disasm is a coded
NPUError. CLI cases that crashed or hung run in a subprocess with a timeout; the rest call cli.main."""

import errno
import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from tvm_npu.runtime import files
from tvm_npu.tools import cli

CLI = [sys.executable, "-c", "import sys; from tvm_npu.tools.cli import main; sys.exit(main())"]


def _conv_model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _leftovers(folder) -> list:
    """Temporary files of runtime/files.py (".<stem>.<hex>.tmp<suffix>") left in `folder`."""
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """model.onnx, its library lib.so, the library's listing lib.lst and an input x.npy."""
    d = tmp_path_factory.mktemp("probe")
    onnx.save(_conv_model(), str(d / "model.onnx"))
    ex = tvm_npu.build(tvm_npu.from_onnx(str(d / "model.onnx")))
    tvm_npu.export_library(ex, d / "lib.so")
    (d / "lib.lst").write_text(tvm_npu.tools.disasm(d / "lib.so"))
    np.save(d / "x.npy", np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32))
    return d


def _cli(args, capsys):
    code = cli.main([str(a) for a in args])
    return code, " ".join(capsys.readouterr().err.split())


def _subprocess(args, cwd, timeout=240):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([*CLI, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


# -- an output that is an input ---------------------------------------------------------------------------


def test_compile_onto_its_own_model_is_refused_and_the_model_kept(made):
    before = _sha(made / "model.onnx")
    res = _subprocess(["compile", "model.onnx", "-o", "model.onnx"], made)
    assert res.returncode == 2, res.stderr
    assert "ERR_INVALID_CONFIG" in res.stderr and "would destroy the input" in res.stderr
    assert _sha(made / "model.onnx") == before and onnx.load(str(made / "model.onnx")).graph.node[0].op_type == "Conv"


def test_asm_into_the_library_it_writes_is_refused_not_a_segfault(made):
    """It wrote lib.so over the library it had dlopened and died of SIGSEGV (exit -11) after "wrote"."""
    before = _sha(made / "lib.so")
    res = _subprocess(["asm", "lib.lst", "--into", "lib.so", "-o", "lib.so"], made)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "ERR_INVALID_CONFIG" in res.stderr and "'lib.so'" in res.stderr
    assert _sha(made / "lib.so") == before and not _leftovers(made)


def test_a_loaded_library_replaced_by_rename_keeps_the_process_alive(made, tmp_path):
    """The cause of the asm crash: writing a dlopened library in place (truncate + write) kills the process;
    the rename of runtime/files.py leaves the mapped file intact. The in-place run shows the probe can fail.
    The library is held loaded while it is written (load_module unloads a library once dropped)."""
    lib = tmp_path / "lib.so"
    script = (
        "import sys; from pathlib import Path; from tvm_npu.tools.disasm import read_library; "
        "from tvm_npu.runtime import load_module; held = load_module(sys.argv[1]); "
        "from tvm_npu.runtime.files import write_bytes; lib = read_library(held); "
        "data = Path(sys.argv[2]).read_bytes(); "
        "write_bytes(sys.argv[1], data) if sys.argv[3] == 'rename' else Path(sys.argv[1]).write_bytes(data); "
        "print(len(lib.regions))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    codes = {}
    for how in ("rename", "in place"):
        lib.write_bytes((made / "lib.so").read_bytes())
        res = subprocess.run(
            [sys.executable, "-c", script, lib, made / "lib.so", how], capture_output=True, timeout=240, env=env
        )
        codes[how] = res.returncode
    assert codes["rename"] == 0 and codes["in place"] != 0, codes


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_an_output_linked_to_the_input_is_refused(made, tmp_path, capsys, link):
    (os.link if link == "hard" else os.symlink)(made / "model.onnx", tmp_path / "out.so")
    before = _sha(made / "model.onnx")
    code, err = _cli(["compile", made / "model.onnx", "-o", tmp_path / "out.so"], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "same file" in err
    assert _sha(made / "model.onnx") == before


@pytest.mark.parametrize(
    "args, kept",
    [
        (["disasm", "lib.so", "-o", "lib.so"], "lib.so"),
        (["export-graph", "lib.so", "-o", "lib.so", "--no-run"], "lib.so"),
        (["run", "lib.so", "x.npy", "-o", "x.npy"], "x.npy"),
        (["asm", "lib.lst", "--into", "lib.so", "-o", "lib.lst"], "lib.lst"),
        (["asm", "lib.lst", "-o", "lib.lst"], "lib.lst"),
        (["profile", "model.onnx", "--json", "model.onnx"], "model.onnx"),
        (["profile", "model.onnx", "--input", "x.npy", "--csv", "x.npy"], "x.npy"),
        (["compile", "model.onnx", "-o", "m.so", "--report", "model"], None),  # model.json / .txt: fine
        (["sustain", "lib.so", "--cpu-ms", "1", "--seconds", "1", "--json", "lib.so"], "lib.so"),
        (["sweep", "model.onnx", "--out", "model.onnx"], "model.onnx"),
    ],
)
def test_every_command_refuses_an_input_as_its_output(made, capsys, monkeypatch, args, kept):
    monkeypatch.chdir(made)
    if kept is None:  # the control: --report model writes model.json / model.txt, neither is the model
        before = _sha("model.onnx")
        assert cli.main(args) == 0
        assert _sha("model.onnx") == before and (made / "model.json").is_file()
        return
    before = _sha(kept)
    code, err = _cli(args, capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "would destroy the input" in err, err
    assert _sha(kept) == before and not _leftovers(made)


def test_two_outputs_on_one_path_are_refused(made, tmp_path, capsys):
    out = tmp_path / "p.json"
    code, err = _cli(["profile", made / "model.onnx", "--json", out, "--trace", out], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "--trace" in err and not out.exists()


# -- a write that fails -----------------------------------------------------------------------------------


def test_an_output_under_a_regular_file_is_a_coded_error_before_the_build(made, tmp_path, capsys):
    (tmp_path / "plain").write_text("a file, not a folder")
    code, err = _cli(["compile", made / "model.onnx", "-o", tmp_path / "plain" / "lib.so"], capsys)
    assert code == 2 and err.startswith("tvm-npu: error: ERR_INVALID_CONFIG: cannot write")
    assert str(tmp_path / "plain" / "lib.so") in err and "ENOTDIR" in err
    assert (tmp_path / "plain").read_text() == "a file, not a folder"


def test_an_output_that_is_a_folder_is_refused_before_the_build(made, tmp_path, capsys):
    code, err = _cli(["compile", made / "model.onnx", "-o", tmp_path], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "EISDIR" in err and list(tmp_path.iterdir()) == []


def test_an_output_the_os_refuses_is_a_coded_error(made, capsys):
    """/proc takes no new files, even from root (a chmod'ed folder does not stop root)."""
    code, err = _cli(["disasm", made / "lib.so", "-o", "/proc/lib.lst"], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "/proc/lib.lst" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_a_coded_error(made, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, err = _cli(["compile", made / "model.onnx", "-o", ro / "lib.so"], capsys)
    finally:
        ro.chmod(0o700)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "Permission denied" in err and not list(ro.iterdir())


@pytest.mark.parametrize("failure", ["disk full", "interrupted"])
def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path, failure):
    target = tmp_path / "lib.so"
    target.write_bytes(b"the old library")

    def writer(tmp):
        tmp.write_bytes(b"half of the new")
        if failure == "disk full":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
        raise KeyboardInterrupt

    if failure == "disk full":
        with pytest.raises(tvm_npu.NPUError) as info, files.replacing(target) as tmp:
            writer(tmp)
        assert info.value.code == "ERR_INVALID_CONFIG" and str(target) in str(info.value)
        assert "No space left on device" in str(info.value) and "ENOSPC" in str(info.value)
    else:
        with pytest.raises(KeyboardInterrupt), files.replacing(target) as tmp:
            writer(tmp)
    assert target.read_bytes() == b"the old library" and _leftovers(tmp_path) == []


def test_export_library_under_a_regular_file_is_coded(made, tmp_path):
    (tmp_path / "plain").write_text("x")
    ex = tvm_npu.build(tvm_npu.from_onnx(str(made / "model.onnx")))
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.export_library(ex, tmp_path / "plain" / "lib.so")
    assert info.value.code == "ERR_INVALID_CONFIG" and "plain" in str(info.value)


def test_a_successful_write_replaces_the_file_whole_with_its_mode(made, tmp_path, capsys):
    out = tmp_path / "lib.lst"
    out.write_text("an older listing")
    assert cli.main(["disasm", str(made / "lib.so"), "-o", str(out)]) == 0
    assert out.read_text() == (made / "lib.lst").read_text() and _leftovers(tmp_path) == []
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


# -- output to a closed pipe, and bounded work ------------------------------------------------------------


def test_report_into_a_closed_pipe_exits_quietly(made):
    """`tvm-npu report m.onnx | head`: the reader goes away; it printed "BrokenPipeError ... please report it"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [*CLI, "report", "model.onnx"], cwd=made, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    proc.stdout.close()  # before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=240) == 141, err
    assert "Error" not in err and "report it" not in err, err


def test_sustain_for_a_trillion_seconds_is_refused_at_once(made):
    res = _subprocess(["sustain", "lib.so", "--cpu-ms", "1", "--seconds", "1e12"], made, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "ERR_INVALID_CONFIG" in res.stderr and "1,000,000 frames" in res.stderr and "seconds <=" in res.stderr


@pytest.mark.parametrize("args", [["--seconds", "nan"], ["--seconds", "inf", "--fps", "0"], ["--fps", "inf"]])
def test_sustain_refuses_numbers_that_never_end(made, capsys, args):
    code, err = _cli(["sustain", made / "lib.so", "--cpu-ms", "1", *args], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "finite" in err


def test_sustain_caps_frames_not_seconds(made):
    """At most 1,000,000 frames: 33,334 s at 30 fps is refused; 120 s at 30 fps runs its 3,600 frames."""
    from tvm_npu.tools.sustain import MAX_FRAMES, sustain

    with pytest.raises(tvm_npu.NPUError) as info:
        sustain(made / "lib.so", fps=30, seconds=33_334, cpu_ms=1)
    assert info.value.code == "ERR_INVALID_CONFIG" and "1,000,000" in str(info.value)
    res = sustain(made / "lib.so", fps=30, seconds=120, cpu_ms=1)
    assert res.summary["frames"] == 3600 <= MAX_FRAMES


def test_generate_max_context_zero_is_refused_not_made_64(capsys):
    code, err = _cli(["generate", "gpt2", "--prompt-ids", "1,2", "--max-context", "0"], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "max_context=0" in err


# -- the Python API's arguments ---------------------------------------------------------------------------

SAMPLERS = {
    "k 2.5": ("top_k", (2.5,), {}),
    "k 0": ("top_k", (0,), {}),
    "k True": ("top_k", (True,), {}),
    "k '3'": ("top_k", ("3",), {}),
    "temperature 0": ("top_k", (2,), {"temperature": 0}),
    "temperature NaN": ("top_k", (2,), {"temperature": math.nan}),
    "temperature inf": ("top_p", (0.5,), {"temperature": math.inf}),
    "p 1.5": ("top_p", (1.5,), {}),
    "p 0": ("top_p", (0.0,), {}),
    "p NaN": ("top_p", (math.nan,), {}),
    "seed -1": ("top_p", (0.5,), {"seed": -1}),
    "seed 1.5": ("top_k", (2,), {"seed": 1.5}),
}


@pytest.mark.parametrize("case", sorted(SAMPLERS))
def test_a_sampler_argument_it_cannot_use_is_coded(case):
    name, args, kw = SAMPLERS[case]
    with pytest.raises(tvm_npu.NPUError) as info:
        getattr(tvm_npu.llm, name)(*args, **kw)
    assert info.value.code == "ERR_INVALID_CONFIG" and "pass " in str(info.value)


def test_samplers_still_draw_from_their_candidates():
    logits = np.log(np.array([0.05, 0.5, 0.3, 0.15], np.float32))
    assert {tvm_npu.llm.top_k(np.int64(2), seed=np.int32(1))(logits) for _ in range(50)} <= {1, 2}
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.greedy(np.zeros((2, 4), np.float32))
    assert info.value.code == "ERR_SHAPE_MISMATCH"


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(max_new_tokens=2.5), "ERR_INVALID_CONFIG"),
        (dict(max_new_tokens="3"), "ERR_INVALID_CONFIG"),
        (dict(max_new_tokens=-1), "ERR_INVALID_CONFIG"),
        (dict(max_new_tokens=10**12), "ERR_LLM_CONTEXT"),  # bounded by max_context, before any work
        (dict(sampler="greedy"), "ERR_INVALID_CONFIG"),
        (dict(on_token=3), "ERR_INVALID_CONFIG"),
    ],
)
def test_generate_arguments_are_coded_and_leave_the_sequence(kw, code):
    from llm.reference import compiled

    lm = compiled("gpt2")
    lm.reset()
    lm.prefill(np.array([5, 6, 7]))
    lm.decode(9)
    length, cache = lm.length, [c.copy() for c in lm.cache()]
    with pytest.raises(tvm_npu.NPUError) as info:
        lm.generate([1, 2], **kw)
    assert info.value.code == code, str(info.value)
    assert lm.length == length and all(np.array_equal(a, b) for a, b in zip(lm.cache(), cache))


@pytest.mark.parametrize("kw", [dict(max_context=64.0), dict(max_context=0), dict(max_context=16, prefill_len=0)])
def test_compile_numbers_are_coded(kw):
    from tvm_npu.models.decoder import gpt2_step

    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.compile(gpt2_step, **kw)
    assert info.value.code == "ERR_INVALID_CONFIG" and "pass an int >= 1" in str(info.value)


def test_async_wait_takes_seconds_and_stays_usable(made):
    model = tvm_npu.AsyncModel(tvm_npu.load_module(made / "lib.so"))
    x = np.load(made / "x.npy")
    pending = model.start(x)
    for bad in ("1", -1, math.nan, True):
        with pytest.raises(tvm_npu.NPUError) as info:
            pending.wait(bad)
        assert info.value.code == "ERR_INVALID_CONFIG" and "seconds" in str(info.value)
    assert pending.wait(60).shape == (1, 4, 6, 6)


@pytest.mark.parametrize("bad", [1, None, 2.5, object()])
def test_disasm_of_something_else_is_coded(bad):
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.tools.disasm(bad)
    assert info.value.code == "ERR_INVALID_CONFIG" and "library path" in str(info.value)


@pytest.mark.parametrize(
    "args, says",
    [
        (["sweep", "model.onnx", "--jobs", "1000"], "--jobs 1000: give 1 to 64"),
        (["export-graph", "lib.so", "--serve", "--port", "70000", "-o", "g.onnx"], "--port 70000"),
    ],
)
def test_cli_numbers_past_their_range_are_coded(made, capsys, monkeypatch, args, says):
    monkeypatch.chdir(made)
    code, err = _cli(args, capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and says in err, err


def test_sustain_repeats_are_bounded(made):
    from tvm_npu.tools.sustain import sustain

    with pytest.raises(tvm_npu.NPUError) as info:
        sustain(made / "lib.so", inputs=[np.load(made / "x.npy")], repeats=10**9)
    assert info.value.code == "ERR_INVALID_CONFIG" and "repeats" in str(info.value)


def test_generate_options_an_artifact_cannot_take_are_refused_not_ignored(tmp_path, capsys):
    from llm.reference import compiled

    lib = compiled("gpt2").export_library(tmp_path / "lm.so")
    code, err = _cli(["generate", lib, "--prompt-ids", "1,2", "--max-context", "128", "--prefill-len", "4"], capsys)
    assert code == 2 and "ERR_INVALID_CONFIG" in err and "--max-context, --prefill-len" in err
