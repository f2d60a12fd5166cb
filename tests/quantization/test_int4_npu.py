"""Group-wise int4 dense layers on the NPU (W4A16: CONV2D's w_dtype int4 / uint4, format 1.4): from
`tvm_npu.quantize(weight_bits=4)` and from onnxruntime's MatMulNBits. Bit-equal to the numpy model of
docs/npu.md (npu_ref.int4, written from the contract) on the codes and scales the quantizer chose, close to
TVM's llvm build of the same model and to onnxruntime; a quarter of fp16's weight DMA bytes."""

import numpy as np
import pytest
from test_weight_only import close, convs, weight_load_bytes
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm
from npu_ref import int4
from tvm_npu.quantization import quantize_weights_int8
from tvm_npu.quantization.weight_int4 import quantize_rtn


def _dense(w, b=None, act=None, rows=3):
    x = relax.Var("x", relax.TensorType((rows, w.shape[0]), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, relax.const(w)))
            if b is not None:
                y = bb.emit(relax.op.add(y, relax.const(b)))
            if act == "relu":
                y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize(
    "K,N,group,symmetric,bias,act,rows",
    [
        (64, 16, 32, True, False, None, 1),
        (128, 40, 64, True, True, "relu", 3),
        (256, 33, 128, False, True, None, 2),  # uint4 with zero points, an odd N
        (384, 130, 32, False, False, "relu", 5),
    ],
)
def test_quantized_dense_runs_int4_bit_exact(K, N, group, symmetric, bias, act, rows):
    rng = np.random.default_rng(K + N)
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32) if bias else None
    qmod, _ = tvm_npu.quantize(_dense(w, b, act, rows), weight_bits=4, group_size=group, symmetric=symmetric)
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(qmod, report=report)
    cmds = convs(ex)
    assert cmds and all(c.args["w_dtype"] == int4.w_dtype(symmetric, group) for c in cmds), report.table()
    x = rng.standard_normal((rows, K)).astype(np.float32)
    got = run_vm(ex, x)
    codes, scales, zps = quantize_rtn(w.T, group, symmetric)  # what the quantizer wrote into qmod
    want = int4.w4a16(
        x.astype(np.float16),
        codes.astype(np.int64),
        scales.T.astype(np.float16),
        None if symmetric else zps.T.astype(np.int64),
        np.zeros(N, np.float32) if b is None else b,
        act=1 if act == "relu" else 0,
    )
    np.testing.assert_array_equal(got, want.astype(np.float32))
    close(got, run_cpu(qmod, x))  # the float32 model of the same int4 weights


def test_matmul_nbits_runs_int4_on_the_npu():
    from frontend.test_blockwise import _ort, matmul_nbits

    for zp, code in (("packed", int4.UINT4), (None, int4.UINT4)):
        model, _ = matmul_nbits(256, 64, 128, zp=zp, bias=True, seed=5)
        ex = tvm_npu.build(tvm_npu.from_onnx(model))
        assert {c.args["w_dtype"] for c in convs(ex)} == {code | 128 << 8}
        x = np.random.default_rng(6).standard_normal((3, 256)).astype(np.float32)
        close(run_vm(ex, x), _ort(model, x))


def test_float32_scales_round_to_fp16_and_tiny_ones_keep_the_fp16_weight():
    """MatMulNBits with float32 scales (as onnxruntime's quantizer writes them): CONV2D reads fp16 scales, so
    they are rounded (each weight moves by at most 2^-11 of itself, as a float weight does); a scale below
    fp16's normal range would lose more, so that weight is dequantized at compile time (fp16) instead."""
    from frontend.test_blockwise import _ort, matmul_nbits

    x = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    for scale, w_dtype in ((0.01, int4.UINT4 | 32 << 8), (1e-5, 0)):
        model, weight = matmul_nbits(64, 16, 32, scales=np.full((16, 2), scale, np.float32))
        ex = tvm_npu.build(tvm_npu.from_onnx(model))
        assert {c.args["w_dtype"] for c in convs(ex)} == {w_dtype}
        close(run_vm(ex, x), _ort(model, x))


def test_int4_weights_cost_about_half_the_int8_dma_bytes():
    """A 512 x 512 decode-step dense: int4 g128 = K * N / 2 code bytes + its block, int8 = K * N + block."""
    w = np.random.default_rng(8).standard_normal((512, 512)).astype(np.float32)
    mod = _dense(w, rows=1)
    b8 = weight_load_bytes(tvm_npu.build(quantize_weights_int8(mod)))
    b4 = weight_load_bytes(tvm_npu.build(tvm_npu.quantize(mod, weight_bits=4, group_size=128)[0]))
    assert b4 >= 512 * 512 // 2 and b4 <= 0.55 * b8, (b4, b8)
