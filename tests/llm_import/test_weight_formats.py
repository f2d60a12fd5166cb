"""Never lose a format silently (issue 31): a Hugging Face export quantized by onnxruntime's own
MatMulNBitsQuantizer (4 bits, block 32; symmetric or not; QOperator -> com.microsoft MatMulNBits, QDQ ->
int4 / uint4 DequantizeLinear with block_size 32 on axis 0 before a plain MatMul), compiled with
`tvm_npu.llm.compile` under every `weights`, keeps its own codes: along onnxruntime's greedy path on the
same file, 16 of 16 tokens equal and every logits vector within 3e-2 x max(1, max |ref|);
`lm.meta["weight_formats"]` says so for every dense layer, and the int4 build's decode reads at most 0.6x
the DDR bytes of the float model's weights="int8" build.

What the quantizer does to the tiny exports: every MatMul with a constant weight (Llama: q, k, v, o,
gate, up, down of each layer and the LM head, 15) becomes int4; GPT-2's Conv1D layers export as Gemm,
which it leaves float, so only GPT-2's LM head is int4. Its QDQ form needs opset 21 (int4 tensors): the
opset 17 export is converted first (onnx.version_converter), as a user would. onnxruntime rewrites QDQ
DequantizeLinear + MatMul into MatMulNBits with int8 activations at its default level
(`session.qdq_matmulnbits_accuracy_level` 4): the reference runs at level 1 (float), the model's meaning.
"""

import warnings

import numpy as np
import onnxruntime as ort
import pytest

import tvm_npu
from llm_import.ort_reference import quantize_nbits as _quantize
from llm_import.test_step_model import PROMPT, _kv, _Reference
from tvm_npu.frontend import to_step_model

TOKENS = 16
LLAMA_LAYERS = 15  # 7 a layer x 2 + the LM head


class _Exact(_Reference):
    """onnxruntime on the quantized export, QDQ weights dequantized in float (not int8 activations)."""

    def __init__(self, path):
        super().__init__(path, *_kv(to_step_model(path, 32, 1)))
        so = ort.SessionOptions()
        so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
        self.sess = ort.InferenceSession(path, so)


@pytest.fixture(scope="module")
def quantized(hf_export, tmp_path_factory):
    """quantized(arch, symmetric, qdq, block=32) -> path of the export quantized so, made once."""
    folder, made = tmp_path_factory.mktemp("q4"), {}

    def get(arch: str, symmetric: bool, qdq: bool, block: int = 32) -> str:
        key = arch, symmetric, qdq, block
        if key not in made:
            name = f"{arch}-{'sym' if symmetric else 'asym'}-{'qdq' if qdq else 'qop'}-g{block}.onnx"
            made[key] = _quantize(hf_export(arch), str(folder / name), symmetric, qdq, block)
        return made[key]

    return get


def _walk(lm, path) -> int:
    """Prefill then decodes along onnxruntime's greedy path on `path`; checks every logits vector and
    returns how many of the TOKENS greedy tokens are equal."""
    ref = _Exact(path)
    logits, want = lm.prefill(np.array(PROMPT, np.int64)), ref(np.array([PROMPT], np.int64))[0][0, -1]
    same = 0
    for i in range(TOKENS):
        bound = 3e-2 * max(1.0, float(np.abs(want).max()))
        assert float(np.abs(logits - want).max()) <= bound, (i, float(np.abs(logits - want).max()), bound)
        same += int(logits.argmax() == want.argmax())
        token = int(want.argmax())
        if i + 1 < TOKENS:
            logits, want = lm.decode(token), ref(np.array([[token]], np.int64))[0][0, -1]
    return same


def _compile(path, weights):
    return tvm_npu.llm.compile(path, max_context=32, prefill_len=8, weights=weights)


@pytest.mark.parametrize(
    "symmetric, qdq, weights",
    [
        (True, False, "int4"),  # was expanded to fp16 (negative scales): decode DDR bytes 2.07x int8's
        (True, True, "fp16"),
        (True, True, "int8"),
        (True, True, "int4"),  # was re-quantized with RTN g128: logits rel err 0.14
        (False, False, "int8"),
        (False, True, "int4"),
    ],
)
def test_llama_keeps_its_int4_codes_with_any_weights(quantized, symmetric, qdq, weights):
    path = quantized("llama", symmetric, qdq)
    lm = _compile(path, weights)
    source = "DequantizeLinear" if qdq else "MatMulNBits"
    want = f"int4 g32 {'sym' if symmetric else 'asym'}, from {source}"
    formats = lm.meta["weight_formats"]
    assert list(formats.values()) == [want] * LLAMA_LAYERS, formats
    assert all(r.weight_formats == formats for r in lm.reports.values())
    assert all(r.kv_cache["resident"] for r in lm.reports.values())  # MatMulNBits' types reach the Casts
    assert _walk(lm, path) == TOKENS


