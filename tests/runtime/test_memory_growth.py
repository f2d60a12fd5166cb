"""Nothing of a build, a VM or a loaded library outlives its last reference (issue 32, "no memory growth
per build + run"), and a library re-exported to the same path loads as the new model.

small_cnn runs wholly on the NPU, the case that kept a loaded copy of the model per VM (no host PrimFunc:
TVM's jit exported and loaded a library it never unloaded; backend/host_code.py). Liveness is read from
tvm-ffi's strong reference counts (benchmarks/memory_growth.py), results are checked against TVM's llvm
build of the same model. benchmarks/memory_growth.py measures the RSS.
"""

import gc
import os
import weakref

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu
from conftest import load_script
from tvm_npu.models import small_cnn

X = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def growth():
    return load_script("benchmarks/memory_growth.py")


def _run(lib_or_ex) -> np.ndarray:
    return relax.VirtualMachine(lib_or_ex, tvm.cpu())["main"](tvm.runtime.tensor(X)).numpy()


@pytest.fixture(scope="module")
def references():
    """seed -> small_cnn(seed)'s output from TVM's llvm build (the independent reference)."""
    return {seed: _run(tvm.compile(tvm_npu.from_onnx(small_cnn(seed)), target="llvm")) for seed in (0, 1)}


def _mapped(path) -> bool:
    name = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.split(maxsplit=5)[-1].strip().startswith(name) for line in f if "/" in line)


@pytest.mark.parametrize("path", ["npu-build", "npu-compile"])
def test_executable_vm_and_npu_modules_are_freed(growth, references, path):
    mod = tvm_npu.from_onnx(small_cnn(0))
    y, watch = growth.build_and_run(path, mod, X)
    np.testing.assert_allclose(y, references[0], rtol=2e-2, atol=2e-3)
    assert watch["npu"], "small_cnn has an NPU region"
    gc.collect()
    assert watch["executable"]() is None
    refs = growth.other_references(watch)
    assert refs == {"module_refs": 0, "npu_module_refs": [0] * len(watch["npu"])}, refs


def test_loaded_library_is_unloaded_when_dropped(growth, references, tmp_path):
    lib_path = tvm_npu.export_library(tvm_npu.build(tvm_npu.from_onnx(small_cnn(0))), tmp_path / "model.so")
    y, watch = growth.build_and_run("npu-load", lib_path, X)
    np.testing.assert_allclose(y, references[0], rtol=2e-2, atol=2e-3)
    assert _mapped(lib_path)
    refs = growth.other_references(watch)
    assert refs == {"module_refs": 0, "npu_module_refs": [0] * len(watch["npu"])}, refs
    watch.clear()
    gc.collect()
    assert not _mapped(lib_path)  # dlclose'd: TVM's own load_module keeps every library mapped


def test_reexport_to_the_same_path_loads_the_new_model(references, tmp_path):
    """dlopen returns a library already loaded under the same name: the second model must not run the
    first's code, whether the first is still in use (kept here) or was dropped."""
    assert np.abs(references[0] - references[1]).max() > 0.05  # the two models are told apart
    lib_path = tmp_path / "model.so"
    kept = []
    for seed in (0, 1, 0, 1):
        tvm_npu.export_library(tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed))), lib_path)
        lib = tvm_npu.load_module(lib_path)
        np.testing.assert_allclose(_run(lib), references[seed], rtol=2e-2, atol=2e-3, err_msg=f"seed {seed}")
        if seed == 0:
            kept.append(lib)
        del lib
    np.testing.assert_allclose(_run(kept[0]), references[0], rtol=2e-2, atol=2e-3)
    assert sorted(os.listdir(tmp_path)) == ["model.so"]  # the private copies are gone


def test_an_executable_freed_before_its_vm_keeps_the_vm_working(references):
    """The VM holds what it runs: dropping the executable first changes nothing."""
    ex = tvm_npu.build(tvm_npu.from_onnx(small_cnn(1)))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    gone = weakref.ref(ex)
    del ex
    gc.collect()
    assert gone() is None
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(X)).numpy(), references[1], rtol=2e-2, atol=2e-3)
