"""The reference NPU's ROPE (0x2C, format 1.4) from hand-packed streams (docs/npu.md section 6, packed by
tests/npu_stream_pack.py, not by the compiler): bit for bit against the numpy model of the contract
(tests/npu_ref/rope.py) over random shapes (odd row counts, tables shared by several heads, a table row
offset), edge values (inf, NaN, subnormals, fp16 extremes); the cycle formula; and the ERR_* code of every
bad operand."""

import numpy as np
import pytest

from npu_ref import rope as npu_rope
from npu_stream_pack import DMA0, DMA1, FP16, INT8, align, bits_equal, command, raises_code, run_row_op
from npu_stream_pack import one_command as pack_one
from tvm_npu.contract import layout

ROPE = layout.OPCODES["ROPE"]
V13, V14 = (1, 3), (1, 4)


def rope(
    dtype=FP16, inp=0, in_stride=128, out=2048, out_stride=128, rows=3, row_elems=16, cos=1024, sin=1536,
    cs_stride=128, cs_rows=2, cs_row0=0, wait=None,
):  # fmt: skip
    return command(
        ROPE,
        dict(
            dtype=dtype,
            in_addr=inp,
            in_stride=in_stride,
            out_addr=out,
            out_stride=out_stride,
            rows=rows,
            row_elems=row_elems,
            cos_addr=cos,
            sin_addr=sin,
            cs_stride=cs_stride,
            cs_rows=cs_rows,
            cs_row0=cs_row0,
        ),
        wait,
    )


def one_command(cmd, version=V14):
    return pack_one(cmd, version)


def test_valid_rope_commands_pass_validation(rt):
    for cmd in (
        rope(),
        rope(rows=1, row_elems=2, cs_rows=1),
        rope(cos=0, sin=0),  # the input and both tables may alias: all are only read
        rope(cs_row0=1),
        rope(row_elems=4096, in_stride=8192, out=24576, out_stride=8192, cos=49152, sin=65536, cs_stride=8192),
    ):
        rt["validate"](one_command(cmd))


def test_rope_bad_operands_have_codes(rt):
    v = rt["validate"]
    raises_code("ERR_OP_NOT_SUPPORTED", v, one_command(rope(dtype=INT8)))
    for bad in (
        rope(dtype=3),
        rope(rows=0),
        rope(row_elems=0),
        rope(cs_rows=0),
        rope(row_elems=15),  # odd: no rotate-half pairing
        rope(cs_row0=2),  # not below cs_rows
        rope(row_elems=128, in_stride=128, out_stride=256, out=4096),  # stride below the 256-byte row
        rope(row_elems=128, in_stride=256, out_stride=256, out=4096, cos=8192, sin=12288),  # tables' stride 128
    ):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    for bad in (
        rope(out=0),  # output over the input
        rope(out=1024),  # output over cos
        rope(out=1536 + 128),  # output over sin's second row
        rope(in_stride=144),  # misaligned stride
        rope(cos=1000),  # misaligned
        rope(sin=2097152 - 128),  # sin's second row beyond SRAM
        rope(out=2097152 - 256),
    ):
        raises_code("ERR_INVALID_ADDR", v, one_command(bad))
    assert "1.4" in raises_code("ERR_BAD_STREAM", v, one_command(rope(), version=V13))


def _run(rt, x, cos, sin, cs_row0=0):
    """x [rows, D] through DMA -> ROPE -> DMA; the fp16 cos / sin tables [cs_rows, D] from the weight region."""
    d, cs_rows = x.shape[1], cos.shape[0]
    stride = align(2 * d)
    table = cs_rows * stride
    weights = b"".join(
        r.astype("<f2").tobytes().ljust(stride, b"\0") for t in (cos, sin) for r in np.asarray(t, np.float32)
    )
    return run_row_op(
        rt,
        "r",
        x,
        weights,
        lambda i, o, st: rope(FP16, i, st, o, st, x.shape[0], d, 0, table, st, cs_rows, cs_row0, {DMA0: 0, DMA1: 0}),
        V14,
    )


