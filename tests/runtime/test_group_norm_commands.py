"""The reference NPU's GN_STATS (0x29) and GN_APPLY (0x2A), format 1.7, from hand-packed streams (docs/npu.md
section 6, packed by tests/npu_stream_pack.py, not by the compiler): bit for bit against the numpy model of
the contract (tests/npu_ref/group_norm.py) for the same tiling, within fp16 rounding of a float64 GroupNorm
of the whole map and of onnxruntime's; a map streamed through SRAM buffers smaller than itself; NaN / inf
groups; the cycle formulas; and the ERR_* code of every bad operand."""

import json

import numpy as np
import pytest

from npu_ref import group_norm as gn
from npu_ref import norm as npu_norm
from npu_stream_pack import (
    ALL_DONE,
    DMA0,
    DMA1,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    INT8,
    OUTPUT,
    ROWS,
    VECTOR,
    T,
    align,
    bits_equal,
    command,
    dma,
    f32_bits,
    pack_stream,
    raises_code,
    tensor,
)
from npu_stream_pack import one_command as pack_one
from tvm_npu.contract import layout

GN_STATS, GN_APPLY = layout.OPCODES["GN_STATS"], layout.OPCODES["GN_APPLY"]
V16, V17 = (1, 6), (1, 7)
NO = 0xFFFFFFFF
SRAM = 2097152  # npu-ref


def stats_cmd(inp=0, in_stride=256, rows=2, row_pixels=2, channels=64, groups=8, stats=4096, first=1, wait=None):
    return command(
        GN_STATS,
        dict(
            dtype=FP16, in_addr=inp, in_stride=in_stride, rows=rows, row_pixels=row_pixels, channels=channels,
            groups=groups, stats_addr=stats, first=first,
        ),
        wait,
    )  # fmt: skip


def apply_cmd(
    inp=0, in_stride=256, out=1024, out_stride=256, rows=2, row_pixels=2, channels=64, groups=8, stats=4096,
    gamma=4224, beta=4480, eps=1e-5, silu=0, dtype=FP16, wait=None,
):  # fmt: skip
    return command(
        GN_APPLY,
        dict(
            dtype=dtype, in_addr=inp, in_stride=in_stride, out_addr=out, out_stride=out_stride, rows=rows,
            row_pixels=row_pixels, channels=channels, groups=groups, stats_addr=stats, gamma_addr=gamma,
            beta_addr=beta, eps=f32_bits(eps) if isinstance(eps, float) else eps, silu=silu,
        ),
        wait,
    )  # fmt: skip


def _params(c, gamma, beta):
    """The weight region: gamma then beta (fp32 rows of C, each padded to 128 bytes); their SRAM addresses."""
    prm = align(4 * c)
    weights, g_addr, b_addr = b"", NO, NO
    if gamma is not None:
        g_addr, weights = 0, gamma.astype("<f4").tobytes().ljust(prm, b"\0")
    if beta is not None:
        b_addr = len(weights)
        weights += beta.astype("<f4").tobytes().ljust(prm, b"\0")
    return weights or b"\0" * 128, g_addr, b_addr


