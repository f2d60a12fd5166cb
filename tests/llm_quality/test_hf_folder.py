"""A Hugging Face checkpoint folder as the input of tvm_npu.llm.compile and `tvm-npu generate / eval`:
the greedy tokens of transformers' own generate on the same folder, text in and text out through the
folder's tokenizer.json, and coded errors for folders that are not models."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tvm_npu.llm
from tvm_npu.contract.errors import NPUError

PROMPT = [3, 17, 200, 45, 9]


def test_folder_compiles_resident_and_generates_transformers_greedy_tokens(hf_folder, folder_llm):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(hf_folder, dtype=torch.float32).eval()
    with torch.no_grad():
        want = model.generate(
            torch.tensor([PROMPT]), max_new_tokens=16, do_sample=False, attention_mask=torch.ones(1, len(PROMPT))
        )[0, len(PROMPT) :].tolist()
    assert folder_llm.resident
    folder_llm.reset()
    assert folder_llm.generate(np.array(PROMPT, np.int64), max_new_tokens=16).tolist() == want


def test_a_folder_without_weights_is_coded(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(NPUError, match="not a model folder") as err:
        tvm_npu.llm.compile(str(tmp_path), max_context=32)
    assert err.value.code == "ERR_INVALID_MODEL"


def test_a_folder_transformers_cannot_load_is_coded(tmp_path):
    # without transformers the folder is refused for that reason (the test after this one)
    pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
    (tmp_path / "config.json").write_text('{"model_type": "no-such-family"}')
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(NPUError, match="transformers cannot load") as err:
        tvm_npu.llm.compile(str(tmp_path), max_context=32)
    assert err.value.code == "ERR_INVALID_MODEL"


def test_a_folder_without_the_llm_extra_says_how_to_get_it(tmp_path, monkeypatch):
    """Without torch / transformers a checkpoint folder is refused with the extra to install, whatever
    is in it (here: transformers' import made to fail, as on a machine without the extra)."""
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(NPUError, match=r"needs torch and transformers .*pip install 'tvm_npu\[llm\]'") as err:
        tvm_npu.llm.compile(str(tmp_path), max_context=32)
    assert err.value.code == "ERR_INVALID_CONFIG"


def _cli(*args, timeout=600):
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error")
    cmd = [sys.executable, "-m", "tvm_npu.tools.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def test_generate_takes_text_and_prints_text(hf_folder, folder_llm):
    """`tvm-npu generate FOLDER --prompt TEXT`: the tokens are the API's greedy tokens for the tokenized
    prompt, and the text printed is the tokenizer's decoding of prompt + new tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(hf_folder, "tokenizer.json"))
    prompt = "The quick brown fox"
    ids = tok.encode(prompt).ids
    folder_llm.reset()
    want = folder_llm.generate(np.array(ids, np.int64), max_new_tokens=8).tolist()
    run = _cli("generate", hf_folder, "--prompt", prompt, "--max-new-tokens", "8", "--max-context", "32",
               "--prefill-len", "8")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"new tokens: {','.join(map(str, want))}" in run.stdout
    assert tok.decode(ids + want) in run.stdout


def test_eval_prints_perplexity_and_refuses_an_empty_text(hf_folder, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("A list is a mutable sequence. " * 6)
    run = _cli("eval", hf_folder, "--text", str(text), "--max-context", "32", "--prefill-len", "8")
    assert run.returncode == 0, run.stderr
    assert "perplexity" in run.stdout and "top-1 agreement" in run.stdout
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    run = _cli("eval", hf_folder, "--text", str(empty), "--max-context", "32")
    assert run.returncode == 2 and "ERR_INVALID_CONFIG" in run.stderr and "empty" in run.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--max-tokens", "-3"], "--max-tokens -3: give at least 2"),  # would slice from the end
        (["--max-tokens", "1"], "--max-tokens 1: give at least 2"),
        (["--stride", "0"], "stride=0: use an integer from 1 to max_context (32)"),
        (["--stride", "33"], "stride=33: use an integer from 1 to max_context (32)"),
    ],
)
def test_eval_refuses_bad_windows_before_it_compiles(hf_folder, tmp_path, capsys, monkeypatch, args, says):
    """Arguments `tvm-npu eval` can check up front are refused before the model is compiled (a compile
    that would be thrown away): llm.compile is replaced by a function that fails the test if called."""
    from tvm_npu.tools.cli import main

    def no_compile(*_a, **_k):
        raise AssertionError("compiled before refusing the arguments")

    monkeypatch.setattr(tvm_npu.llm, "compile", no_compile)
    text = tmp_path / "t.txt"
    text.write_text("A list is a mutable sequence. " * 6)
    assert main(["eval", hf_folder, "--text", str(text), "--max-context", "32", *args]) == 2
    err = capsys.readouterr().err
    assert "ERR_INVALID_CONFIG" in err and says in err
    assert main(["eval", hf_folder, "--text", str(tmp_path), "--max-context", "32"]) == 2
    assert "is a folder, not a text file" in capsys.readouterr().err


def test_generate_refusing_a_too_long_request_prints_no_half_line(hf_folder, capsys):
    """A request the cache cannot hold is refused before any text is streamed: stdout does not carry the
    prompt with the error glued to it; max_new_tokens 0 prints the prompt alone and says no decode ran."""
    from tvm_npu.tools.cli import main

    argv = ["generate", hf_folder, "--prompt", "The quick brown fox", "--max-context", "32", "--prefill-len", "8"]
    assert main([*argv, "--max-new-tokens", "100"]) == 2
    out, err = capsys.readouterr()
    assert "ERR_LLM_CONTEXT" in err and "The quick" not in out
    assert main([*argv, "--max-new-tokens", "0"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[0] == "The quick brown fox" and "(no decode step ran)" in out
