"""MATMUL (format 1.4) end to end: attention's Q x K^T and P x V as Relax modules built with tvm_npu.build,
against TVM's llvm build (within 1e-2 x max(1, max|ref|)) and bit for bit against the numpy model of
docs/npu.md; grouped-query attention (12 query heads over 2 KV heads, the repeat_kv form) on the NPU with
its repeat folded into addressing; the forms that stay on the CPU and their reasons."""

import json

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from builders import module_of
from conftest import npu_modules, run_cpu, run_vm
from npu_ref import fp16
from tvm_npu.contract import stream
from tvm_npu.models import gqa_attention

T_AXES = [0, 1, 3, 2]


def build(mod, config=None):
    report = tvm_npu.BuildReport()
    return tvm_npu.build(mod, config=config, report=report), report


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * max(1.0, float(np.abs(want).max())))


def on_npu(report, op, composites):
    rows = [p for p in report.placements if p.op == op]
    assert rows and all(p.device == "npu" and p.composite in composites for p in rows), report.table()


def repeat_kv(x, shape, group):
    """HF's repeat_kv as TVM imports it: [B, H_kv, T, D] -> [B, H_kv, 1, T, D] -> broadcast -> [B, H, T, D]."""
    b, h, t, d = shape
    x = relax.op.broadcast_to(relax.op.reshape(x, (b, h, 1, t, d)), (b, h, group, t, d))
    return relax.op.reshape(x, (b, h * group, t, d))


def attention(heads, kv_heads, s, t, d):
    g = heads // kv_heads

    def fn(q, k, v):
        if g > 1:
            k, v = repeat_kv(k, (1, kv_heads, t, d), g), repeat_kv(v, (1, kv_heads, t, d), g)
        scores = relax.op.matmul(q, relax.op.permute_dims(k, T_AXES))
        return relax.op.matmul(relax.op.nn.softmax(scores), v)

    return module_of(fn, [(1, heads, s, d), (1, kv_heads, t, d), (1, kv_heads, t, d)])


@pytest.mark.parametrize("heads, kv_heads, s, t, d", [(1, 1, 7, 9, 16), (12, 2, 5, 11, 32), (12, 2, 1, 24, 64)])
def test_attention_runs_its_matmuls_on_the_npu(rng, heads, kv_heads, s, t, d):
    mod = attention(heads, kv_heads, s, t, d)
    ex, report = build(mod)
    grouped = "_gqa" if heads > kv_heads else ""
    on_npu(report, "relax.matmul", {f"npu.matmul{grouped}_bt", f"npu.matmul{grouped}"})
    if grouped:  # the repeat is addressing inside the MATMUL composites, not a copy on either side
        on_npu(report, "relax.broadcast_to", {"npu.matmul_gqa_bt", "npu.matmul_gqa"})
    q = rng.standard_normal((1, heads, s, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, kv_heads, t, d)).astype(np.float32) for _ in range(2))
    got, vm = run_vm(ex, q, k, v, return_vm=True)
    close(got, run_cpu(mod, q, k, v))
    records = [r for m in npu_modules(vm) for r in json.loads(m["get_profile"]())["last"]["records"]]
    macs = sum(r["macs"] for r in records if r["opcode"] == "MATMUL")
    assert macs == 2 * heads * s * t * d  # both products, every query head, on the MAC array


