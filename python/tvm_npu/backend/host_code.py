"""Host code for a model with none: a no-op PrimFunc, so that TVM links its host functions as an LLVM
module instead of a C-source placeholder.

When every operator of a model runs on the NPU, the module TVM's VM lowering leaves has no PrimFunc,
and TVM 0.27's VMLink then stands a C-source module (source ";") in for the host library. A C-source
module is not runnable, so `tvm.relax.VirtualMachine(ex, dev)` calls `ex.jit()`, which exports the
executable to a temporary library (a gcc run) and loads it with `tvm.runtime.load_module`, and TVM's
loader keeps every loaded module alive for the rest of the process (tvm_ffi.load_module's
keep_module_alive=True, its global module registry). Each build + VM of such a model therefore kept a
whole copy of the model: about 315 KiB per iteration for tvm_npu.models.small_cnn
(benchmarks/memory_growth.py). With one PrimFunc the host library is LLVM code, runnable as it is: no
export, no load, nothing kept once the executable is dropped, and a VM in 2 ms instead of 60.
"""

from __future__ import annotations

import tvm
from tvm import tirx

SYMBOL = "__tvm_npu_host"  # never called: it only makes the host library an LLVM module


def ensure_host_code(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with a no-op PrimFunc `SYMBOL` when it has no PrimFunc; `mod` itself otherwise."""
    if any(isinstance(func, tirx.PrimFunc) for func in mod.functions.values()):
        return mod
    stub = tirx.PrimFunc([], tirx.Evaluate(tirx.const(0, "int32"))).with_attr("global_symbol", SYMBOL)
    mod = mod.clone()  # the pass's input stays as it was
    mod[SYMBOL] = stub
    return mod
