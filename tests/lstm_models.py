"""ONNX LSTM models for the tests (tvm_npu.models.lstm), their seeded inputs, and their references:
onnxruntime's LSTM op and TVM's llvm build."""

import numpy as np
import tvm

import tvm_npu
from tvm_npu.models import lstm as lstm_model  # noqa: F401 (the LSTM tests import it from here)


def feeds_of(model, seed=1):
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in model.graph.input
    }


def ort_run(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def llvm_run(model, feeds):
    ex = tvm.compile(tvm_npu.from_onnx(model), target="llvm")
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input])
    return [o.numpy() for o in out]


def calibration(model, n=16):
    return [[feeds_of(model, seed=100 + k)[i.name] for i in model.graph.input] for k in range(n)]