@pytest.mark.parametrize("group", [1, 2, 6])
@pytest.mark.parametrize("transposed", [True, False])
def test_scores_are_bit_exact_to_the_numpy_model(rng, group, transposed):
    """Q x K^T (transposed) or P x V alone: the NPU's result is the numpy model of MATMUL on the staged
    (fp16-rounded) inputs, bit for bit, for every query head and its KV head h / g."""
    kv, s, t, d = 2, 3, 13, 24
    heads = kv * group

    def fn(a, b):
        if group > 1:
            b = repeat_kv(b, b_shape, group)
        return relax.op.matmul(a, relax.op.permute_dims(b, T_AXES) if transposed else b)

    b_shape = (1, kv, t, d) if transposed else (1, kv, d, t)
    mod = module_of(fn, [(1, heads, s, d if transposed else d), b_shape])
    ex, report = build(mod)
    assert len(npu_modules(ex)) == 1, report.table()
    a = rng.standard_normal((1, heads, s, d)).astype(np.float32) * 4
    b = rng.standard_normal(b_shape).astype(np.float32)
    got = run_vm(ex, a, b)
    want = fp16.matmul(fp16.stage(a)[0], fp16.stage(b)[0], group, transposed).astype(np.float32)
    np.testing.assert_array_equal(got[0], want)
    close(got, run_cpu(mod, a, b))
    # Small enough for one MATMUL over every head: the repeat is its b_group, KV heads loaded once each.
    (cmd,) = [c for m in npu_modules(ex) for c in stream.decode(bytes(m["get_stream"]())).commands if c.op == "MATMUL"]
    assert (cmd.args["batch"], cmd.args["b_group"], cmd.args["b_transposed"]) == (heads, group, int(transposed))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((4, 5, 24), (4, 24, 7)),
        ((2, 3, 5, 16), (1, 3, 16, 9)),
        ((2, 3, 5, 16), (2, 1, 16, 9)),
        ((3, 9, 40), (1, 40, 33)),
    ],
)
def test_batched_matmul_with_broadcast_batch_dims(rng, a_shape, b_shape):
    mod = module_of(lambda a, b: relax.op.matmul(a, b), [a_shape, b_shape])
    ex, report = build(mod)
    on_npu(report, "relax.matmul", {"npu.matmul"})
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    got = run_vm(ex, a, b)
    out_batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    bb = np.broadcast_to(fp16.stage(b), out_batch + b_shape[-2:]).reshape((-1,) + b_shape[-2:])
    want = fp16.matmul(fp16.stage(a).reshape((-1,) + a_shape[-2:]), bb).astype(np.float32)
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    close(got, run_cpu(mod, a, b))


def test_tiles_over_rows_and_batches_on_a_small_sram(rng):
    """npu-small (512 KiB): 4 heads of [200, 64] x [64, 1024] outputs 400 KiB per head, so MATMUL runs in
    row tiles, each head's B loaded once; the result is still the numpy model's."""
    shape_a, shape_b = (1, 4, 200, 64), (1, 4, 64, 1024)
    mod = module_of(lambda a, b: relax.op.matmul(a, b), [shape_a, shape_b])
    ex, report = build(mod, config="npu-small")
    on_npu(report, "relax.matmul", {"npu.matmul"})
    a, b = rng.standard_normal(shape_a).astype(np.float32), rng.standard_normal(shape_b).astype(np.float32)
    got, vm = run_vm(ex, a, b, return_vm=True)
    want = fp16.matmul(fp16.stage(a)[0], fp16.stage(b)[0]).astype(np.float32)
    np.testing.assert_array_equal(got[0], want)
    (module,) = npu_modules(vm)
    records = json.loads(module["get_profile"]())["last"]["records"]
    matmuls = [r for r in records if r["opcode"] == "MATMUL"]
    assert len(matmuls) > 4 and sum(r["macs"] for r in matmuls) == 4 * 200 * 64 * 1024


def _cpu_reason(report, op="relax.matmul"):
    (row,) = [p for p in report.placements if p.op == op]
    assert row.device == "cpu", report.table()
    return row.code


@pytest.mark.parametrize(
    "fn, shapes, code",
    [
        # A broadcast over B's batches
        (lambda a, b: relax.op.matmul(a, b), [(1, 4, 8), (3, 8, 5)], "NPU_E_BROADCAST"),
        # 2-D activations
        (lambda a, b: relax.op.matmul(a, b), [(4, 8), (8, 5)], "NPU_E_RANK"),
        # mixed ranks
        (lambda a, b: relax.op.matmul(a, b), [(2, 4, 8), (8, 5)], "NPU_E_RANK"),
        # grouped-query attention in the rank-5 form (queries [B, H_kv, g, S, D])
        (lambda a, b: relax.op.matmul(a, b), [(1, 2, 6, 3, 8), (1, 2, 1, 8, 5)], "NPU_E_RANK"),
    ],
)
def test_unsupported_forms_stay_on_the_cpu_with_a_reason(rng, fn, shapes, code):
    mod = module_of(fn, shapes)
    ex, report = build(mod)
    assert _cpu_reason(report) == code
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    close(run_vm(ex, *args), run_cpu(mod, *args))


def test_int8_matmul_with_a_float_result_stays_on_the_cpu(rng):
    """MATMUL's int8 form needs the quantize of its result (tests/pipeline/test_int8_attention.py): a matmul of
    two dequantized activations with a float result stays on the CPU with NPU_E_QUANT_MATMUL."""
    one, zero = relax.const(0.05, "float32"), relax.const(0, "int8")

    def fn(a, b):
        qa = relax.op.dequantize(relax.op.quantize(a, one, zero, out_dtype="int8"), one, zero)
        qb = relax.op.dequantize(relax.op.quantize(b, one, zero, out_dtype="int8"), one, zero)
        return relax.op.matmul(qa, qb)

    shapes = [(2, 4, 16), (2, 16, 8)]
    mod = module_of(fn, shapes)
    ex, report = build(mod)
    assert _cpu_reason(report) == "NPU_E_QUANT_MATMUL"
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    close(run_vm(ex, *args), run_cpu(mod, *args))


