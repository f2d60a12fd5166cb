"""The reference NPU's NORM (0x28, format 1.4) from hand-packed streams (docs/npu.md section 6, packed by
tests/npu_stream_pack.py, not by the compiler): bit for bit against the numpy model of the contract
(tests/npu_ref/norm.py) over random shapes, odd row lengths and edge values; the cycle formula; and the
ERR_* code of every bad operand."""

import numpy as np
import pytest

from npu_ref import norm as npu_norm
from npu_stream_pack import DMA0, DMA1, FP16, INT8, NORM, align, bits_equal, command, f32_bits, raises_code, run_row_op
from npu_stream_pack import one_command as pack_one
from tvm_npu.contract import layout

V13, V14 = (1, 3), (1, 4)
NO = 0xFFFFFFFF
KINDS = layout.codes("norm_kind")


def norm(
    dtype=FP16, kind=0, inp=0, in_stride=128, out=2048, out_stride=128, rows=2, row_elems=16, gamma=1024, beta=1152,
    eps=1e-5, wait=None, **quant,
):  # fmt: skip
    return command(
        NORM,
        dict(
            dtype=dtype,
            kind=kind,
            in_addr=inp,
            in_stride=in_stride,
            out_addr=out,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            gamma_addr=gamma,
            beta_addr=beta,
            eps=f32_bits(eps) if isinstance(eps, float) else eps,
            **quant,
        ),
        wait,
    )


def one_command(cmd, version=V14):
    return pack_one(cmd, version)


def test_valid_norm_commands_pass_validation(rt):
    for cmd in (
        norm(),
        norm(gamma=NO, beta=NO),
        norm(beta=NO),
        norm(kind=1, beta=NO),
        norm(kind=1, gamma=NO, beta=NO, eps=0.0),
        norm(row_elems=2048, in_stride=4096, out=16384, out_stride=4096, gamma=8192, beta=NO),
    ):
        rt["validate"](one_command(cmd))


def test_norm_bad_operands_have_codes(rt):
    v = rt["validate"]
    raises_code("ERR_BAD_STREAM", v, one_command(norm(dtype=INT8)))  # int8 without its scales
    # A row longer than max_width (2048 on npu-ref): the vector unit keeps one row's statistics.
    long_row = norm(rows=1, row_elems=2049, in_stride=4224, out=16384, out_stride=4224, gamma=8192, beta=NO)
    assert "max_width" in raises_code("ERR_OP_NOT_SUPPORTED", v, one_command(long_row))
    for bad in (
        norm(dtype=3),
        norm(kind=2),
        norm(rows=0),
        norm(row_elems=0),
        norm(kind=1),  # an rmsnorm with a shift
        norm(eps=-1e-5),
        norm(eps=float("inf")),
        norm(eps=0x7FC00000),  # NaN
        norm(row_elems=128, in_stride=128, out_stride=256, out=4096),  # stride below the 256-byte row
    ):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    for bad in (
        norm(out=0),  # output over the input
        norm(out=1024),  # output over gamma
        norm(out=1152 - 128, gamma=NO),  # output over beta (its row is 64 bytes, padded to 128)
        norm(in_stride=16),  # misaligned stride
        norm(gamma=1000),  # misaligned
        norm(beta=2097152 - 64),  # beyond SRAM
        norm(out=2097152 - 128),
    ):
        raises_code("ERR_INVALID_ADDR", v, one_command(bad))
    assert "1.4" in raises_code("ERR_BAD_STREAM", v, one_command(norm(), version=V13))


