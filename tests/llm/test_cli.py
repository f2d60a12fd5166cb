"""`tvm-npu generate`: the tokens onnxruntime's greedy loop gives, a progress bar, the tokens/s lines; a bad
prompt is one coded line and exit code 2."""

import re

import onnx

from llm.reference import OrtDecoder
from tvm_npu.models.decoder import gpt2_step
from tvm_npu.tools.cli import main


def _tokens(out: str) -> list[int]:
    return [int(t) for t in re.search(r"new tokens: ([\d,]+)", out).group(1).split(",")]


def test_generate_with_a_builder_prints_tokens_and_tokens_per_s(capsys):
    argv = ["generate", "gpt2", "--prompt-ids", "1,2,3", "--max-new-tokens", "5", "--max-context", "16"]
    assert main([*argv, "--prefill-len", "2"]) == 0
    out, err = capsys.readouterr()
    _, want = OrtDecoder(gpt2_step, max_context=16).run([1, 2, 3], 5)
    assert _tokens(out) == want
    assert "generate: 100%" in err and "5/5" in err  # tqdm's bar
    for step, tokens in (("prefill", 3), ("decode", 4)):
        line = re.search(
            rf"^{step}: {tokens} tokens, (\d+) NPU cycles.*cycle model ([\d.]+) tokens/s at 1000 MHz.*"
            r"host wall ([\d.]+) tokens/s",
            out,
            re.M,
        )
        assert line, out
        cycles, npu_tps = int(line.group(1)), float(line.group(2))
        assert abs(npu_tps - tokens * 1e9 / cycles) <= 0.05 + 1e-6 * npu_tps


def test_generate_with_an_onnx_step_model_and_a_bad_token(tmp_path, capsys):
    path = tmp_path / "step.onnx"
    onnx.save(gpt2_step(seq_len=1, max_context=8), path)
    assert main(["generate", str(path), "--prompt-ids", "4,5", "--max-new-tokens", "3"]) == 0
    out, _ = capsys.readouterr()
    _, want = OrtDecoder(gpt2_step, max_context=8).run([4, 5], 3)
    assert _tokens(out) == want
    assert main(["generate", str(path), "--prompt-ids", "4,999", "--max-new-tokens", "3"]) == 2
    assert "ERR_LLM_TOKEN" in capsys.readouterr().err
    assert main(["generate", str(path), "--prompt-ids", "4,x"]) == 2
    assert main(["generate", str(path), "--prompt-ids", "1", "--max-new-tokens", "9"]) == 2  # 1 + 9 - 1 > 8
    assert "ERR_LLM_CONTEXT" in capsys.readouterr().err


def test_generate_from_an_exported_library(tmp_path, capsys):
    """MODEL may be the one library of lm.export_library; the old tar format is ERR_BAD_ARTIFACT."""
    import tarfile

    import tvm_npu

    lib = tvm_npu.llm.compile(gpt2_step, max_context=16, prefill_len=2).export_library(tmp_path / "lm.so")
    assert main(["generate", str(lib), "--prompt-ids", "1,2,3", "--max-new-tokens", "5"]) == 0
    _, want = OrtDecoder(gpt2_step, max_context=16).run([1, 2, 3], 5)
    assert _tokens(capsys.readouterr().out) == want
    old = tmp_path / "old.so"
    with tarfile.open(old, "w") as tar:
        tar.add(lib, arcname="decode.so")
    assert main(["generate", str(old), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "ERR_BAD_ARTIFACT" in err and "export it again" in err


def test_generate_passes_the_weight_and_cache_options(capsys):
    """--weights int8 --kv-placement ddr: the tokens stay onnxruntime's greedy ones on this model; forcing
    a cache that cannot fit into SRAM is the compile-time ERR_SRAM_OVERFLOW, exit code 2."""
    argv = ["generate", "gpt2", "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--max-context", "16"]
    argv += ["--prefill-len", "2", "--weights", "int8", "--kv-placement", "ddr"]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    _, want = OrtDecoder(gpt2_step, max_context=16).run([1, 2, 3], 4)
    assert _tokens(out) == want
    assert "KV cache: " in out and " bytes read by the decode steps, in DDR" in out
    assert main([*argv[:-1], "sram", "--max-context", "100000"]) == 2  # a cache that cannot fit SRAM
    assert "ERR_SRAM_OVERFLOW" in capsys.readouterr().err
