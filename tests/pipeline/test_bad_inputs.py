"""Bad input ends in a coded error or a reasoned CPU fallback, never a crash or a silent wrong answer."""

import re

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from builders import chain, conv_layer
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import fp16
from tvm_npu.contract import stream


def _single_op(shape, dtype, emit):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(emit(x)))
        bb.emit_func_output(out)
    return bb.get()


def _placement(mod, op):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(mod, report=report)
    return ex, [p for p in report.placements if p.op == op][0]


def test_float64_conv_stays_on_cpu(rng):
    w = rng.standard_normal((4, 3, 3, 3))
    mod = _single_op((1, 3, 8, 8), "float64", lambda x: relax.op.nn.conv2d(x, relax.const(w, "float64")))
    ex, row = _placement(mod, "relax.nn.conv2d")
    assert row.device == "cpu" and row.code == "NPU_E_DTYPE"
    x = rng.standard_normal((1, 3, 8, 8))
    np.testing.assert_allclose(run_vm(ex, x), run_cpu(mod, x), rtol=1e-12)


def test_rank_5_stays_on_cpu(rng):
    shape = (1, 2, 3, 4, 5)
    bb = relax.BlockBuilder()
    a, b = (relax.Var(n, relax.TensorType(shape, "float32")) for n in "ab")
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.add(a, b)))
        bb.emit_func_output(out)
    report = tvm_npu.BuildReport()
    tvm_npu.build(bb.get(), report=report)
    (row,) = report.placements
    assert row.device == "cpu" and row.code == "NPU_E_RANK"


def test_width_over_2048_stays_on_cpu(rng):
    layer = conv_layer(rng, 2, 2, 1)
    ex, row = _placement(chain((1, 2, 2, 2100), [layer]), "relax.nn.conv2d")
    assert row.device == "cpu" and row.code == "NPU_E_WIDTH" and "2100" in row.reason


