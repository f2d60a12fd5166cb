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
