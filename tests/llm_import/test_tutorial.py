"""tutorials/llm_decode.py as a user runs it (--quick): GPT-2 and Llama exports from transformers,
compiled with tvm_npu.llm on the resident KV cache, generating onnxruntime's 32 greedy tokens (issue 20)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_llm_decode_tutorial_generates_onnxruntime_greedy_tokens(tmp_path):
    pytest.importorskip("torch", reason="needs torch to export the decoder (pip install '.[llm]')")
    pytest.importorskip("transformers", reason="needs transformers to build the decoder (pip install '.[llm]')")
    res = subprocess.run(
        [sys.executable, str(ROOT / "tutorials" / "llm_decode.py"), "--quick", "--out", str(tmp_path / "llm")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "llm" / "summary.json").read_text())
    assert set(summary) == {"gpt2", "llama"}
    for arch, s in summary.items():
        assert s["identical"] and s["tokens"] == s["reference"] and len(s["tokens"]) == 32, arch
        assert s["kv_cache"] == "npu", arch
        assert s["profile"]["prefill"]["cycles"] > 0 and s["profile"]["decode"]["cycles"] > 0, arch
        assert s["profile"]["decode"]["tokens"] == 31 and s["profile"]["decode"]["ddr_bytes"] > 0, arch
        assert s["decode_ops"]["npu"] > 0, arch
    assert res.stdout.count("the 32 tokens against onnxruntime's greedy tokens on the export: identical") == 2
    assert res.stdout.count("KV cache: npu") == 2
