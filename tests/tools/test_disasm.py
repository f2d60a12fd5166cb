"""`tvm-npu disasm` / `asm`: the listing of the tutorial and benchmark models reads back into the very bytes
of their libraries (tools/disasm.py, tools/asm.py, docs/disasm.md)."""

import tempfile

import numpy as np
import pytest
import tvm
from onnx import numpy_helper
from tvm import relax

import tvm_npu
from conftest import load_script
from tvm_npu import runtime
from tvm_npu.contract import stream
from tvm_npu.models import GraphBuilder, lstm, mobilenet_v2_shaped, op_zoo, small_cnn
from tvm_npu.models.decoder import gpt2_step, llama_step
from tvm_npu.tools import asm, disasm
from tvm_npu.tools.asm import patch_library
from tvm_npu.tools.disasm import read_library


def _calib(model, n=2):
    shapes = [[d.dim_value for d in t.type.tensor_type.shape.dim] for t in model.graph.input]
    return [[np.random.default_rng(i).standard_normal(s).astype(np.float32) for s in shapes] for i in range(n)]


def _quantized(model):
    mod = tvm_npu.from_onnx(model)
    return tvm_npu.quantize(mod, _calib(model), progress=False)[0]


# The tutorials' and benchmarks' models, small: quickstart's CNN (fp16), MobileNetV2 (tutorial and
# compiler_core / host_speed / sweep benchmarks; int8), the wake-word LSTM (int8 with int16 state),
# the op zoo (fuzz_streams' seeds) on npu-small.
MODELS = {
    "quickstart_cnn_fp16": lambda: (tvm_npu.from_onnx(small_cnn(seed=0, image=16)), "npu-ref"),
    "mobilenet_v2_int8": lambda: (_quantized(mobilenet_v2_shaped(seed=0, size=32, width=0.25, classes=10)), "npu-ref"),
    "lstm_wake_word_int8": lambda: (_quantized(lstm(T=3, B=1, I=8, H=16, seed=3)), "npu-ref"),
    "op_zoo_small": lambda: (tvm_npu.from_onnx(op_zoo(seed=1, size=9)), "npu-small"),
    "gemm_fp16": lambda: (_compiler_core().gemm(m=16, k=64, n=48)[0], "npu-ref"),
    "resnet_block_fp16": lambda: (_compiler_core().resnet_block(c=16, hw=8)[0], "npu-ref"),
}


def _compiler_core():
    """benchmarks/compiler_core.py (its GEMM and ResNet block builders), which is not a package."""
    return load_script("benchmarks/compiler_core.py")


def _hf(arch: str):
    """The LLM tutorial's model: a Hugging Face decoder-with-past export (torch, transformers), tiny."""
    pytest.importorskip("transformers")
    from tvm_npu.models import hf_export

    path = hf_export.export(arch, f"{tempfile.mkdtemp()}/{arch}.onnx", seed=0, layers=1, d_model=64, heads=4, vocab=128)
    return tvm_npu.llm.compile(path, max_context=16, prefill_len=2)


# The LLM tutorial's and benchmarks' decoders (llm_decode, int4_weights), small: one library of prefill and
# decode, the KV cache resident on the NPU (state tensors, pos_mode), decode's weights by reference.
LLMS = {
    "gpt2_fp16": lambda: tvm_npu.llm.compile(gpt2_step, max_context=16, prefill_len=2),
    "llama_int4": lambda: tvm_npu.llm.compile(llama_step, max_context=16, prefill_len=2, weights="int4", group_size=32),
    "hf_gpt2_tutorial": lambda: _hf("gpt2"),
    "hf_llama_tutorial": lambda: _hf("llama"),
}


