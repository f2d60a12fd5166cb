"""Stage 6 — runtime: load the C++ runtime library and wrap command streams in runtime modules.

The library (libtvm_npu_runtime.so, built by CMake from src/) holds the stream parser, the reference
NPU and the tvm-ffi module of kind "npu". Loading it registers "runtime.NPUModuleCreate" and the loader
"ffi.Module.load_from_bytes.npu", which `tvm.runtime.load_module` needs for exported artifacts.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import tvm_ffi

from ..contract.errors import NPUError
from .artifact import elf_problem, verified_payload
from .loading import load_unpinned

_LIB = None  # the loaded library, a cache: loading is idempotent, so two threads racing here are harmless
_LIB_NAME = "libtvm_npu_runtime.so"


def library_path() -> Path:
    """Where the runtime library is: $TVM_NPU_RUNTIME_LIB, else the one installed with the package."""
    env = os.environ.get("TVM_NPU_RUNTIME_LIB")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "lib" / _LIB_NAME


def load_library() -> ctypes.CDLL:
    """Load the runtime library once (RTLD_GLOBAL, so its registrations are visible to TVM)."""
    global _LIB
    if _LIB is None:
        path = library_path()
        if not path.exists():
            raise NPUError(
                "ERR_BAD_STREAM", f"the tvm_npu runtime library is missing at {path}; reinstall with `pip install .`"
            )
        _LIB = ctypes.CDLL(str(path), ctypes.RTLD_GLOBAL)
    return _LIB


def _func(name: str):
    load_library()
    return tvm_ffi.get_global_func(name)


def create_module(symbol: str, blob: bytes):
    """A runtime module that runs `blob` on the reference NPU when `symbol` is called."""
    return _func("runtime.NPUModuleCreate")(symbol, bytes(blob))


def validate_stream(blob: bytes) -> dict:
    """Parse and validate a stream in C++; raises NPUError (ERR_BAD_STREAM, ...) when it is invalid."""
    return json.loads(_func("tvm_npu.runtime.validate_stream")(bytes(blob)))


def constant_weight_commands(blob: bytes) -> list[int]:
    """Indices of the CONV2D commands whose weights are the same bytes in every call (loaded from the
    weight region only): the fast kernels pack those once and never compare them again."""
    return [int(i) for i in _func("tvm_npu.runtime.constant_weight_commands")(bytes(blob))]


def resident_loads(blob: bytes) -> list[int]:
    """Indices of the DMA_LOADs of weights that a call on buffers its stream's previous call used skips:
    their SRAM bytes are untouched before them and unchanged after them, so they are still in place."""
    return [int(i) for i in _func("tvm_npu.runtime.resident_loads")(bytes(blob))]


def kernel_level() -> str:
    """The kernels the reference NPU runs: "ref" (src/kernels/ref), or the fast kernels at "portable",
    "avx2" or "avx512vnni". Default: the best this CPU supports, or $TVM_NPU_KERNELS. Every level gives
    the same bits."""
    return str(_func("tvm_npu.runtime.kernel_level")())


def set_kernel_level(name: str) -> str:
    """Run the reference NPU at kernel level `name` (lowered to what this CPU supports); returns the level
    now active."""
    return str(_func("tvm_npu.runtime.set_kernel_level")(name))


def best_kernel_level() -> str:
    """The highest kernel level this CPU supports."""
    return str(_func("tvm_npu.runtime.best_kernel_level")())


def threads() -> int:
    """Threads the fast kernels use ($TVM_NPU_THREADS, else the hardware concurrency)."""
    return int(_func("tvm_npu.runtime.threads")())


def set_threads(n: int) -> int:
    """Use `n` threads (1 runs on the calling thread only). Results do not depend on it."""
    return int(_func("tvm_npu.runtime.set_threads")(n))


def weight_sharing() -> bool:
    """Whether NPU modules created from now on share one copy of identical weight regions (the runtime's
    weight pool, src/runtime/weight_pool.h; default on, $TVM_NPU_SHARE_WEIGHTS=0 starts it off)."""
    return bool(_func("tvm_npu.runtime.weight_sharing")())


def set_weight_sharing(on: bool) -> None:
    """Share identical weight regions between the NPU modules created from now on (True, the default) or
    give each its own copy (False: to measure what sharing saves). Results do not depend on it."""
    _func("tvm_npu.runtime.set_weight_sharing")(bool(on))


def weight_pool() -> dict:
    """{"regions", "bytes"}: the weight regions alive in this process's pool, each copy counted once."""
    return json.loads(_func("tvm_npu.runtime.weight_pool")())