@pytest.mark.parametrize(
    "shape, dtype, names", [((1, 3, 9, 8), np.float32, "shape"), ((1, 3, 8, 8), np.int32, "float32")]
)
def test_wrong_input_at_run_time(rng, shape, dtype, names):
    ex = tvm_npu.build(chain((1, 3, 8, 8), [conv_layer(rng, 3, 4, 3)]))
    (module,) = npu_modules(ex)
    x = tvm.runtime.tensor(np.zeros(shape, dtype))
    out = tvm.runtime.tensor(np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(tvm_npu.NPUError, match="ERR_SHAPE_MISMATCH") as info:
        module[module["get_symbol"]()](x, out)
    assert names in str(info.value)


@pytest.mark.parametrize(
    "shape, dtype, says",
    [
        ((1, 3, 9, 8), np.float32, "shape[2] mismatch"),
        ((1, 3, 8, 8), np.int32, "dtype float32 but get int32"),
        ((3, 8, 8), np.float32, "ndim 4 but get 3"),
    ],
)
def test_wrong_input_through_the_vm_is_refused_before_the_npu(rng, shape, dtype, says):
    """Through the Relax VM, TVM checks every argument against main's signature first: its own error
    (not an NPUError), naming the parameter and the expected tensor; the NPU is never called."""
    vm = relax.VirtualMachine(tvm_npu.build(chain((1, 3, 8, 8), [conv_layer(rng, 3, 4, 3)])), tvm.cpu())
    with pytest.raises((ValueError, RuntimeError), match=re.escape(says)) as info:
        vm["main"](tvm.runtime.tensor(np.zeros(shape, dtype)))
    assert 'R.Tensor((1, 3, 8, 8), dtype="float32")' in str(info.value)


def test_nan_and_inf_inputs_follow_ieee(rng):
    """Defined behaviour (docs/npu.md section 2): NaN propagates to the outputs that read it, finite values
    beyond fp16 saturate to +-65504 as the runtime stages them; the rest of the output is unaffected and
    bit-exact."""
    layer = conv_layer(rng, 3, 4, 3, act="relu")
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[0, 0, 9, 9] = 1e6  # beyond fp16's 65504
    ex = tvm_npu.build(chain(x.shape, [layer]))
    got = run_vm(ex, x)
    want = fp16.conv2d_nchw(fp16.stage(x), layer["w"], layer["b"], pad=(1,) * 4, act="relu")
    np.testing.assert_array_equal(got, want)  # NaN positions equal too
    assert np.isnan(got[0, :, 1:4, 2:5]).all() and np.isfinite(got[0, :, :, :1]).all()


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """An exported model (conv on the NPU) and the offset of its command stream inside the file."""
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("artifact") / "model.so"
    tvm_npu.export_library(tvm_npu.build(chain((1, 3, 8, 8), [conv_layer(rng, 3, 8, 3)])), path)
    data = path.read_bytes()
    assert data.count(b"NPUS") == 1  # the stream's magic: the stream is stored as it is
    return data, data.index(b"NPUS")


def _write(tmp_path, data):
    path = tmp_path / "damaged.so"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("cut", [lambda n: 64, lambda n: n // 2, lambda n: n - 1], ids=["header", "half", "last_byte"])
def test_truncated_artifact_is_a_coded_error(artifact, tmp_path, cut):
    """tvm.runtime.load_module on a truncated library dies of SIGBUS inside dlopen; tvm_npu.load_module
    refuses it first (and `tvm-npu run` uses it): its integrity trailer is gone, and without the trailer
    check (verify=False) the ELF check finds the missing bytes."""
    data, _ = artifact
    with pytest.raises(tvm_npu.NPUError, match="ERR_BAD_ARTIFACT.*without tvm_npu's integrity trailer"):
        tvm_npu.load_module(_write(tmp_path, data[: cut(len(data))]))
    with pytest.raises(tvm_npu.NPUError, match="ERR_BAD_ARTIFACT.*not a complete shared library"):
        tvm_npu.load_module(_write(tmp_path, data[: cut(len(data) - 56)]), verify=False)


def test_corrupted_artifact_is_refused_at_load(artifact, tmp_path):
    """The trailer's SHA-256 refuses it before dlopen; loaded without that check, the stream's own CRC
    still refuses it."""
    data, at = artifact
    damaged = bytearray(data)
    damaged[at + 300] ^= 0x10  # a bit inside the stream's tables or weights
    with pytest.raises(tvm_npu.NPUError, match="ERR_BAD_ARTIFACT: .*SHA-256 of the library disagrees"):
        tvm_npu.load_module(_write(tmp_path, damaged))
    with pytest.raises(tvm_npu.NPUError, match="ERR_BAD_STREAM: crc mismatch"):
        tvm_npu.load_module(_write(tmp_path, damaged), verify=False)


def test_artifact_of_another_format_version_is_refused_at_load(artifact, tmp_path):
    data, at = artifact
    newer = bytearray(data)
    newer[at + 4 : at + 6] = (2).to_bytes(2, "little")  # major version 2
    minor = int.from_bytes(data[at + 6 : at + 8], "little")  # 1.3: the stream uses nothing of 1.4
    assert minor == 3 and stream.VERSION_MINOR == 8
    with pytest.raises(tvm_npu.NPUError, match=rf"ERR_BAD_STREAM: stream version 2\.{minor}.*recompile"):
        tvm_npu.load_module(_write(tmp_path, newer), verify=False)  # as if exported by a newer tvm_npu
    intact = tvm_npu.load_module(_write(tmp_path, data))  # the checks pass an intact artifact
    assert len(npu_modules(intact)) == 1


def test_nan_and_inf_inputs_of_an_int8_model_saturate_at_its_quantize(tmp_path):
    """Defined behaviour (docs/reliability.md): an int8 model's input is quantized on the CPU by TVM,
    which saturates +-inf to the extreme codes and maps NaN to the largest code, as +inf; the NPU sees
    only integers, so every output is finite and only the outputs whose window reads the value change."""
    from qdq_models import GraphBuilder, quantize_with_ort

    g = GraphBuilder(3)
    model = g.model([1, 3, 10, 10], g.conv("input", 3, 8, 3), [1, 8, 10, 10])
    rng = np.random.default_rng(0)
    q = quantize_with_ort(
        model, [rng.standard_normal((1, 3, 10, 10)).astype(np.float32) for _ in range(4)], tmp_path / "q.onnx"
    )
    ex = tvm_npu.build(tvm_npu.from_onnx(q))
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    clean = run_vm(ex, x)
    outs = {}
    for v in (np.nan, np.inf, -np.inf, 1e30, -1e30):
        bad = x.copy()
        bad[0, 1, 4, 4] = v
        outs[v] = run_vm(ex, bad)
        assert np.isfinite(outs[v]).all()
        changed = np.argwhere(outs[v] != clean)[:, 2:]
        assert len(changed) and changed.min() >= 3 and changed.max() <= 5  # the 3x3 window around (4, 4)
    np.testing.assert_array_equal(outs[np.inf], outs[1e30])
    np.testing.assert_array_equal(outs[-np.inf], outs[-1e30])
    np.testing.assert_array_equal(outs[np.nan], outs[np.inf])
