"""Loading an exported library with `dlopen`, for `load_module`: unloaded when dropped, and never an
earlier library of the same path.

`tvm.runtime.load_module` is `tvm_ffi.load_module(path)`, whose keep_module_alive=True adds every loaded
module to tvm-ffi's process-wide registry (ModuleGlobals): a library loaded again and again stays
mapped and its whole module tree (the NPU modules, their weights and packed-weight caches) alive for
good. A library tvm_npu exports is TVM's generated code and registers no global function, which is
what that registry guards, so it is loaded with keep_module_alive=False: unloaded once the last
module, function or VM of it is dropped.

`dlopen` finds a library that is already loaded by its name before it opens the file, so loading a path
that was re-exported with another model since an earlier load in this process would return the earlier
library while it is still loaded: the old model's answers, without an error. `load_unpinned` remembers
the SHA-256 of the bytes loaded under each name, and loads different bytes under a name through a
private copy of them (a new name).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from pathlib import Path

from ..contract.errors import NPUError

_LOADED: dict[str, bytes] = {}  # real path -> SHA-256 of the bytes dlopen loaded under that name
_LOCK = threading.Lock()  # two threads loading one path agree on which bytes own its name


def load_unpinned(path: Path, data: bytes):
    """The module tree of the library at `path` whose bytes are `data` (read and checked by the caller),
    loaded so that it is unloaded when dropped, and under a fresh name when other bytes were loaded
    from `path` before."""
    import tvm_ffi  # pylint: disable=import-outside-toplevel  (tvm_npu loads before TVM is imported)

    name = os.path.realpath(path)
    digest = hashlib.sha256(data).digest()
    if Path(name).suffix != ".so":  # tvm-ffi picks its loader by the suffix: "lib.so.1", "model" have none
        return _load_copy(Path(name), data, _checked(tvm_ffi.load_module, path), "has no .so suffix")
    with _LOCK:
        first = _LOADED.setdefault(name, digest)
    if first == digest:
        return _checked(tvm_ffi.load_module, path)(name, keep_module_alive=False)
    why = "holds another library than the one loaded from that path earlier in this process"
    return _load_copy(Path(name), data, _checked(tvm_ffi.load_module, path), why)


def _checked(load, path: Path):
    """`load`, its failure (a file dlopen refuses: an executable, another architecture's library)
    NPUError(ERR_BAD_ARTIFACT) naming `path`."""

    def run(name, **kwargs):
        try:
            return load(name, **kwargs)
        except NPUError:  # the runtime's own (a damaged command stream: ERR_BAD_STREAM)
            raise
        except RuntimeError as err:
            lines = [line for line in str(err).splitlines() if line.strip()]
            raise NPUError(
                "ERR_BAD_ARTIFACT",
                f"{path} could not be loaded as a library ({lines[-1] if lines else type(err).__name__}): "
                "give a library written by tvm_npu.export_library or `tvm-npu compile`",
            ) from None

    return run


def _load_copy(path: Path, data: bytes, load, why: str):
    """`data` loaded from a new file (removed again once loaded: the mapping stays), next to `path`
    or else in the temporary folder; `why` says why it cannot be loaded from `path` itself."""
    reasons, refused = [], []
    for folder in (path.parent, Path(tempfile.gettempdir())):
        try:
            fd, copy = tempfile.mkstemp(suffix=".so", prefix=f".{path.stem}.", dir=folder)
        except OSError as err:
            reasons.append(f"{folder}: {err.strerror or err}")
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return load(copy, keep_module_alive=False)
        except OSError as err:  # a full disk
            reasons.append(f"{folder}: {err.strerror or err}")
        except NPUError as err:  # a noexec folder (dlopen fails), or a file dlopen refuses anywhere
            reasons.append(f"{folder}: {err}")
            refused.append(err)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(copy)
    if len(refused) == 2:  # dlopen refused it in both folders: the file, not a folder (a program, say)
        raise refused[-1]
    raise NPUError(
        "ERR_INVALID_CONFIG",
        f"{path} {why}, so it is loaded from a private copy, which failed ({'; '.join(reasons)}): "
        f"export the model to a new path ending in .so, or set TMPDIR to a writable folder that allows "
        f"executables",
    )