def test_another_permutation_of_b_runs_on_the_cpu_before_the_npu_matmul(rng):
    """Only a swap of B's last two axes folds into MATMUL (NPU_E_LAYOUT refuses the rest): the CPU permutes,
    the NPU multiplies what it gets."""
    shapes = [(2, 1, 4, 8), (1, 2, 8, 8)]
    mod = module_of(lambda a, b: relax.op.matmul(a, relax.op.permute_dims(b, [1, 0, 2, 3])), shapes)
    ex, report = build(mod)
    on_npu(report, "relax.matmul", {"npu.matmul"})
    assert (
        _cpu_reason(report, "relax.permute_dims") == "NPU_E_LAYOUT"
    )  # a permute_dims pattern exists (permute_view): it says why not
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    close(run_vm(ex, *args), run_cpu(mod, *args))


def test_profile_counts_the_matmul_layers(rng):
    """The profiler (and so the DSE) sees MATMUL layers: their MACs, and MAC-array cycles of the cost model."""
    mod = attention(12, 2, 4, 16, 64)
    prof = tvm_npu.profile(
        mod, inputs=[rng.standard_normal(s).astype(np.float32) for s in ((1, 12, 4, 64),) + ((1, 2, 16, 64),) * 2]
    )
    layers = [lay for lay in prof["layers"] if lay["kind"] == "matmul"]
    assert sum(lay["macs"] for lay in layers) == 2 * 12 * 4 * 16 * 64
    assert all(lay["cycles"]["compute"] > 0 and lay["ideal_compute_cycles"] > 0 for lay in layers)


@pytest.mark.parametrize("heads, kv_heads", [(1, 1), (12, 2)])
def test_onnx_attention_matches_onnxruntime(rng, heads, kv_heads):
    """The ONNX form (Unsqueeze -> Expand -> Reshape repeat, Transpose, MatMul) as torch exports attention:
    both MatMuls on the NPU, within 1e-2 of onnxruntime's float32."""
    import onnxruntime as ort

    model = gqa_attention(heads, kv_heads, s=5, t=12, d=32)
    ex, report = build(tvm_npu.from_onnx(model))
    on_npu(report, "relax.matmul", {"npu.matmul_gqa_bt", "npu.matmul_gqa"})  # the repeat is there even for g = 1
    feeds = {
        "q": rng.standard_normal((1, heads, 5, 32)).astype(np.float32),
        "k": rng.standard_normal((1, kv_heads, 12, 32)).astype(np.float32),
        "v": rng.standard_normal((1, kv_heads, 12, 32)).astype(np.float32),
    }
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    close(run_vm(ex, feeds["q"], feeds["k"], feeds["v"]), want)


def test_a_b_batch_larger_than_sram_stays_on_the_cpu(rng):
    """npu-small (512 KiB): a [512, 512] fp16 B batch is 512 KiB, twice that double-buffered: NPU_E_SRAM at
    partition time, TVM's own result, never a failed build."""
    shapes = [(1, 2, 4, 512), (1, 2, 512, 512)]
    mod = module_of(lambda a, b: relax.op.matmul(a, b), shapes)
    ex, report = build(mod, config="npu-small")
    assert _cpu_reason(report) == "NPU_E_SRAM"
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    close(run_vm(ex, *args), run_cpu(mod, *args))


def test_rank3_attention_is_one_npu_region(rng):
    """Heads merged into the batch ([B*H, S, D]): Q x K^T, the row softmax and P x V run in one NPU region,
    the scores and probabilities never leaving the NPU."""

    def fn(q, k, v):
        scores = relax.op.matmul(q, relax.op.permute_dims(k, [0, 2, 1]))
        return relax.op.matmul(relax.op.nn.softmax(scores), v)

    shapes = [(6, 5, 32), (6, 9, 32), (6, 9, 32)]
    mod = module_of(fn, shapes)
    ex, report = build(mod)
    assert {p.device for p in report.placements} == {"npu"} and len(npu_modules(ex)) == 1, report.table()
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    close(run_vm(ex, *args), run_cpu(mod, *args))
