"""The check of the diffusion tests: a model built by tvm_npu.build(target="npu") against onnxruntime on
the same ONNX file, within the issue's 1e-2 x max(1, max|ref|)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import tvm
from tvm import relax

import tvm_npu


def feeds(path: str, seed: int = 0) -> dict:
    """Seeded inputs of every graph input of `path`: token ids below the tiny vocabulary, timesteps in
    the scheduler's range, normal latents and text embeddings."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs():
        if i.type == "tensor(int64)":
            out[i.name] = rng.integers(0, 100, i.shape).astype(np.int64)
        elif i.name == "timestep":
            out[i.name] = rng.uniform(0, 1000, i.shape).astype(np.float32)
        else:
            out[i.name] = rng.standard_normal(i.shape).astype(np.float32)
    return out


def onnxruntime(path: str, inputs: dict) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, inputs)[0]


def npu(mod, inputs: dict, report: tvm_npu.BuildReport | None = None) -> np.ndarray:
    """`mod` built for the NPU and run on `inputs` (in the order of main's parameters)."""
    ex = tvm_npu.build(mod, target="npu", report=report)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    names = [p.name for p in mod["main"].params]
    out = vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in names])
    return (out if hasattr(out, "numpy") else out[0]).numpy()


def assert_close(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error, asserted within 1e-2 x max(1, max|want|); returns it."""
    assert got.shape == want.shape, (got.shape, want.shape)
    err = float(np.abs(got - want).max())
    bound = 1e-2 * max(1.0, float(np.abs(want).max()))
    assert err <= bound, f"max error {err} above {bound}"
    return err


def placement(report: tvm_npu.BuildReport) -> str:
    """The build report's placement line: ops / MACs on the NPU and NPU regions."""
    return f"{report.summary()}, {report.fallback_cost()['regions']} NPU regions"