@pytest.fixture(scope="module", params=sorted(MODELS) + sorted(LLMS))
def library(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("disasm") / f"{request.param}.so"
    if request.param in LLMS:
        LLMS[request.param]().export_library(path)
    else:
        mod, config = MODELS[request.param]()
        tvm_npu.export_library(tvm_npu.build(mod, config=config), path)
    modules = runtime.npu_modules(tvm_npu.load_module(path))
    return path, {str(m["get_symbol"]()): bytes(m["get_stream"]()) for m in modules}


def test_round_trip_is_byte_identical(library):
    path, blobs = library
    assert blobs, "the model has NPU regions"
    text = disasm(path)
    if path.stem == "llama_int4":  # the int4 benchmark's weights: CONV2D's w_dtype int4 | g << 8, g = 32
        assert "w_dtype=int4|0x2000" in text
    assert asm(text, weights_from=path) == blobs
    assert asm(disasm(path, inline_weights=True)) == blobs
    # Patched back into the library unchanged, the file is the same file (regions stored whole, or, with
    # their weights by reference, as their tables).
    assert (
        patch_library(path, asm(text, weights_from=path), path.with_suffix(".same.so")).read_bytes()
        == path.read_bytes()
    )


def test_listing_names_every_command_and_its_layer(library):
    path, blobs = library
    text = disasm(path)
    for symbol, blob in blobs.items():
        s = stream.decode(blob)
        block = text.split(f"region {symbol}\n", 1)[1].split("\nend", 1)[0]
        lines = [ln for ln in block.splitlines() if ln[:1] == " " or ln[:1].isdigit()]
        assert len(lines) == len(s.commands)
        for i, (cmd, line) in enumerate(zip(s.commands, lines)):
            assert line.split(": ", 1)[0].strip() == str(i) and line.split()[1] == cmd.op
            if cmd.op not in ("END", "DMA_LOAD", "DMA_STORE"):  # the source map names each compute command's layer
                assert "; layer " in line, line
                # ... and a model's (not an LLM's, whose metadata keeps the layer names only) pattern
                assert " npu." in line or path.stem in LLMS, line
        # END waits for every engine to drain: it comes after the last command of each engine.
        last = {c.engine: i for i, c in enumerate(s.commands) if c.engine is not None}
        assert lines[-1].endswith("; after " + ", ".join(f"#{i}" for i in sorted(last.values())))
        tensors = [ln for ln in block.splitlines() if ln.startswith(".tensor ")]
        assert [ln.split()[1] for ln in tensors] == [f"role={t.role}" for t in s.tensors]


def test_addresses_are_region_plus_offset(library):
    path, blobs = library
    s = stream.decode(next(iter(blobs.values())))
    load = next(c for c in s.commands if c.op == "DMA_LOAD")
    base, where = (0, "weights") if load.args["ddr_addr"] < len(s.weights) else (len(s.weights), "act")
    text = disasm(path)
    assert f"ddr_addr={where}+{load.args['ddr_addr'] - base:#x} sram_addr=sram+{load.args['sram_addr']:#x}" in text


def test_edited_library_runs_the_edit(tmp_path):
    """A dense layer's `act=none` edited to `act=relu` (then to a clip) in its listing and patched into the
    library: the library then computes relu(x @ W^T + b) (the clip of it), checked against numpy."""
    g = GraphBuilder(seed=0)
    y = g.gemm("input", 16, 8)
    ex = tvm_npu.build(tvm_npu.from_onnx(g.model([1, 16], y, [1, 8])))
    lib = tvm_npu.export_library(ex, tmp_path / "dense.so")
    w, b = (numpy_helper.to_array(t) for t in g.inits)
    text = disasm(lib)
    # The executable in memory lists the same (but for the file it came from).
    in_memory = [ln for ln in text.splitlines()[1:] if not ln.startswith("library ")]
    assert disasm(ex).splitlines()[1:] == in_memory
    assert disasm(relax.VirtualMachine(ex, tvm.cpu())).splitlines()[1:] == in_memory
    assert text.count(" act=none ") == 1
    edited = asm(text.replace(" act=none ", " act=relu "), weights_from=lib)
    out = patch_library(lib, edited, tmp_path / "edited.so")
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)

    def run(path):
        vm = relax.VirtualMachine(tvm_npu.load_module(path), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    f16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    ref = f16(x) @ f16(w).T + f16(b)
    assert (ref < 0).any() and (ref > 0).any()
    np.testing.assert_allclose(run(lib), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(run(out), np.maximum(ref, 0), rtol=2e-3, atol=2e-3)
    assert read_library(out).regions[0][1] == next(iter(edited.values()))
    # fp16 clamps are fp32 numbers in a listing: act=clip to [-0.1, 0.5].
    clip = " act=clip clip_lo=-0.1f clip_hi=0.5f "
    edited = asm(text.replace(" act=none clip_lo=0.0f clip_hi=0.0f ", clip), weights_from=lib)
    assert (ref < -0.1).any() and (ref > 0.5).any()
    np.testing.assert_allclose(run(patch_library(lib, edited, tmp_path / "clip.so")), np.clip(ref, -0.1, 0.5), 0, 2e-3)
