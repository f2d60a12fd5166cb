"""Fixtures of the decoder importer's tests: Hugging Face exports made once per session (torch and
transformers, the optional extra `llm`; the tests skip without them)."""

import pytest


@pytest.fixture(scope="session")
def hf_export(tmp_path_factory):
    """export(arch, attn="eager") -> path of the tiny `arch` decoder-with-past export, made once per
    session."""
    pytest.importorskip("torch", reason="needs torch to export the decoder (pip install '.[llm]')")
    pytest.importorskip("transformers", reason="needs transformers to build the decoder (pip install '.[llm]')")
    from tvm_npu.models import hf_export as export_hf

    folder = tmp_path_factory.mktemp("hf_exports")
    made = {}

    def get(arch: str, attn: str = "eager") -> str:
        if (arch, attn) not in made:
            made[arch, attn] = export_hf.export(arch, str(folder / f"{arch}_{attn}.onnx"), attn=attn)
        return made[arch, attn]

    return get


@pytest.fixture(scope="session")
def hf_llm(hf_export):
    """llm(arch, attn="eager", kv_placement="auto") -> `tvm_npu.llm.compile` of that export (max_context 32,
    prefill bucket 8, the defaults otherwise: the resident cache, in SRAM for these models under "auto"),
    compiled once per session, its cache reset."""
    import tvm_npu

    made = {}

    def get(arch: str, attn: str = "eager", kv_placement: str = "auto"):
        key = arch, attn, kv_placement
        if key not in made:
            made[key] = tvm_npu.llm.compile(
                hf_export(arch, attn), max_context=32, prefill_len=8, kv_placement=kv_placement
            )
        made[key].reset()
        return made[key]

    return get
