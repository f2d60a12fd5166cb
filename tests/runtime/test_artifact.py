"""Artifacts: export, load in a fresh process, the plain `tvm.compile` path, damaged streams."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tvm_npu
from builders import chain, conv_layer, dense_layer
from conftest import npu_modules, run_cpu, run_vm
from tvm_npu.contract import stream


def _python(code: str, cwd) -> str:
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_export_and_load_in_fresh_process(rng, tmp_path):
    layers = [conv_layer(rng, 3, 8, 3), {"op": "cpu", "fn": "sin"}, conv_layer(rng, 8, 4, 3, stride=2)]
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, layers))
    assert len(npu_modules(ex)) == 2  # the sin is a CPU island between two NPU regions
    expected = run_vm(ex, x)
    np.testing.assert_allclose(expected, run_cpu(chain(x.shape, layers), x), rtol=3e-2, atol=3e-2)
    tvm_npu.export_library(ex, tmp_path / "model.so")  # plain TVM loads it: the loader ignores the trailer
    np.save(tmp_path / "x.npy", x)
    _python(
        """
        import numpy as np, tvm
        from tvm import relax
        lib = tvm.runtime.load_module("model.so")
        vm = relax.VirtualMachine(lib, tvm.cpu())
        np.save("y.npy", vm["main"](tvm.runtime.tensor(np.load("x.npy"))).numpy())
    """,
        tmp_path,
    )
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_plain_tvm_compile_in_subprocess_that_only_imports_tvm(tmp_path):
    out = _python(
        """
        import numpy as np, tvm
        from tvm import relax
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
        w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype("float32")
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit_output(bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(w), padding=1))))
            bb.emit_func_output(y)
        ex = tvm.compile(bb.get(), target="npu", relax_pipeline="npu")
        kinds = []
        todo = [ex.mod]
        while todo:
            m = todo.pop(); kinds.append(m.kind); todo.extend(m.imports)
        xv = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
        y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
        np.save("y.npy", y); np.save("x.npy", xv); np.save("w.npy", w)
        print(",".join(kinds))
    """,
        tmp_path,
    )
    assert "npu" in out.split(",")
    from npu_ref import fp16

    ref = fp16.conv2d_nchw(np.load(tmp_path / "x.npy"), np.load(tmp_path / "w.npy"), pad=(1, 1, 1, 1), act="relu")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), ref)


@pytest.fixture
def blob(rng):
    ex = tvm_npu.build(chain((1, 3, 8, 8), [conv_layer(rng, 3, 8, 3)]))
    (module,) = npu_modules(ex)
    return bytes(module["get_stream"]())


def test_stream_roundtrip(blob):
    parsed = stream.decode(blob)
    # A stream that uses nothing of format 1.4 still says 1.3 (stream.written_minor), so 1.3 runtimes run it.
    assert parsed.version == (1, 3) and stream.VERSION_MINOR == 8
    assert parsed.commands[-1].op == "END"
    assert stream.encode(parsed) == blob
    summary = tvm_npu.runtime.validate_stream(blob)
    assert summary["num_commands"] == len(parsed.commands)


@pytest.mark.parametrize("damage", ["flip_weight", "flip_command", "truncate", "version", "magic"])
def test_damaged_stream_is_refused(blob, damage):
    b = bytearray(blob)
    if damage == "flip_weight":
        b[-1] ^= 0x40
    elif damage == "flip_command":
        b[200] ^= 0x01
    elif damage == "truncate":
        b = b[: len(b) // 2]
    elif damage == "version":
        b[4] = 2
    else:
        b[0] = 0
    with pytest.raises(tvm_npu.NPUError, match="ERR_BAD_STREAM") as info:
        tvm_npu.runtime.create_module("f", bytes(b))
    assert info.value.code == "ERR_BAD_STREAM"


def test_config_is_selectable_per_build(rng):
    mod = chain((1, 64, 16, 16), [conv_layer(rng, 64, 64, 3)])
    for name, macs in (("npu-ref", 32), ("npu-small", 16)):
        (module,) = npu_modules(tvm_npu.build(mod, config=name))
        parsed = stream.decode(bytes(module["get_stream"]()))
        assert (parsed.config.mac_rows, parsed.config.sram_bytes) == (macs, tvm_npu.PRESETS[name].sram_bytes)


def test_sram_overflow_is_a_compile_time_error(rng):
    # 3x3x512 fp16 weights are 9216 bytes per output channel; written to DDR, a channel block must
    # start on a 128-byte DMA boundary (64 channels), and 64 x 9216 bytes already exceed npu-small's
    # 512 KiB of SRAM. (256 output channels would run, in blocks: test_tiling_property.)
    mod = chain((1, 512, 4, 4), [conv_layer(rng, 512, 512, 3)])
    with pytest.raises(tvm_npu.NPUError, match="ERR_SRAM_OVERFLOW") as info:
        tvm_npu.build(mod, config="npu-small")
    assert "524288" in str(info.value) and str(64 * 9216 + 256) in str(info.value)


def test_dense_weights_larger_than_sram_are_streamed(rng):
    from npu_ref import fp16

    layer = dense_layer(rng, 1024, 1024)  # 2 MiB of fp16 weights; npu-small has 512 KiB
    x = rng.standard_normal((3, 1024)).astype(np.float32)
    ex = tvm_npu.build(chain(x.shape, [layer]), config="npu-small")
    np.testing.assert_array_equal(run_vm(ex, x), fp16.dense(x, layer["w"], layer["b"]))