def _run(rt, kind, x, gamma, beta, eps, quant=None):
    """x [rows, E] through DMA -> NORM -> DMA; gamma / beta (fp32 or None) from the weight region. `quant`:
    the int8 form's in_zp, in_scale, out_zp, out_scale words (x int8 codes)."""
    rows, e = x.shape
    prm = align(4 * e)
    weights = b""
    g_addr = b_addr = NO
    if gamma is not None:
        g_addr = 0
        weights += gamma.astype("<f4").tobytes().ljust(prm, b"\0")
    if beta is not None:
        b_addr = len(weights)
        weights += beta.astype("<f4").tobytes().ljust(prm, b"\0")
    dtype = FP16 if quant is None else INT8
    return run_row_op(
        rt,
        "n",
        x,
        weights,
        lambda i, o, st: norm(
            dtype, KINDS[kind], i, st, o, st, rows, e, g_addr, b_addr, eps, wait={DMA0: 0, DMA1: 0}, **(quant or {})
        ),
        V14,
        int8=quant is not None,
    )


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("seed", range(6))
def test_norm_is_bit_exact_to_the_contract_over_random_shapes(rt, kind, seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 9))
    e = int(rng.choice([1, 3, 17, 64, 127, 768, 2048]))
    scale = float(rng.choice([1e-3, 1.0, 30.0, 3000.0]))
    x = (rng.standard_normal((rows, e)) * scale + rng.choice([0.0, 5.0, -1000.0])).astype(np.float32)
    gamma = rng.standard_normal(e).astype(np.float32) if seed % 3 != 2 else None
    beta = rng.standard_normal(e).astype(np.float32) if kind == "layernorm" and seed % 2 == 0 else None
    eps = float(rng.choice([1e-5, 1e-6, 0.5]))
    out, rec = _run(rt, kind, x, gamma, beta, eps)
    bits_equal(out, npu_norm.norm(kind, x, gamma, beta, eps))
    # Cycles: op_overhead + ceil(passes * rows * E / (vector_lanes / 2)), npu-ref: 32 + ../32.
    passes = 3 if kind == "layernorm" else 2
    assert rec["opcode"] == "NORM" and rec["end"] - rec["start"] == 32 + -(-passes * rows * e // 32)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_edge_rows(rt, kind):
    """A constant row, a zero row, NaN and inf rows, fp16 extremes and subnormals, a mean far from the
    spread: every row as the contract says (bit-exact; NaN where section 2 says)."""
    e = 33
    x = np.zeros((8, e), np.float32)
    x[0] = 7.0  # constant: var 0, eps keeps it finite (0 / sqrt(eps) = 0)
    x[1] = 0.0  # rmsnorm: 0 / sqrt(eps)
    x[2, 5] = np.nan
    x[3, 0] = np.inf
    x[4] = np.linspace(-65504, 65504, e)
    x[5] = np.linspace(0, 1, e) * 6e-8  # fp16 subnormals
    x[6] = 60000.0 + np.arange(e)  # mean far from the spread (rounded to fp16 steps of 32)
    x[7] = np.linspace(-3, 3, e)
    gamma = np.linspace(0.5, 2.0, e).astype(np.float32)
    beta = np.linspace(-1, 1, e).astype(np.float32) if kind == "layernorm" else None
    out, _ = _run(rt, kind, x, gamma, beta, 1e-5)
    ref = npu_norm.norm(kind, x, gamma, beta, 1e-5)
    bits_equal(out, ref)
    assert np.isnan(out[2]).all()
    if kind == "layernorm":  # inf - inf
        assert np.isnan(out[3]).all()
    else:  # r = inf: inf / inf there, x / inf = 0 elsewhere
        assert np.isnan(out[3, 0]) and (out[3, 1:] == 0).all()
    assert np.isfinite(out[[0, 1, 4, 5, 6, 7]]).all()


def test_norm_with_eps_zero_on_a_constant_row_is_nan(rt):
    x = np.full((1, 16), 3.0, np.float32)
    out, _ = _run(rt, "layernorm", x, None, None, 0.0)
    assert np.isnan(out).all()  # (x - mean) / sqrt(0 + 0) = 0 / 0


def test_norm_model_is_not_the_pairwise_sum():
    """The numpy model sums in element order: np.sum's pairwise order gives other bits on some rows
    (which is why the model must not use it)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((256, 2048)) * 100 + 3).astype(np.float16).astype(np.float32)
    in_order = npu_norm._in_order_sum(x)[:, 0]
    assert (in_order != x.sum(axis=1, dtype=np.float32)).any()


def _variants(x, gamma, beta, eps):
    """Plausible other readings of the contract (fp16 results): a multiply by 1 / r, pairwise sums, the
    one-pass variance E[x^2] - mean^2, a fused multiply-add for * gamma + beta."""
    x = x.astype(np.float16).astype(np.float32)
    n, eps = np.float32(x.shape[-1]), np.float32(eps)
    mean = npu_norm._in_order_sum(x) / n
    d = x - mean
    r = np.sqrt(npu_norm._in_order_sum(d * d) / n + eps)
    pm = x.sum(-1, keepdims=True, dtype=np.float32) / n
    pr = np.sqrt(((x - pm) * (x - pm)).sum(-1, keepdims=True, dtype=np.float32) / n + eps)
    one_pass = np.sqrt(npu_norm._in_order_sum(x * x) / n - mean * mean + eps)
    return {
        "reciprocal": (d * (np.float32(1) / r)) * gamma + beta,
        "pairwise": ((x - pm) / pr) * gamma + beta,
        "one-pass variance": (d / one_pass) * gamma + beta,
        "fused multiply-add": (np.float64(d / r) * gamma + beta).astype(np.float32),
    }


def test_norm_bits_tell_the_stated_order_from_other_readings(rt):
    """64 rows of 2048: the emulator equals the model bit for bit, and each other reading of the text
    differs from the model somewhere on this data (the fp16 rounding hides most fp32 differences; over
    131072 elements some land on a rounding boundary), so the bit-exact tests can fail."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 2048)) * 3 + 0.3).astype(np.float32)
    gamma, beta = (rng.standard_normal(2048).astype(np.float32) for _ in range(2))
    out, _ = _run(rt, "layernorm", x, gamma, beta, 1e-5)
    ref = npu_norm.norm("layernorm", x, gamma, beta, 1e-5)
    bits_equal(out, ref)
    for name, y in _variants(x, gamma, beta, 1e-5).items():
        assert (y.astype(np.float16) != ref).any(), name


# --- int8 (format 1.4): codes dequantized, the fp32 steps, quantized (docs/npu.md section 2) ---


def _quant(s_x, z_x, s_y, z_y) -> dict:
    return dict(in_zp=z_x & NO, in_scale=f32_bits(s_x), out_zp=z_y & NO, out_scale=f32_bits(s_y))


def test_int8_norm_operands(rt):
    v = rt["validate"]
    v(one_command(norm(dtype=INT8, **_quant(0.1, -3, 0.05, 4))))
    for bad in (
        norm(dtype=INT8, **_quant(0.0, 0, 0.05, 0)),  # scales finite and > 0
        norm(dtype=INT8, **_quant(0.1, 0, float("inf"), 0)),
        norm(dtype=INT8, **_quant(0.1, -129, 0.05, 0)),  # zero points within int8
        norm(in_scale=f32_bits(0.1)),  # fp16: the int8 words are 0
    ):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("seed", range(4))
def test_int8_norm_is_bit_exact_to_the_contract(rt, kind, seed):
    rng = np.random.default_rng(100 + seed)
    rows, e = int(rng.integers(1, 9)), int(rng.integers(2, 300))
    q = (
        float(rng.uniform(0.01, 0.2)),
        int(rng.integers(-40, 40)),
        float(rng.uniform(0.006, 0.012)),
        int(rng.integers(-20, 20)),
    )
    x = rng.integers(-128, 128, (rows, e)).astype(np.int8)
    gamma = (rng.standard_normal(e) * 0.5 + 1).astype(np.float32) if seed % 2 == 0 else None
    beta = (rng.standard_normal(e) * 0.2).astype(np.float32) if kind == "layernorm" and seed < 2 else None
    out, rec = _run(rt, kind, x, gamma, beta, 1e-5, quant=_quant(*q))
    np.testing.assert_array_equal(out, npu_norm.norm_int8(kind, x, *q, gamma, beta, 1e-5))
    assert len(np.unique(out)) > 10 and ((out == 127) | (out == -128)).any()  # the range is used and saturates
    # Section 5: 3 (layernorm) or 2 (rmsnorm) steps per element at the int8 rate, vector_lanes (64 on npu-ref).
    steps = (3 if kind == "layernorm" else 2) * rows * e
    assert rec["opcode"] == "NORM" and rec["end"] - rec["start"] == 32 + -(-steps // 64)