def weights_memory(module) -> dict:
    """{"bytes", "id"} of an NPU module's weight region: modules sharing one copy give the same id."""
    return json.loads(module["weights_memory"]())


def npu_modules(lib) -> list:
    """Every NPU runtime module reachable from a VirtualMachine, an Executable or a library.

    Pass the VirtualMachine to read profiles: it runs its own (re-loaded) copy of the modules.
    """
    lib = getattr(lib, "module", None) or getattr(lib, "mod", None) or lib
    found, todo, seen = [], [lib], set()
    while todo:
        mod = todo.pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        if mod.kind == "npu":
            found.append(mod)
        todo.extend(mod.imports)
    return found


def profile_of(module) -> dict:
    """The per-call statistics an NPU runtime module keeps (see docs/npu.md section 5)."""
    return json.loads(module["get_profile"]())


def saturated_inputs(lib) -> int:
    """How many finite float32 input values beyond the fp16 range (abs above 65504) the NPU modules of
    `lib` (a VirtualMachine, see `npu_modules`) saturated to +-65504 as they staged them, over every
    call since they were loaded or their profile reset (docs/npu.md section 2)."""
    return sum(sum(profile_of(m)["total"]["saturated_inputs"]) for m in npu_modules(lib))


def clamped_inputs(lib) -> int:
    """How many float32 input values the quantized (int8 / int16) staging of the NPU modules of `lib` clamped
    to the dtype's range (NaN and +-inf included), over every call since they were loaded or their profile
    reset (docs/npu.md section 2: per input in each module's `"clamped_inputs"`)."""
    return sum(sum(profile_of(m)["total"]["clamped_inputs"]) for m in npu_modules(lib))


def load_module(path: str | os.PathLike, verify: bool = True):
    """`tvm.runtime.load_module` for a library written by `tvm_npu.export_library`, after checking its
    integrity trailer (runtime/artifact.py: the SHA-256 of every byte) and that the file holds every
    byte its ELF headers point to.

    The dynamic loader trusts the file: a truncated library ends the process with SIGBUS inside
    `dlopen`, a flipped byte in its relocations with SIGSEGV, before any runtime could refuse it.
    Raises NPUError(ERR_BAD_ARTIFACT) instead. `verify=False` loads a library exported without the
    trailer (plain `ex.export_library`), with the ELF check only; a damaged command stream inside it is
    still refused by the runtime's own checks (CRC, version: ERR_BAD_STREAM).

    Two differences from `tvm.runtime.load_module` (loading.py): the library is unloaded once the
    last reference to what it returns is dropped (TVM's keeps every loaded library for the rest of the
    process), and a path re-exported with other contents since an earlier load in this process is loaded
    as the new library, not as the earlier one that `dlopen` would return for the same name.
    """
    if not isinstance(path, str | os.PathLike):
        raise NPUError("ERR_BAD_ARTIFACT", f"load_module takes a library's path, not {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise NPUError("ERR_BAD_ARTIFACT", f"no library at {path}")
    data = path.read_bytes()
    problem = elf_problem(verified_payload(path, data, verify))
    if problem:
        raise NPUError(
            "ERR_BAD_ARTIFACT",
            f"{path} is not a complete shared library ({problem}); "
            "export the model again with tvm_npu.export_library(ex, path)",
        )
    load_library()  # the loader of the "npu" modules inside the artifact
    import tvm  # noqa: F401 - TVM's runtime registers the other loaders (relax.VMExecutable's); tvm imports us at start-up

    return load_unpinned(path, data)
