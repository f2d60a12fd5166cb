"""A Hugging Face checkpoint folder as users have one (save_pretrained + a tokenizer.json), made once per
session: a tiny seeded Llama (tvm_npu.models.hf_export's) and a byte-level BPE tokenizer trained on a few
lines (torch, transformers and tokenizers: the `llm` extra; the tests skip without them)."""

import pytest

TEXT = (
    "The quick brown fox jumps over the lazy dog. A list is a mutable sequence; a tuple is an immutable one. "
    "Functions are defined with def, classes with class, and modules are imported with import. "
) * 4


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory):
    pytest.importorskip("torch", reason="needs torch (pip install '.[llm]')")
    pytest.importorskip("transformers", reason="needs transformers (pip install '.[llm]')")
    tokenizers = pytest.importorskip("tokenizers", reason="needs tokenizers")
    from tvm_npu.models import hf_export

    folder = tmp_path_factory.mktemp("hf_folder") / "tiny-llama"
    model = hf_export.build_model("llama", seed=0, attn="eager")  # vocab 256
    model.save_pretrained(folder)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=256, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([TEXT], trainer=trainer)
    assert tok.get_vocab_size() <= 256
    tok.save(str(folder / "tokenizer.json"))
    return str(folder)


@pytest.fixture(scope="session")
def folder_llm(hf_folder):
    """`tvm_npu.llm.compile` of the folder itself (max_context 32, bucket 8), compiled once."""
    import tvm_npu.llm

    return tvm_npu.llm.compile(hf_folder, max_context=32, prefill_len=8)
