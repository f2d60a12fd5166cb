"""The reference NPU's int8 MATMUL (0x30, format 1.4: two int8 activations, per-tensor zero points, one
requantization scale), from hand-packed streams (tests/npu_stream_pack.py, not the compiler): bit-exact
against the numpy model of docs/npu.md section 2 (npu_ref.int8.matmul) over random shapes, zero points and
scales, grouped and transposed B; its cycles (rate_div 1, section 5); the code of every bad int8 operand."""

import numpy as np
import pytest
from test_reference_npu_matmul import _run as run_matmul
from test_reference_npu_matmul import matmul, one_command

from npu_ref import int8
from npu_stream_pack import INT8, raises_code
from tvm_npu.contract import spec

V14 = (1, 4)
F32 = np.float32


def quant_words(a_zp=0, b_zp=0, out_zp=0, scale=0.01) -> dict:
    """The int8 MATMUL's operand words: zero points two's complement, `scale` as fp32 bits."""
    bits = int(np.array(scale, F32).view(np.uint32))
    return dict(a_zp=a_zp & 0xFFFFFFFF, b_zp=b_zp & 0xFFFFFFFF, out_zp=out_zp & 0xFFFFFFFF, scale=bits)


def qmatmul(dtype=INT8, a_zp=0, b_zp=0, out_zp=0, scale=0.01, **kw):
    """An int8 MATMUL: test_reference_npu_matmul.matmul's operands and defaults, with its requantization."""
    return matmul(dtype=dtype, **kw, **quant_words(a_zp, b_zp, out_zp, scale))


def test_int8_matmul_operands_follow_the_int8_b_operands():
    """The operand order of docs/npu.md section 6: ..., pos_mode, b_dtype, b_scale_addr (the int8 KV cache's
    B), a_zp, b_zp, out_zp, scale (words 20-23)."""
    ops = next(o for o in spec.OPCODES if o["name"] == "MATMUL")["operands"]
    assert ops[16:] == ["pos_mode", "b_dtype", "b_scale_addr", "a_zp", "b_zp", "out_zp", "scale"]


# One row of A and one of B ([n, k], transposed) of up to 32768 bytes each: a long k in a small SRAM footprint.
BIG_K = dict(m=1, n=1, batch=1, b_transposed=1, a_stride=32768, b=32768, b_stride=32768, out=65536)


def test_valid_int8_matmul_commands_pass_validation(rt):
    for cmd in (
        qmatmul(),
        qmatmul(a_zp=-128, b_zp=127, out_zp=-128, scale=3.0e-5),
        qmatmul(b_transposed=1, k=64, n=16, a_stride=128, b_stride=128),
        qmatmul(k=32767, a_zp=-128, b_zp=-128, **BIG_K),  # the largest k at the worst zero points
    ):
        rt["validate"](one_command(cmd))


@pytest.mark.parametrize(
    "cmd",
    [
        qmatmul(a_zp=128),  # a zero point outside -128..127
        qmatmul(b_zp=-129),
        qmatmul(out_zp=200),
        qmatmul(scale=0.0),  # S must be finite and > 0
        qmatmul(scale=-1.0),
        qmatmul(scale=np.inf),
        qmatmul(scale=np.nan),
        qmatmul(dtype=1, a_zp=0, b_zp=0, out_zp=3, scale=0.0),  # fp16: the int8 words must be 0
        qmatmul(dtype=1, scale=1.0),
    ],
)
def test_bad_int8_matmul_operands_are_bad_stream(rt, cmd):
    raises_code("ERR_BAD_STREAM", rt["validate"], one_command(cmd))


def test_int8_matmul_k_that_could_wrap_is_not_supported(rt):
    """k * (128 + |a_zp|) * (128 + |b_zp|) must stay below 2^31 (section 2): 32768 * 256 * 256 = 2^31."""
    msg = raises_code(
        "ERR_OP_NOT_SUPPORTED", rt["validate"], one_command(qmatmul(k=32768, a_zp=-128, b_zp=-128, **BIG_K))
    )
    assert "int32" in msg
    rt["validate"](one_command(qmatmul(k=32768, a_zp=0, b_zp=-128, **BIG_K)))  # 32768 * 128 * 256 = 2^30


def _run(rt, a, b, b_group, b_transposed, a_zp, b_zp, out_zp, scale):
    """int8 A, B loaded from DDR, one int8 MATMUL over every batch, the result stored: (output, record)."""
    return run_matmul(rt, a, b, b_group, b_transposed, INT8, **quant_words(a_zp, b_zp, out_zp, scale))


@pytest.mark.parametrize("seed", range(12))
def test_int8_matmul_is_bit_exact_to_the_numpy_model(rt, seed):
    rng = np.random.default_rng(seed)
    group = (1, 2, 6)[seed % 3]
    b_batches = int(rng.integers(1, 3))
    batch = group * b_batches
    m, k, n = (int(v) for v in rng.integers(1, 90, 3))  # odd sizes, beyond one 32-wide pass
    transposed = bool(seed % 2)
    a_zp, b_zp, out_zp = (int(v) for v in rng.integers(-128, 128, 3))
    b_shape = (b_batches, n, k) if transposed else (b_batches, k, n)
    # Codes spread around their zero points, as a calibrated activation's are, and clipped to int8.
    a = np.clip(a_zp + rng.integers(-90, 90, (batch, m, k)), -128, 127).astype(np.int8)
    b = np.clip(b_zp + rng.integers(-90, 90, b_shape), -128, 127).astype(np.int8)
    # A scale that puts the outputs across the whole int8 range (some saturate), from real-looking scales.
    s_a, s_b = F32(rng.uniform(0.005, 0.05)), F32(rng.uniform(0.005, 0.05))
    s_y = F32(s_a * s_b * np.sqrt(k) * 2500 / 128)
    scale = int8.conv_scale(s_a, s_b, s_y)
    out, rec = _run(rt, a, b, group, transposed, a_zp, b_zp, out_zp, scale)
    want = int8.matmul(a, b, a_zp, b_zp, scale, out_zp, group, transposed)
    np.testing.assert_array_equal(out, want)
    assert 0 < np.count_nonzero(np.abs(want.astype(int)) == 127 + (want < 0)) < want.size or want.size < 8
    # Section 5: op_overhead + batch * m * ceil(k / mac_rows) * ceil(n / mac_cols) passes, rate_div 1 (int8).
    passes = batch * m * -(-k // 32) * -(-n // 32)
    assert rec["opcode"] == "MATMUL" and rec["end"] - rec["start"] == 32 + passes
    assert rec["macs"] == batch * m * n * k


def test_int8_matmul_rounds_ties_to_even_and_saturates(rt):
    """acc * S landing on .5 rounds to the even integer; sums beyond the range clamp to -128 / 127."""
    a = np.array([[[1], [3], [5], [7], [127], [-128]]], np.int8)  # [1, 6, 1]
    b = np.array([[[1, -1]]], np.int8)  # [1, 1, 2]
    out, _ = _run(rt, a, b, 1, False, 0, 0, 0, 0.5)  # 0.5, 1.5, 2.5, 3.5 -> 0, 2, 2, 4
    np.testing.assert_array_equal(out[0, :4, 0], [0, 2, 2, 4])
    np.testing.assert_array_equal(out[0, :4, 1], [0, -2, -2, -4])
    out, _ = _run(rt, a, b, 1, False, 0, 0, 0, 4.0)
    np.testing.assert_array_equal(out[0, 4:], [[127, -128], [-128, 127]])
    np.testing.assert_array_equal(out, int8.matmul(a, b, 0, 0, F32(4.0), 0))