def test_gpt2_lm_head_keeps_its_codes_and_the_gemms_are_quantized(quantized):
    """GPT-2's Gemm layers are float in the quantized file: weights="int8" quantizes them (and only them)."""
    path = quantized("gpt2", False, False)
    lm = _compile(path, "int8")
    formats = list(lm.meta["weight_formats"].values())
    assert formats.count("int4 g32 asym, from MatMulNBits") == 1, formats
    assert formats.count("int8 per-column, quantized by tvm_npu") == len(formats) - 1 >= 8, formats
    report = lm.reports["decode"]
    assert report.to_dict()["weight_formats"] == lm.meta["weight_formats"]
    assert "1 int4 g32 asym" in report.summary() and "int8 per-column" in report.summary()
    assert _walk(lm, path) == TOKENS


def test_a_block_the_npu_does_not_take_is_a_warning_naming_the_bytes(quantized):
    """Block 16: CONV2D's int4 groups are 32, 64 or 128, so each weight is expanded to fp16 (still exact:
    the same logits), and the build says so, with the bytes."""
    path = quantized("llama", True, False, block=16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = _compile(path, "fp16")
    said = [str(w.message) for w in caught if "expanded to fp16" in str(w.message)]
    q_proj = 2 * 64 * 64 - (64 * 64 // 2 + 64 // 16 * 64 * 2)  # fp16 - (codes + fp16 scales), no zero points
    assert any("(K 64, N 64, block 16)" in s and f"+{q_proj} bytes" in s for s in said), said
    assert all("is not split into groups of 32, 64 or 128" in s for s in said), said
    formats = list(lm.meta["weight_formats"].values())
    assert all(f.startswith("fp16 (expanded from int4 g16 sym, from MatMulNBits") for f in formats), formats
    assert f"+{q_proj} bytes" in lm.meta["weight_formats"]["model_model_layers_0_self_attn_q_proj_MatMul_Q4"]
    assert _walk(lm, path) == TOKENS


@pytest.fixture(scope="module")
def wide_llama(tmp_path_factory):
    """A 128-wide Llama (2 layers, vocab 256): at 64 wide the activations' DDR bytes (5248 a decode step,
    the same in every build) are 8% of the int8 build's, which alone puts the int4 builds at 0.6005x."""
    pytest.importorskip("torch", reason="needs torch to export the decoder (pip install '.[llm]')")
    from tvm_npu.models import hf_export

    path = str(tmp_path_factory.mktemp("wide") / "llama128.onnx")
    return hf_export.export("llama", path, d_model=128)


@pytest.mark.parametrize("symmetric, qdq", [(True, False), (False, True)])
def test_int4_decode_reads_at_most_0p6_of_the_int8_build(wide_llama, tmp_path, symmetric, qdq):
    path = _quantize(wide_llama, str(tmp_path / "q4.onnx"), symmetric, qdq)
    lm4, lm8 = _compile(path, "int4"), _compile(wide_llama, "int8")
    for lm in (lm4, lm8):
        lm.generate(np.array(PROMPT, np.int64), 4)
    b4, b8 = (lm.profile()["decode"]["ddr_bytes"] / lm.profile()["decode"]["tokens"] for lm in (lm4, lm8))
    print(f"decode DDR bytes a token: int4 {b4:.0f}, int8 {b8:.0f}: {b4 / b8:.3f}x")
    assert b4 <= 0.6 * b8, (b4, b8, b4 / b8)


def test_negative_scales_fold_into_the_codes_exactly():
    """onnxruntime's symmetric form (uint4 codes, zero point 8, signed scales), and a zero scale: the
    NPU's layout (every scale > 0) stands for the same weights, element by element."""
    from tvm_npu.ir.group_quant import npu_group_layout

    rng = np.random.default_rng(0)
    k, n, g = 64, 8, 32
    codes = rng.integers(0, 16, (k, n))
    scale_groups = rng.choice([-1, 1], (k // g, n)) * rng.uniform(0.01, 0.1, (k // g, n))
    scale_groups[1, 3] = 0.0
    scale_groups = scale_groups.astype(np.float16).astype(np.float32)
    scale, zero = np.repeat(scale_groups, g, axis=0), np.full((k, n), 8.0)
    layout = npu_group_layout(codes, zero, scale, [])
    assert isinstance(layout, dict) and layout["group"] == g and layout["zeros"] is not None, layout
    q = layout["codes"][:, 0, 0, :].astype(np.float64)  # [N, K]
    s = np.repeat(layout["scales"].astype(np.float64), g, axis=0).T  # [N, K]
    z = np.repeat(layout["zeros"].astype(np.float64), g, axis=0).T
    assert (layout["scales"] > 0).all() and q.min() >= 0 and q.max() <= 15
    np.testing.assert_array_equal((q - z) * s, ((codes - zero) * scale).T)
