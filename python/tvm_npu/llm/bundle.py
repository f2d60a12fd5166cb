"""The LLM artifact: ONE shared library holding both steps and the metadata, read by `tvm_npu.llm.load`.

`lm.export_library("lm.so")` writes the LLM's one VM executable (llm/one_library.py) with
`tvm_npu.export_library`, sealed with its integrity trailer (runtime/artifact.py). Inside it:

    prefill(input_ids, position, ...)   the prefill step (calls decode when one step model serves both)
    decode(input_ids, position, ...)    the decode step
    llm_meta() -> str                   the LLM's metadata as JSON: the step info, prefill bucket, NPU
                                        configuration, placements, region layers (`"format": 2`)

and the NPU region modules of both steps (`prefill_*`, `decode_*`), each carrying its weight region;
the runtime keeps one copy in memory of the weight regions the two steps share (docs/llm.md, "The
artifact"). The C++ host app (apps/host_app, `npu_host lm.so --prompt-ids ...`) reads the same file.

Format 1 (a tar of prefill.so, decode.so and llm.json) is no longer read: it is ERR_BAD_ARTIFACT
saying to export it again. Anything else that does not read back is ERR_BAD_ARTIFACT as well.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from pathlib import Path

import tvm
from tvm import relax

from .. import runtime
from ..contract.errors import NPUError
from ..runtime.artifact import verified_payload
from ..runtime.files import replacing, write_bytes
from .one_library import FORMAT, META_FUNCTION

_AGAIN = "export it again with lm.export_library(path)"


def write_bundle(lm, path) -> Path:
    """Write `lm` (an LLM) to `path` as one sealed library (moved into place once complete, so an
    interrupted export leaves no partial file at `path`). TVM picks what it writes by the name's suffix
    (".tar" would be a tar of object files), so a name not ending in ".so" is written as one, then
    renamed."""
    if not isinstance(path, str | os.PathLike):
        raise NPUError("ERR_INVALID_CONFIG", f"export_library takes a file path, not {type(path).__name__}")
    path = Path(path)
    source = getattr(lm, "artifact", None)
    if source is not None:  # loaded by tvm_npu.llm.load: TVM cannot write a loaded library, the file is it
        if not source.is_file():
            raise NPUError("ERR_BAD_ARTIFACT", f"{source}, which this LLM was loaded from, is gone: load it again")
        data = source.read_bytes()
        verified_payload(source, data)  # still the sealed artifact: ERR_BAD_ARTIFACT if not
        return write_bytes(path, data)
    if path.suffix == ".so":
        return runtime.export_library(lm.executable, path)
    # a failed write: NPUError(ERR_INVALID_CONFIG) naming the path and the reason (runtime/files.py)
    with replacing(path) as tmp, tempfile.TemporaryDirectory(dir=tmp.parent, prefix=f"{tmp.name}.") as folder:
        os.replace(runtime.export_library(lm.executable, Path(folder) / "lm.so"), tmp)
    return path


def read_bundle(path):
    """(the LLM metadata, the loaded library) of the artifact at `path`."""
    if not isinstance(path, str | os.PathLike):
        raise NPUError("ERR_BAD_ARTIFACT", f"llm.load takes the artifact's path, not {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise NPUError("ERR_BAD_ARTIFACT", f"no LLM artifact at {path}")
    if tarfile.is_tarfile(path):
        raise NPUError(
            "ERR_BAD_ARTIFACT",
            f"{path} is an LLM artifact of format 1 (a tar of two libraries), which this tvm_npu no longer "
            f"reads; {_AGAIN} (one library, format {FORMAT})",
        )
    if path.suffix == ".so":
        lib = runtime.load_module(path)  # the trailer and ELF checks: ERR_BAD_ARTIFACT when damaged
    else:  # TVM loads by the (real) name's suffix too: through a hard link named ".so"
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
            os.link(path, Path(tmp) / "lm.so")
            lib = runtime.load_module(Path(tmp) / "lm.so")  # dlopen keeps the file mapped
    try:
        meta = json.loads(str(relax.VirtualMachine(lib, tvm.cpu())[META_FUNCTION]()))
    except (AttributeError, KeyError, ValueError, RuntimeError) as err:
        raise NPUError(
            "ERR_BAD_ARTIFACT",
            f"{path} holds no readable LLM metadata ({META_FUNCTION}(): {type(err).__name__}): not written by "
            f"lm.export_library; {_AGAIN}",
        ) from None
    if meta.get("format") != FORMAT:
        raise NPUError(
            "ERR_BAD_ARTIFACT", f"{path}: LLM artifact format {meta.get('format')}, this tvm_npu reads {FORMAT}"
        )
    return meta, lib
