import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


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
