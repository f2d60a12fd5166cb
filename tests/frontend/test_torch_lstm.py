"""torch.nn.LSTM through TVM's exported-program frontend, and the dense form that frontend emits (the bias
added first: add(b, matmul(x, W)))."""

import numpy as np
import pytest
from tvm import relax

import tvm_npu
from conftest import run_cpu, run_vm


@pytest.mark.parametrize("int8", [False, True])
def test_dense_with_the_bias_first(int8):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 24)).astype(np.float32) / 4
    b = rng.standard_normal(24).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.const(b), relax.op.matmul(x, relax.const(w))))
            out = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(out)
    mod = bb.get()
    data = [rng.standard_normal((3, 16)).astype(np.float32) for _ in range(4)]
    if int8:
        mod, _ = tvm_npu.quantize(mod, data, progress=False)
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(mod, report=report), data[0])
    assert {p.composite for p in report.placements if p.op == "relax.matmul"} == {
        "npu.qdense_bias_relu" if int8 else "npu.dense_bias_relu"
    }
    want = run_cpu(mod, data[0])  # the same (QDQ) module on TVM's llvm
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=0.05 if int8 else 1e-2)


def test_torch_lstm_matches_torch():
    torch = pytest.importorskip("torch")  # not a dependency: runs where torch is installed
    from tvm.relax.frontend.torch import from_exported_program

    class KWS(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(10, 16, batch_first=True)
            self.fc = torch.nn.Linear(16, 12)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.fc(y[:, 5])  # a static index: TVM 0.27 imports y[:, -1] as an out-of-bounds take

    torch.manual_seed(0)
    model = KWS().eval()
    x = torch.randn(1, 6, 10)
    want = model(x).detach().numpy()
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(from_exported_program(torch.export.export(model, (x,))), report=report)
    (got,) = run_vm(ex, x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    assert all(p.device == "npu" for p in report.placements if p.op == "relax.matmul")


def test_gate_split_becomes_one_dense_layer_per_gate():
    """The form TVM's PyTorch frontend gives an LSTM step: one matmul for all four gates per input, the
    sum split into the gates along the last axis. rewrite.split_dense_columns pushes the split down to the
    weights' columns, so there is no split left for the CPU; the result equals TVM llvm on the original."""
    rng = np.random.default_rng(6)
    T, I, H = 3, 5, 8
    w_ih, w_hh = (rng.standard_normal((n, 4 * H)).astype(np.float32) / 3 for n in (I, H))
    b_ih, b_hh = (rng.standard_normal(4 * H).astype(np.float32) / 5 for _ in range(2))
    bb = relax.BlockBuilder()
    x, h = relax.Var("x", relax.TensorType((T, I), "float32")), relax.Var("h", relax.TensorType((1, H), "float32"))
    with bb.function("main", [x, h]):
        with bb.dataflow():
            xw = bb.emit(relax.op.add(relax.const(b_ih), relax.op.matmul(x, relax.const(w_ih))))
            step = bb.emit(
                relax.op.squeeze(relax.op.strided_slice(relax.op.reshape(xw, (T, 1, 4 * H)), [0], [1], [2]), [0])
            )
            hw = bb.emit(
                relax.op.reshape(relax.op.add(relax.const(b_hh), relax.op.matmul(h, relax.const(w_hh))), (1, 1, 4 * H))
            )
            gates = bb.emit(relax.op.split(relax.op.add(hw, step), 4, axis=-1))
            i, f, g, o = (bb.emit(relax.TupleGetItem(gates, k)) for k in range(4))
            c = bb.emit(relax.op.multiply(relax.op.sigmoid(i), relax.op.tanh(g)))
            out = bb.emit_output(bb.emit(relax.op.multiply(relax.op.sigmoid(o), relax.op.tanh(c))))
        bb.emit_func_output(out)
    mod = bb.get()
    args = [rng.standard_normal((T, I)).astype(np.float32), rng.standard_normal((1, H)).astype(np.float32)]
    report = tvm_npu.BuildReport()
    got = run_vm(tvm_npu.build(mod, report=report), *args)
    assert not [p for p in report.placements if p.op == "relax.split"], report.table()
    assert all(p.device == "npu" for p in report.placements), report.table()
    np.testing.assert_allclose(got, run_cpu(mod, *args), rtol=1e-2, atol=1e-2)