def gn_stream(shape, groups, tiles, gamma=None, beta=None, eps=1e-5, silu=0, streamed=False):
    """The stream of a GroupNorm over an [H, W, C] map: GN_STATS over the row tiles `tiles` (first = 1 on
    the first), then GN_APPLY over the same tiles. Resident: the whole map loaded into SRAM once, the tiles
    are row ranges of it. `streamed`: one input and one output buffer of the largest tile, each tile loaded
    (twice: statistics, then apply) and stored through them, as a map larger than SRAM must be."""
    h, w, c = shape
    e = w * c
    stride = align(2 * e)
    weights, g_addr, b_addr = _params(c, gamma, beta)
    stats_at = align(len(weights))
    in_ddr = len(weights)
    out_ddr = in_ddr + h * stride
    buf_rows = max(tiles) if streamed else h
    in_sram = stats_at + align(12 * groups)
    out_sram = in_sram + buf_rows * stride
    cmds = [dma(DMA_LOAD, 1, 0, 0, 1, len(weights), len(weights), len(weights))]
    if not streamed:
        cmds.append(dma(DMA_LOAD, 0, in_ddr, in_sram, h, 2 * e, stride, stride))
    starts = np.cumsum([0, *tiles[:-1]]).tolist()
    for i, (h0, n) in enumerate(zip(starts, tiles)):
        src = in_sram if streamed else in_sram + h0 * stride
        if streamed:
            cmds.append(dma(DMA_LOAD, 0, in_ddr + h0 * stride, in_sram, n, 2 * e, stride, stride, wait={VECTOR: 0}))
        cmds.append(stats_cmd(src, stride, n, w, c, groups, stats_at, int(i == 0), wait={DMA0: 0, DMA1: 0}))
    for h0, n in zip(starts, tiles):
        src = in_sram if streamed else in_sram + h0 * stride
        dst = out_sram if streamed else out_sram + h0 * stride
        if streamed:
            cmds.append(dma(DMA_LOAD, 0, in_ddr + h0 * stride, in_sram, n, 2 * e, stride, stride, wait={VECTOR: 0}))
        cmds.append(
            apply_cmd(src, stride, dst, stride, n, w, c, groups, stats_at, g_addr, b_addr, eps, silu,
                      wait={DMA0: 0, DMA1: 0})
        )  # fmt: skip
        if streamed:
            cmds.append(dma(DMA_STORE, 1, dst, out_ddr + h0 * stride, n, 2 * e, stride, stride, wait={VECTOR: 0}))
    if not streamed:
        cmds.append(dma(DMA_STORE, 0, out_sram, out_ddr, h, 2 * e, stride, stride, wait={VECTOR: 0}))
    cmds.append(command(END, [], wait=ALL_DONE))
    view = [1, h, 1, e]
    tensors = [
        tensor(INPUT, 0, view, in_ddr, stride, FP16, FP32, layout=ROWS, host_shape=(h, e)),
        tensor(OUTPUT, 0, view, out_ddr, stride, FP16, FP32, layout=ROWS, host_shape=(h, e)),
    ]
    end = out_ddr + h * stride
    sram_used = out_sram + buf_rows * stride
    return pack_stream(tensors, cmds, weights, end, 1, 1, version=V17, sram_used=sram_used)


def run_gn(rt, x, groups, tiles, gamma=None, beta=None, eps=1e-5, silu=0, streamed=False):
    """x (fp16 values, [H, W, C]) through gn_stream's stream on the C++ runtime: the [H, W, C] float32
    output and the profile records."""
    h, w, c = x.shape
    e = w * c
    mod = rt["create"]("gn", gn_stream(x.shape, groups, tiles, gamma, beta, eps, silu, streamed))
    out = np.zeros((h, e), np.float32)
    mod["gn"](T(np.ascontiguousarray(x.reshape(h, e), np.float32)), T(out))
    return out.reshape(h, w, c), json.loads(mod["get_profile"]())["last"]["records"]


def _data(rng, h, w, c, scale=1.0, offset=0.0):
    return (rng.standard_normal((h, w, c)) * scale + offset).astype(np.float16).astype(np.float32)


