"""Stage 6 — runtime: load the C++ runtime library and wrap command streams in runtime modules.

The library (libtvm_npu_runtime.so, built by CMake from src/) holds the stream parser, the reference
NPU and the tvm-ffi module of kind "npu". Loading it registers "runtime.NPUModuleCreate" and the loader
"ffi.Module.load_from_bytes.npu", which `tvm.runtime.load_module` needs for exported artifacts.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
from pathlib import Path

import tvm_ffi

from ..contract.errors import NPUError

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


def load_module(path: str | os.PathLike):
    """`tvm.runtime.load_module` for an exported artifact, after checking that the file holds every
    byte its ELF headers point to.

    The dynamic loader maps a shared library's segments without comparing them with the file's size:
    a truncated artifact (an interrupted copy or download) ends the process with SIGBUS inside
    `dlopen`, before any runtime could refuse it. Raises NPUError(ERR_BAD_STREAM) instead; a damaged
    command stream inside an intact file is refused by the runtime's own checks (CRC, version).
    """
    path = Path(path)
    if not path.is_file():
        raise NPUError("ERR_BAD_STREAM", f"no artifact at {path}")
    problem = _elf_problem(path.read_bytes())
    if problem:
        raise NPUError(
            "ERR_BAD_STREAM",
            f"{path} is not a complete shared library ({problem}); export the model again with ex.export_library",
        )
    load_library()  # the loader of the "npu" modules inside the artifact
    import tvm  # pylint: disable=import-outside-toplevel  (tvm imports this package at start-up)

    return tvm.runtime.load_module(str(path))


def _elf_problem(data: bytes) -> str | None:
    """Why `data` is not a whole 64-bit little-endian ELF file, or None (program and section header
    tables, and every segment's file bytes, inside the file)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return f"{len(data)} bytes without a 64-bit little-endian ELF header"
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    if phentsize < 56 or phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        return f"its header tables end past the file's {len(data)} bytes"
    for i in range(phnum):
        entry = phoff + i * phentsize
        (offset,), (filesz,) = struct.unpack_from("<Q", data, entry + 8), struct.unpack_from("<Q", data, entry + 32)
        if offset + filesz > len(data):
            return f"segment {i} ends at byte {offset + filesz}, the file has {len(data)}"
    return None
