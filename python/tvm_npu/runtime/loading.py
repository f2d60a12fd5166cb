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
    with _LOCK:
        first = _LOADED.setdefault(name, digest)
    if first == digest:
        return tvm_ffi.load_module(name, keep_module_alive=False)
    return _load_copy(Path(name), data, tvm_ffi.load_module)


def _load_copy(path: Path, data: bytes, load):
    """`data` loaded from a new file (removed again once loaded: the mapping stays), next to `path`
    or else in the temporary folder."""
    reasons = []
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
        except (OSError, RuntimeError) as err:  # a full disk; a noexec folder (dlopen fails)
            reasons.append(f"{folder}: {str(err).splitlines()[-1] if str(err) else type(err).__name__}")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(copy)
    raise NPUError(
        "ERR_INVALID_CONFIG",
        f"{path} holds another library than the one loaded from that path earlier in this process, and "
        f"the dynamic loader would return the earlier one; a private copy to load it from could not be "
        f"made ({'; '.join(reasons)}): export the model to a new path, or set TMPDIR to a writable folder "
        f"that allows executables",
    )
