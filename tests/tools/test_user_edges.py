"""What a new user meets first (issue 19's edges): inputs given as a dict, a bare array or .npz files;
models TVM cannot import; models with symbolic shapes, which no tool may report as running on the NPU;
and a CLI whose every failure is one line."""

import json

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from tvm_npu.tools import cli


def _conv_model(batch="1"):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    dim = batch if batch == "N" else int(batch)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4, 6, 6])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _det_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    g = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _shape_gather_model():
    """Shape -> Gather -> Concat -> Reshape: TVM 0.27's importer raises a TypeError on the computed shape.
    The batch symbolic: at static shapes tvm_npu.from_onnx folds the arithmetic (frontend/shape_fold.py)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
        helper.make_node("Concat", ["g", "m"], ["ns"], axis=0),
        helper.make_node("Reshape", ["x", "ns"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("i", 0), ("m", -1))]
    g = helper.make_graph(nodes, "gather_shape", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("edges")
    onnx.save(_conv_model(), str(d / "conv.onnx"))
    onnx.save(_conv_model("N"), str(d / "dyn.onnx"))
    onnx.save(_det_model(), str(d / "det.onnx"))
    onnx.save(_shape_gather_model(), str(d / "gather_shape.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(d / "x.npy", x)
    np.savez(d / "x.npz", x=x)
    return d, x


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm-npu: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _reference(path, x):
    ex = tvm.compile(tvm_npu.from_onnx(str(path)), target="llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("form", ["dict", "array", "list", "npz path", "npy path"])
def test_profile_takes_inputs_in_every_form_a_user_has(files, form):
    d, x = files
    mod = tvm_npu.from_onnx(str(d / "conv.onnx"))
    given = {"dict": {"x": x}, "array": x, "list": [x], "npz path": str(d / "x.npz"), "npy path": str(d / "x.npy")}[
        form
    ]
    prof = tvm_npu.profile(mod, inputs=given)
    assert prof["total_cycles"] == tvm_npu.profile(mod, inputs=[x])["total_cycles"] > 0
    assert len(prof["layers"]) == 1


@pytest.mark.parametrize(
    "given, message",
    [
        (lambda x: {"y": x}, "missing ['x'], unknown ['y']"),
        (lambda x: np.concatenate([x, x]), "expected shape (1, 3, 8, 8) float32, got (2, 3, 8, 8) float32"),
        (lambda x: x.astype(np.float64), "got (1, 3, 8, 8) float64"),
        (lambda x: np.asarray("x.npy"), "expected a numeric array, got dtype <U5"),
        (lambda x: [x, x], "main takes 1 input(s) (x), 2 given"),
    ],
)
def test_profile_inputs_that_do_not_fit_are_coded_errors(files, given, message):
    d, x = files
    with pytest.raises(tvm_npu.NPUError, match="ERR_SHAPE_MISMATCH") as info:
        tvm_npu.profile(tvm_npu.from_onnx(str(d / "conv.onnx")), inputs=given(x))
    assert message in str(info.value)


def test_run_and_profile_read_npz_files(files, tmp_path, capsys):
    d, x = files
    lib = tmp_path / "conv.so"
    assert cli.main(["compile", str(d / "conv.onnx"), "-o", str(lib)]) == 0
    for name in ("x.npz", "x.npy"):
        out = tmp_path / f"y_{name}.npy"
        assert cli.main(["run", str(lib), str(d / name), "-o", str(out)]) == 0
        np.testing.assert_allclose(np.load(out), _reference(d / "conv.onnx", x), rtol=1e-2, atol=1e-2)
    capsys.readouterr()
    assert (
        cli.main(["profile", str(d / "conv.onnx"), "--input", str(d / "x.npz"), "--json", str(tmp_path / "p.json")])
        == 0
    )
    assert json.loads((tmp_path / "p.json").read_text())["total_cycles"] > 0


def test_an_op_tvm_cannot_import_is_one_coded_line(files, capsys):
    d, _ = files
    assert cli.main(["report", str(d / "det.onnx")]) == 2
    err = _one_line(capsys)
    assert "ERR_OP_NOT_SUPPORTED" in err and "Det" in err
    with pytest.raises(tvm_npu.NPUError, match="ERR_OP_NOT_SUPPORTED.*Det"):
        tvm_npu.from_onnx(str(d / "det.onnx"))


def test_any_importer_failure_is_one_coded_line(files, capsys):
    """TVM's converters raise plain TypeErrors and ValueErrors too: coded, with what to change."""
    d, _ = files
    assert cli.main(["report", str(d / "gather_shape.onnx")]) == 2
    err = _one_line(capsys)
    assert "ERR_OP_NOT_SUPPORTED" in err and "TypeError: Reshape requires" in err and "fold shape" in err


def test_symbolic_shapes_are_never_reported_as_running_on_the_npu(files, tmp_path, capsys):
    d, x = files
    assert cli.main(["report", str(d / "dyn.onnx")]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 ops on the NPU, MACs not counted (symbolic shapes)" in out
    assert "100.0%" not in out

    assert cli.main(["profile", str(d / "dyn.onnx")]) == 2  # no random input stands for a symbolic dim
    assert "ERR_SHAPE_MISMATCH" in _one_line(capsys)

    res = tvm_npu.sweep(
        str(d / "dyn.onnx"),
        mac="16x16",
        sram="1MiB",
        ddr_bw="16",
        out=tmp_path / "sw",
        executor=None,
        jobs=1,
        progress=False,
        plots=False,
    )
    (row,) = res.rows
    assert not row["feasible"] and row["error_code"] == "NPU_E_DYNAMIC_SHAPE", row
    assert "no op of the model runs on the NPU" in row["reason"]
    assert not res.pareto


def test_an_unexpected_error_is_one_line_unless_traceback_is_asked_for(files, monkeypatch, capsys):
    d, _ = files
    from tvm_npu.tools import commands

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setitem(commands.COMMANDS, "report", broken)
    assert cli.main(["report", str(d / "conv.onnx")]) == 3
    err = _one_line(capsys)
    assert "KeyError" in err and "--traceback" in err
    with pytest.raises(KeyError):
        cli.main(["--traceback", "report", str(d / "conv.onnx")])


def test_error_codes_name_the_real_cause(files, tmp_path, capsys):
    """An unreadable model is ERR_INVALID_MODEL and an unknown configuration ERR_INVALID_CONFIG; both were
    ERR_OP_NOT_SUPPORTED, which says the NPU cannot run an op."""
    d, _ = files
    (tmp_path / "notes.onnx").write_text("not a model")
    assert cli.main(["report", str(tmp_path / "notes.onnx")]) == 2
    assert _one_line(capsys).startswith("tvm-npu: error: ERR_INVALID_MODEL: ")
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.build(tvm_npu.from_onnx(str(d / "conv.onnx")), config="npu-huge")
    assert info.value.code == "ERR_INVALID_CONFIG" and "npu-ref" in str(info.value)
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.NPUConfig(sram_bytes=1000)
    assert info.value.code == "ERR_INVALID_CONFIG" and "sram_bytes" in str(info.value)
