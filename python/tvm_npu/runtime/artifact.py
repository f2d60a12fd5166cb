"""The integrity trailer of an exported library, checked before the library reaches `dlopen`.

The dynamic loader trusts a shared library's bytes: a flipped byte in its relocations or dynamic
section ends the process with SIGSEGV inside `dlopen`, a truncated file with SIGBUS, and a flipped
byte in its data may load and compute something else. So `export_library` appends a trailer after
the ELF image (the loader reads only what the ELF headers point to, never the bytes after the last
section) and `load_module`, `tvm-npu run` and the C++ `host::Model` (include/tvm_npu/artifact.h)
verify it first:

    offset from the trailer's start   bytes  field
    0                                  8      magic "NPU-SEAL"
    8                                  4      format version (1), little-endian
    12                                 4      reserved, 0
    16                                 8      payload bytes: the file's size without the trailer
    24                                 32     SHA-256 of the payload

Any mismatch (a wrong digest or length, a truncated file that lost its trailer, a library exported by
plain `ex.export_library`, which writes none) is NPUError(ERR_BAD_ARTIFACT) saying what to do.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from ..contract.errors import NPUError
from .files import replacing

MAGIC = b"NPU-SEAL"  # not "NPUS...": the command stream's magic, found in artifacts by it
VERSION = 1
_TRAILER = struct.Struct("<8sIIQ32s")
TRAILER_BYTES = _TRAILER.size  # 56

_UNVERIFIED = (
    "to load a library you trust that was exported without the trailer (plain ex.export_library), "
    "pass verify=False to tvm_npu.load_module (tvm-npu run --no-verify, npu_host --no-verify)"
)


def trailer(payload: bytes) -> bytes:
    """The trailer that seals `payload` (the whole library as the linker wrote it)."""
    return _TRAILER.pack(MAGIC, VERSION, 0, len(payload), hashlib.sha256(payload).digest())


def export_library(ex, path: str | os.PathLike, **kwargs) -> Path:
    """`ex.export_library(path, **kwargs)`, sealed with the integrity trailer that `tvm_npu.load_module`,
    `tvm-npu run` and the C++ host app check before they load the library.

    The library is written to a temporary file next to `path` and renamed onto it once sealed
    (runtime/files.py), so an interrupted export leaves no partial file at `path`; a failed write is
    NPUError(ERR_INVALID_CONFIG) naming the path and the reason.
    """
    _check_exportable(ex, path)
    path = Path(path)
    with replacing(path) as tmp:
        try:
            ex.export_library(str(tmp), **kwargs)
        except RuntimeError as err:
            if "SaveToBytes" not in str(err):
                raise
            raise NPUError(
                "ERR_INVALID_CONFIG",
                "this model was loaded from a library file, which TVM cannot write again: copy that file "
                "(shutil.copy), or export the executable tvm_npu.build returned",
            ) from None
        seal = trailer(tmp.read_bytes())
        with open(tmp, "ab") as f:
            f.write(seal)
    return path


def _check_exportable(ex, path) -> None:
    """NPUError(ERR_INVALID_CONFIG) for an `ex` that is not a built executable or a `path` that is not
    a path."""
    import tvm  # pylint: disable=import-outside-toplevel  (the runtime loads before TVM)

    if not isinstance(path, str | os.PathLike):
        raise NPUError("ERR_INVALID_CONFIG", f"export_library takes a file path, not {type(path).__name__}")
    if type(ex).__name__ == "LLM":
        raise NPUError("ERR_INVALID_CONFIG", "an LLM writes its own artifact: call lm.export_library(path)")
    if not callable(getattr(ex, "export_library", None)) or isinstance(ex, tvm.IRModule):
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f'export_library takes what tvm_npu.build or tvm.compile(..., target="npu") returns, not '
            f"{type(ex).__name__}: build the model first",
        )


def verified_payload(path: Path, data: bytes, verify: bool = True) -> bytes:
    """The library image inside `data` (the bytes of `path`) once its trailer checks out; raises
    NPUError(ERR_BAD_ARTIFACT) when it does not. `verify=False` skips the trailer (a sealed file's
    trailer is still stripped) and only the ELF check below protects `dlopen`."""
    sealed = len(data) >= TRAILER_BYTES and data[-TRAILER_BYTES:].startswith(MAGIC)
    if not sealed:
        if verify:
            raise NPUError(
                "ERR_BAD_ARTIFACT",
                f"{path} ({len(data)} bytes) ends without tvm_npu's integrity trailer (truncated, or not "
                f"written by tvm_npu.export_library): export the model again with "
                f"tvm_npu.export_library(ex, path) (or `tvm-npu compile`); {_UNVERIFIED}",
            )
        return data
    magic, version, reserved, length, digest = _TRAILER.unpack(data[-TRAILER_BYTES:])
    payload = data[:-TRAILER_BYTES]
    if not verify:
        return payload
    again = "the file is damaged: export the model again with tvm_npu.export_library(ex, path), or copy it again"
    if version != VERSION or reserved != 0:
        raise NPUError(
            "ERR_BAD_ARTIFACT",
            f"{path}: integrity trailer version {version} (reserved word {reserved}); this tvm_npu reads "
            f"version {VERSION} with a zero reserved word; {again}",
        )
    if length != len(payload):
        raise NPUError(
            "ERR_BAD_ARTIFACT",
            f"{path}: the integrity trailer describes {length} bytes of library, the file holds {len(payload)}; "
            f"{again}",
        )
    if hashlib.sha256(payload).digest() != digest:
        raise NPUError("ERR_BAD_ARTIFACT", f"{path}: SHA-256 of the library disagrees with its trailer; {again}")
    return payload


def elf_problem(data: bytes) -> str | None:
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