def _tables(s, d, base=10000.0):
    """Llama's cos / sin rows for positions 0..s-1 (the rotate-half layout: the angles twice)."""
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    ang = np.arange(s)[:, None] * inv[None, :]
    emb = np.concatenate([ang, ang], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_rope_is_bit_exact_to_the_contract_over_random_shapes(rt, seed):
    rng = np.random.default_rng(seed)
    d = int(rng.choice([2, 6, 16, 64, 128, 130]))
    s = int(rng.integers(1, 12))
    heads = int(rng.integers(1, 6))
    rows = heads * s - int(rng.integers(0, s))  # odd and partial counts: a tile need not hold whole heads
    row0 = int(rng.integers(0, s))
    scale = float(rng.choice([1e-3, 1.0, 30.0, 3000.0]))
    x = (rng.standard_normal((rows, d)) * scale).astype(np.float32)
    cos, sin = _tables(s, d) if seed % 2 == 0 else (rng.uniform(-1, 1, (2, s, d)).astype(np.float32))
    out, rec = _run(rt, x, cos, sin, row0)
    bits_equal(out, npu_rope.rope(x, cos, sin, row0))
    # Cycles: op_overhead + ceil(2 * rows * D / (vector_lanes / 2)), npu-ref: 32 + ceil(2 * rows * D / 32).
    assert rec["opcode"] == "ROPE" and rec["end"] - rec["start"] == 32 + -(-2 * rows * d // 32)


def test_rope_edge_values(rt):
    """inf, NaN, fp16 extremes and subnormals in x and in the tables: every element as IEEE says (bit-exact;
    inf * 0 and inf - inf are NaN, a sum beyond 65504 is inf, subnormal products are exact in fp32)."""
    x = np.array(
        [
            [np.inf, 1, 2, 3, 0, 1, 2, 3],
            [np.nan, 1, 2, 3, 4, 5, 6, 7],
            [65504, -65504, 65504, 1, 65504, 65504, -65504, 1],
            [6e-8, -6e-8, 1e-5, 3e-5, 6e-8, 6e-8, -1e-7, 2e-7],
            [-0.0, 0.0, -0.0, 0.0, 0.0, -0.0, -0.0, 0.0],
            [1, 2, 3, 4, 5, 6, 7, 8],
            [np.inf, 0, 0, 0, np.inf, 0, 0, 0],
        ],
        np.float32,
    )
    cos = np.array([[1, 0.5, 1, 0, 0, 1, 1, 1], [6e-8, 0.7071, -1, 1e-4, 0.999, -0.5, 0, 1]], np.float32)
    sin = np.array([[0, 0.5, 1, 1, 1, 1, 0, 0], [1, -0.7071, 6e-8, 1, 0.04, 0.866, 1, -1]], np.float32)
    for row0 in (0, 1):
        out, _ = _run(rt, x, cos, sin, row0)
        ref = npu_rope.rope(x, cos, sin, row0)
        bits_equal(out, ref)
    out, _ = _run(rt, x, cos, sin, 0)
    assert np.isnan(out[1, [0, 4]]).all() and not np.isnan(out[1, [1, 2, 3, 5, 6, 7]]).any()  # NaN reaches its pair
    assert np.isposinf(out[0, [0, 4]]).all()  # inf * 1 - 0 * 0; 0 * 0 + inf * 1
    assert np.isinf(out[2]).any()  # 65504 * 1 + 65504 * 1
    assert np.isnan(out[6, 0]) and np.isnan(out[6, 4])  # inf * 1 - inf * 0 ; inf * 0 + inf * 1


def _variants(x, cos, sin):
    """Other readings of the contract (fp16 results): the products rounded to fp16 before the add, and
    float32 tables used unrounded (the contract's tables are fp16)."""
    x = x.astype(np.float16).astype(np.float32)
    h = x.shape[1] // 2
    partner = np.concatenate([x[:, h:], x[:, :h]], axis=1)
    sign = np.concatenate([-np.ones(h, np.float32), np.ones(h, np.float32)])
    c, s = (t.astype(np.float16).astype(np.float32) for t in (cos, sin))
    p16 = (x * c).astype(np.float16).astype(np.float32)
    q16 = (partner * s).astype(np.float16).astype(np.float32)
    rounded = (p16 + sign * q16).astype(np.float16)
    unrounded_tables = (x * cos + sign * (partner * sin)).astype(np.float16)
    return rounded, unrounded_tables


def test_rope_bits_separate_the_stated_order_from_other_readings(rt):
    """The stream's bits are the contract's, and a model rounding elsewhere gives other bits on these rows
    (so the bit-exact test above tells them apart)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 64)) * 100).astype(np.float32)
    cos, sin = _tables(64, 64)
    out, _ = _run(rt, x, cos, sin)
    bits_equal(out, npu_rope.rope(x, cos, sin))
    for other in _variants(x, cos, sin):
        assert (other.view(np.uint16) != out.astype(np.float16).view(np.uint16)).any()