def _group_norm_f64(x, groups, gamma, beta, eps, silu=0):
    """GroupNorm of the whole [H, W, C] map in float64 (biased variance), the contract's meaning."""
    h, w, c = x.shape
    v = x.astype(np.float64).reshape(h, w, groups, c // groups)
    mean = v.mean(axis=(0, 1, 3), keepdims=True)
    var = ((v - mean) ** 2).mean(axis=(0, 1, 3), keepdims=True)
    y = ((v - mean) / np.sqrt(var + eps)).reshape(h, w, c) * gamma + beta
    return y / (1 + np.exp(-y)) if silu else y


CASES = [  # h, w, c, groups, tiles
    (6, 4, 64, 8, [6]),
    (9, 5, 64, 32, [4, 3, 2]),
    (12, 7, 96, 32, [5, 5, 1, 1]),
    (8, 3, 40, 4, [1] * 8),
    (5, 16, 32, 1, [2, 3]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("silu", [0, 1])
def test_group_norm_is_bit_exact_to_the_contract_over_tiles(rt, case, silu):
    h, w, c, groups, tiles = CASES[case]
    rng = np.random.default_rng(10 * case + silu)
    scale, offset = [(1.0, 0.0), (30.0, 5.0), (1e-2, -3.0), (300.0, 100.0), (1.0, 1.0)][case]
    x = _data(rng, h, w, c, scale, offset)
    gamma = rng.standard_normal(c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    eps = [1e-5, 1e-6, 1e-5, 1e-3, 0.5][case]
    out, recs = run_gn(rt, x, groups, tiles, gamma, beta, eps, silu)
    bits_equal(out, gn.group_norm(x, groups, tiles, gamma, beta, eps, silu))
    # The tiled statistics are the whole map's: within fp16 rounding of a float64 GroupNorm.
    ref = _group_norm_f64(x, groups, gamma, beta, eps, silu)
    np.testing.assert_allclose(out, ref, rtol=2**-10, atol=2e-3)
    # Cycles (npu-ref, fp16 lanes 32): op_overhead 32 + ceil(steps / 32); GN_STATS 2 E + G, GN_APPLY
    # E (2 E with SiLU) + G.
    stats = [r for r in recs if r["opcode"] == "GN_STATS"]
    apply = [r for r in recs if r["opcode"] == "GN_APPLY"]
    assert len(stats) == len(apply) == len(tiles)
    for n, s, a in zip(tiles, stats, apply):
        e = n * w * c
        assert s["end"] - s["start"] == 32 + -(-(2 * e + groups) // 32)
        assert a["end"] - a["start"] == 32 + -(-((1 + silu) * e + groups) // 32)


def test_group_norm_streamed_through_small_buffers(rt):
    """The map passes through one input and one output buffer of 3 rows (of 10): each tile loaded for its
    statistics, again for the apply, and stored; the result is the resident run's, bit for bit, and the
    model's."""
    rng = np.random.default_rng(7)
    x = _data(rng, 10, 6, 64, 4.0, 2.0)
    gamma, beta = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    tiles = [3, 3, 3, 1]
    streamed, _ = run_gn(rt, x, 32, tiles, gamma, beta, 1e-5, 1, streamed=True)
    resident, _ = run_gn(rt, x, 32, tiles, gamma, beta, 1e-5, 1)
    bits_equal(streamed, resident.astype(np.float16))
    bits_equal(streamed, gn.group_norm(x, 32, tiles, gamma, beta, 1e-5, True))


def test_one_group_one_row_is_the_norm_model(rt):
    """groups 1 and a one-row tile: GN_STATS sums in the row's element order, so GN_APPLY's steps are
    NORM's layernorm on the flattened row (section 2), bit for bit against the NORM model (an independent
    text), gamma / beta repeated over the pixels."""
    rng = np.random.default_rng(3)
    x = _data(rng, 1, 12, 48, 7.0, -2.0)
    gamma, beta = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    out, _ = run_gn(rt, x, 1, [1], gamma, beta, 1e-5)
    want = npu_norm.norm("layernorm", x.reshape(1, -1), np.tile(gamma, 12), np.tile(beta, 12), 1e-5)
    bits_equal(out.reshape(1, -1), want)


def test_tiling_order_is_part_of_the_contract():
    """Different tilings give different fp32 statistics (so the model's merge order is a real claim the
    bit-exact test can fail), yet the same GroupNorm within fp32 rounding."""
    rng = np.random.default_rng(11)
    x = _data(rng, 16, 8, 32, 10.0, 50.0)
    one, many = gn.stats(x, 4, [16]), gn.stats(x, 4, [3, 5, 1, 7])
    assert (one[0] == many[0]).all() and ((one[1] != many[1]) | (one[2] != many[2])).any()
    np.testing.assert_allclose(many[1], one[1], rtol=1e-6)
    np.testing.assert_allclose(many[2], one[2], rtol=1e-4)


def test_group_norm_matches_onnxruntime(rt):
    """The same data through onnxruntime: an NCHW GroupNorm as the exporters write it (Reshape to [1, G, -1],
    InstanceNormalization, Reshape back, per-channel Mul and Add), then Sigmoid-Mul SiLU."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    h, w, c, groups = 8, 8, 64, 32
    x = _data(rng, h, w, c, 2.0, 0.5)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array([1, groups, -1], np.int64), "s1"),
        numpy_helper.from_array(np.array([1, c, h, w], np.int64), "s2"),
        numpy_helper.from_array(np.ones(groups, np.float32), "one"),
        numpy_helper.from_array(np.zeros(groups, np.float32), "zero"),
        numpy_helper.from_array(gamma.reshape(1, c, 1, 1), "g"),
        numpy_helper.from_array(beta.reshape(1, c, 1, 1), "b"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["r1"]),
        helper.make_node("InstanceNormalization", ["r1", "one", "zero"], ["n"], epsilon=1e-5),
        helper.make_node("Reshape", ["n", "s2"], ["r2"]),
        helper.make_node("Mul", ["r2", "g"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["sg"]),
        helper.make_node("Mul", ["a", "sg"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, h, w]) for n in ("x", "y")]
    model = helper.make_model(
        helper.make_graph(nodes, "gn", io[:1], io[1:], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x.transpose(2, 0, 1)[None]})[0][0].transpose(1, 2, 0)
    out, _ = run_gn(rt, x, groups, [3, 3, 2], gamma, beta, 1e-5, 1)
    np.testing.assert_allclose(out, want, rtol=2**-10, atol=2e-3)


def test_group_norm_nan_and_inf_groups(rt):
    """A NaN or an inf in a group makes that group's mean (or m2) NaN, so every output of the group is NaN
    (in every tile, after the merge); the other groups are finite; all bit-exact to the model."""
    rng = np.random.default_rng(9)
    h, w, c, groups = 6, 4, 32, 4
    x = _data(rng, h, w, c)
    x[1, 2, 3] = np.nan  # group 0, tile 0
    x[4, 0, 17] = np.inf  # group 2, tile 1
    x[5, 3, 31] = -np.inf  # group 3, tile 1
    gamma = np.linspace(0.5, 2, c).astype(np.float32)
    out, _ = run_gn(rt, x, groups, [3, 3], gamma, None, 1e-5, 1)
    bits_equal(out, gn.group_norm(x, groups, [3, 3], gamma, None, 1e-5, True))
    k = c // groups
    for g in (0, 2, 3):
        assert np.isnan(out[..., g * k : (g + 1) * k]).all()
    assert np.isfinite(out[..., k : 2 * k]).all()


def test_group_norm_constant_group_and_large_mean(rt):
    """A constant group (var 0: eps keeps it finite, output beta), a mean far from the spread (Chan's merge
    keeps m2 from cancelling, unlike a sum of squares), fp16 extremes: bit-exact to the model."""
    h, w, c, groups = 4, 8, 16, 4
    x = np.zeros((h, w, c), np.float32)
    x[..., 0:4] = 7.0
    x[..., 4:8] = (60000.0 + 32 * (np.arange(h * w * 4) % 5)).reshape(h, w, 4)
    x[..., 8:12] = np.linspace(-65504, 65504, h * w * 4).reshape(h, w, 4)
    x[..., 12:16] = np.linspace(0, 1, h * w * 4).reshape(h, w, 4) * 6e-8  # subnormals
    x = x.astype(np.float16).astype(np.float32)
    beta = np.linspace(-1, 1, c).astype(np.float32)
    out, _ = run_gn(rt, x, groups, [1, 2, 1], None, beta, 1e-5)
    bits_equal(out, gn.group_norm(x, groups, [1, 2, 1], None, beta, 1e-5))
    assert (out[..., 0:4] == beta[0:4].astype(np.float16)).all()
    ref = _group_norm_f64(x, groups, np.ones(c), beta, 1e-5)
    np.testing.assert_allclose(out[..., 4:12], ref[..., 4:12], rtol=2**-10, atol=2e-3)


def one_command(cmd, version=V17):
    return pack_one(cmd, version)


def commands(*cmds, version=V17):
    """A stream of `cmds` and END alone (as one_command), for the checks across commands."""
    return pack_stream([], [*cmds, command(END, [])], b"\0" * 256, 4096, version=version)


def test_valid_group_norm_commands_pass_validation(rt):
    for cmds in (
        [stats_cmd()],
        [stats_cmd(), stats_cmd(first=0), apply_cmd()],
        [stats_cmd(channels=2048, row_pixels=1, in_stride=4096, groups=32, stats=8192)],
        [stats_cmd(), apply_cmd(gamma=NO, beta=NO, silu=1, eps=0.0)],
        [stats_cmd(groups=64, stats=8192), apply_cmd(beta=NO, groups=64, stats=8192)],
    ):
        rt["validate"](commands(*cmds))


def test_records_must_be_started_before_they_are_read(rt):
    """A GN_STATS with first 0 or a GN_APPLY reads records an earlier GN_STATS with first 1 started at its
    stats_addr with the same groups and channels; anything else would read stale SRAM (ERR_BAD_STREAM)."""
    v = rt["validate"]
    for bad in (
        [apply_cmd()],  # never started
        [stats_cmd(first=0), apply_cmd()],  # merged into stale records
        [apply_cmd(), stats_cmd()],  # read before the start
        [stats_cmd(stats=8192), apply_cmd()],  # started elsewhere
        [stats_cmd(), apply_cmd(groups=16)],  # other groups
        [stats_cmd(), stats_cmd(first=0, groups=4)],
        [stats_cmd(channels=32, in_stride=128, groups=8), apply_cmd()],  # other channels
    ):
        assert "GN_" in raises_code("ERR_BAD_STREAM", v, commands(*bad))


def test_group_norm_bad_operands_have_codes(rt):
    v = rt["validate"]
    for bad in (
        stats_cmd(groups=0),
        stats_cmd(channels=64, groups=5),  # C not a multiple of G
        stats_cmd(groups=128),  # more groups than channels
        stats_cmd(rows=0),
        stats_cmd(row_pixels=0),
        stats_cmd(first=2),
        apply_cmd(groups=0),
        apply_cmd(channels=48, groups=32),
        apply_cmd(silu=2),
        apply_cmd(eps=-1e-5),
        apply_cmd(eps=0x7FC00000),  # NaN
        apply_cmd(eps=float("inf")),
        apply_cmd(dtype=3),
        stats_cmd(in_stride=128),  # below the 256-byte row
    ):
        raises_code("ERR_BAD_STREAM", v, one_command(bad))
    for bad, why in (
        (apply_cmd(dtype=INT8), "fp16"),
        (stats_cmd(row_pixels=2049, channels=1, groups=1, in_stride=4224), "max_width"),
        (apply_cmd(channels=4096, row_pixels=1, groups=1, in_stride=8192), "max_width"),
        # 2^24 elements of a group in one tile: the count would not be exact in fp32.
        (stats_cmd(rows=4096, row_pixels=2048, channels=2, groups=1, in_stride=4096, stats=0, inp=128), "2^24"),
    ):
        assert why in raises_code("ERR_OP_NOT_SUPPORTED", v, one_command(bad))
    for bad in (
        stats_cmd(stats=SRAM - 64),  # 8 records: 96 bytes beyond SRAM
        stats_cmd(stats=256),  # over the input tile
        stats_cmd(stats=4000),  # misaligned
        stats_cmd(in_stride=300),  # misaligned stride
        apply_cmd(out=4096),  # output over the records
        apply_cmd(out=4224),  # over gamma
        apply_cmd(out=4480 - 128, gamma=NO),  # over beta (256 bytes)
        apply_cmd(out=0),  # over the input
        apply_cmd(gamma=SRAM - 128),
        apply_cmd(out=SRAM - 256),
    ):
        raises_code("ERR_INVALID_ADDR", v, one_command(bad))
    for cmd in (stats_cmd(), apply_cmd()):
        assert "1.7" in raises_code("ERR_BAD_STREAM", v, one_command(cmd, version=V16))


def test_compiler_verifier_and_listing_know_group_norms():
    """The compiler's verifier (backend/verify.py) passes both streams and finds the hazard of a store
    that does not wait for the GN_APPLY writing its source; disasm's listing assembles back to the same
    bytes with every check on."""
    from tvm_npu.backend.verify import verify
    from tvm_npu.contract import stream
    from tvm_npu.tools import asm, disasm

    ones = np.ones(64, np.float32)
    for streamed in (False, True):
        blob = gn_stream((10, 2, 64), 8, [3, 3, 3, 1], ones, ones, 1e-5, 1, streamed)
        verify(stream.decode(blob))
        text = disasm(blob, inline_weights=True)
        assert "GN_STATS" in text and "GN_APPLY" in text
        assert list(asm(text).values()) == [blob]
    racy = stream.decode(blob)
    store = next(c for c in racy.commands if c.op == "DMA_STORE")
    store.waits.pop("vector")
    with pytest.raises(Exception) as info:
        verify(racy)
    assert str(info.value).startswith("ERR_BAD_STREAM") and "read-after-write" in str(info.value)
    assert "GN_APPLY" in str(info.value)


@pytest.mark.parametrize("silu", [0, 1])
def test_compiler_cost_model_matches_the_runtime(rt, silu):
    """backend/plan/cost_model.py's cycles of every GN command equal the C++ cycle model's record, on
    uneven tiles (so a formula that dropped the per-group step or the SiLU pass would differ)."""
    from tvm_npu.backend.plan.cost_model import compute_cycles
    from tvm_npu.contract import stream
    from tvm_npu.contract.config import get_config

    x = _data(np.random.default_rng(2), 7, 3, 96)
    tiles = [4, 2, 1]
    blob = gn_stream(x.shape, 32, tiles, None, None, 1e-5, silu)
    _, recs = run_gn(rt, x, 32, tiles, None, None, 1e-5, silu)
    cfg = get_config("npu-ref")
    cmds = stream.decode(blob).commands
    gn_cmds = [(c, r) for c, r in zip(cmds, recs) if c.op.startswith("GN_")]
    assert len(gn_cmds) == 6
    for cmd, rec in gn_cmds:
        assert rec["opcode"] == cmd.op and compute_cycles(cfg, cmd) == rec["end"] - rec["start"]


def test_sd_vae_group_norm_larger_than_sram(rt):
    """The issue's case: an SD VAE decoder's GroupNorm(32, 512) + SiLU on a 64 x 64 map, 4 MiB of fp16 (twice
    npu-ref's 2 MiB SRAM), streamed in 8-row tiles (512 KiB buffers), 65,536 elements a group: bit-exact to
    the model, within fp16 rounding of a float64 GroupNorm."""
    rng = np.random.default_rng(34)
    x = _data(rng, 64, 64, 512, 3.0, 0.25)
    gamma = (1 + 0.1 * rng.standard_normal(512)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(512)).astype(np.float32)
    tiles = [8] * 8
    out, recs = run_gn(rt, x, 32, tiles, gamma, beta, 1e-6, 1, streamed=True)
    bits_equal(out, gn.group_norm(x, 32, tiles, gamma, beta, 1e-6, True))
    np.testing.assert_allclose(out, _group_norm_f64(x, 32, gamma, beta, 1e-6, 1), rtol=2**-10, atol=2e-3)
    # 2 * 262,144 + 32 steps per GN_STATS tile at 32 fp16 lanes: 32 + 16,385 cycles.
    assert {r["end"] - r["start"] for r in recs if r["opcode"] == "GN_STATS"} == {32 + 16385}


def test_mutated_group_norm_streams_end_in_coded_errors_or_results(rt):
    """400 streams, each the streamed GroupNorm with one GN operand replaced (0, 1, a boundary value, a
    random word): refused at load with a coded error or run to a result, never an uncoded error (the
    command-stream fuzzer's rule, benchmarks/fuzz_streams.py, whose compiled models have no group norm).
    Under scripts/sanitize.sh's build this also shows the kernels read and write only what the checks
    bound."""
    from tvm_npu.contract import stream

    rng = np.random.default_rng(17)
    ones = np.ones(64, np.float32)
    base = stream.decode(gn_stream((6, 2, 64), 8, [2, 2, 2], ones, ones, 1e-5, 1, True))
    gn_at = [i for i, c in enumerate(base.commands) if c.op.startswith("GN_")]
    x = np.ascontiguousarray(_data(rng, 6, 2, 64).reshape(6, 128))
    outcomes = {"ran": 0, "refused": 0}
    for _ in range(400):
        s = stream.decode(stream.encode(base))
        cmd = s.commands[int(rng.choice(gn_at))]
        name = str(rng.choice(stream.OPERANDS[cmd.op]))
        cmd.args[name] = int(
            rng.choice([0, 1, 2, 7, 8, 64, 65, 127, 128, 2048, 4096, SRAM - 128, NO, int(rng.integers(0, 2**32))])
        )
        try:
            mod = rt["create"]("gn", stream.encode(s))
            mod["gn"](T(x), T(np.zeros((6, 128), np.float32)))
            outcomes["ran"] += 1
        except RuntimeError as e:
            assert str(e).split(":")[0].startswith("ERR_"), str(e)
            outcomes["refused"] += 1
    assert outcomes["ran"] > 0 and outcomes["refused"] > 0, outcomes
