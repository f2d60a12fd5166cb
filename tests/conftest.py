import importlib.util
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from npu_stream_pack import runtime_functions

_REPO = Path(__file__).resolve().parents[1]


def load_script(path: str):
    """A script of the repository that is not in a package (benchmarks/*.py, tutorials/*.py), `path` from
    the repository root, loaded as a module named after its file. A plain function, not a fixture: some
    tests use the script's names at import time (parametrize lists, module constants)."""
    file = _REPO / path
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def rt():
    """The runtime's global functions, by short name (the library as the package installed it): modules
    from a stream, stream validation, fp16 rounding and the reference kernels alone."""
    return runtime_functions(
        {
            "create": "runtime.NPUModuleCreate",
            "load": "ffi.Module.load_from_bytes.npu",
            "validate": "tvm_npu.runtime.validate_stream",
            "fp16_round": "tvm_npu.runtime.fp16_round",
            "conv16": "tvm_npu.runtime.ref_conv2d_fp16",
            "conv8": "tvm_npu.runtime.ref_conv2d_int8",
            "add": "tvm_npu.runtime.ref_add",
            "pool": "tvm_npu.runtime.ref_pool",
        }
    )


def run_vm(ex, *inputs, return_vm=False):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(i)) for i in inputs])
    out = out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]
    return (out, vm) if return_vm else out


def run_cpu(mod, *inputs):
    """TVM's own llvm build: the independent float32 reference."""
    return run_vm(tvm.compile(mod, target="llvm"), *inputs)


def npu_modules(ex):
    return tvm_npu.runtime.npu_modules(ex)


def extreme_int8(rng, shape):
    """Random int8 codes, about 15% each at the extremes -128 and 127 (the largest accumulator terms)."""
    x = rng.integers(-128, 128, shape).astype(np.int8)
    mask = rng.random(shape)
    x[mask < 0.15] = -128
    x[mask > 0.85] = 127
    return x


def assert_fp16_close(got, want):
    """The issue's tolerance for the fp16 datapath against a float32 reference."""
    bound = 1e-2 * max(1.0, float(np.abs(want).max()))
    assert np.isfinite(got).all(), got
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= bound, (err, bound)
