"""LLM.export_library / tvm_npu.llm.load: one library with both entry functions and the metadata; the loaded
LLM gives the same logits, bit for bit; a damaged file or the old tar format is ERR_BAD_ARTIFACT. One step
model at seq_len 1 serving both steps."""

import io
import json
import tarfile

import numpy as np
import pytest
import tvm

import tvm_npu
from llm.reference import BUILDERS, OrtDecoder, assert_logits_close


def test_export_load_round_trip_gives_identical_logits(lm, tmp_path):
    path = lm.export_library(tmp_path / "lm.so")
    assert not tarfile.is_tarfile(path) and path.read_bytes()[:4] == b"\x7fELF"
    lib = tvm_npu.load_module(path)
    vm = tvm.relax.VirtualMachine(lib, tvm.cpu())
    assert json.loads(str(vm["llm_meta"]()))["step"] == lm.meta["step"]
    symbols = {tvm_npu.runtime.profile_of(m)["symbol"].split("_")[0] for m in tvm_npu.runtime.npu_modules(vm)}
    assert symbols == {"prefill", "decode"}  # both steps' regions in the one library
    loaded = tvm_npu.llm.load(path)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])  # 11 tokens: two chunks
    # One sequence after the other: the loaded LLM names the same state space as `lm` (one NPU cache).
    want = [lm.prefill(ids)] + [lm.decode(t) for t in (7, 0, 255)]
    got = [loaded.prefill(ids)] + [loaded.decode(t) for t in (7, 0, 255)]
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert loaded.placements == lm.placements
    assert loaded.profile()["decode"]["cycles"] == lm.profile()["decode"]["cycles"] > 0


def test_two_llms_on_one_cache_refuse_to_decode_on_the_others_rows(lm, tmp_path):
    """The same artifact loaded twice shares the NPU's cache (one state space): after the other's prefill,
    a decode is ERR_LLM_STATE, never a step on the other sequence's rows; a prefill takes the cache back."""
    loaded = tvm_npu.llm.load(lm.export_library(tmp_path / "lm.so"))
    first = lm.prefill(np.array([5, 6, 7]))
    loaded.prefill(np.array([9, 9]))
    with pytest.raises(tvm_npu.NPUError) as err:
        lm.decode(1)
    assert err.value.code == "ERR_LLM_STATE"
    assert np.array_equal(lm.prefill(np.array([5, 6, 7])), first)
    lm.decode(1)


def test_damaged_artifact_is_refused(lm, tmp_path):
    path = lm.export_library(tmp_path / "lm.so")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside a library
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.load(bad)
    assert info.value.code == "ERR_BAD_ARTIFACT"
    (tmp_path / "short.so").write_bytes(path.read_bytes()[:1000])
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.load(tmp_path / "short.so")
    assert info.value.code == "ERR_BAD_ARTIFACT"


def test_one_decode_step_model_serves_both(tmp_path):
    """A single step model at seq_len 1 (here from an ONNX file): prefill runs it once per prompt token."""
    path = tmp_path / "step.onnx"
    builder = BUILDERS["gpt2"]
    import onnx

    onnx.save(builder(seq_len=1, max_context=16), path)
    lm = tvm_npu.llm.compile(str(path))
    assert lm.prefill_len == 1
    ref = OrtDecoder(builder, max_context=16)
    ids = np.array([1, 2, 3, 4])
    want_logits, want_tokens = ref.run(ids, 3)
    assert lm.generate(ids, max_new_tokens=3).tolist() == want_tokens
    assert_logits_close(lm.prefill(ids), want_logits[0])
    loaded = tvm_npu.llm.load(lm.export_library(tmp_path / "one.so"))
    assert np.array_equal(loaded.prefill(ids), lm.prefill(ids))


def test_old_tar_format_is_refused_with_export_again(tmp_path):
    """Format 1 (a tar of prefill.so, decode.so and llm.json) is not read any more: ERR_BAD_ARTIFACT."""
    path = tmp_path / "old.so"
    with tarfile.open(path, "w") as tar:
        data = json.dumps({"format": 1}).encode()
        entry = tarfile.TarInfo("llm.json")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.load(path)
    assert info.value.code == "ERR_BAD_ARTIFACT" and "export it again" in str(info.value)


def test_a_model_library_is_not_an_llm(tmp_path):
    from tvm_npu.models import small_cnn

    path = tvm_npu.export_library(tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed=0))), tmp_path / "cnn.so")
    with pytest.raises(tvm_npu.NPUError) as info:
        tvm_npu.llm.load(path)
    assert info.value.code == "ERR_BAD_ARTIFACT" and "llm_meta" in str(info.value)
