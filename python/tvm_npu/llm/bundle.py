"""The LLM artifact: one file holding both compiled steps and the metadata, read by `tvm_npu.llm.load`.

It is an uncompressed tar (inspect it with `tar tf lm.so`) of

    llm.json      {"format": 1, "meta": the LLM's metadata (step info, prefill_len, config, placements,
                  region layers), "libraries": {"prefill": file, "decode": file}, "sha256": {file: digest}}
    decode.so     the decode step, written by tvm_npu.export_library (sealed with its integrity trailer)
    prefill.so    the prefill step (absent when one step model at seq_len 1 serves both)

Each library is checked twice on load: its SHA-256 against llm.json, then its own trailer by
`tvm_npu.load_module`. Anything that does not read back is NPUError(ERR_BAD_ARTIFACT). The two steps
are two libraries, each with its own copy of the weights, until the compiler emits both entry
functions into one module sharing them (issue 20, item 3).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from .. import runtime
from ..contract.errors import NPUError

FORMAT = 1
_AGAIN = "export it again with lm.export_library(path)"


def write_bundle(lm, path) -> Path:
    """Write `lm` (an LLM) to `path`: the libraries are exported next to it, then packed; the bundle is
    moved into place once complete, so an interrupted export leaves no partial file at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        names = {}
        for step, runner in lm._runners.items():
            if step == "prefill" and runner is lm._runners["decode"]:
                continue
            names[step] = f"{step}.so"
            runtime.export_library(runner.executable, Path(tmp) / names[step])
        index = {
            "format": FORMAT,
            "meta": lm.meta,
            "libraries": {"prefill": names.get("prefill", names["decode"]), "decode": names["decode"]},
            "sha256": {f: hashlib.sha256((Path(tmp) / f).read_bytes()).hexdigest() for f in names.values()},
        }
        packed = Path(tmp) / "bundle.tar"
        with tarfile.open(packed, "w") as tar:
            data = json.dumps(index, indent=1).encode()
            entry = tarfile.TarInfo("llm.json")
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
            for f in names.values():
                tar.add(Path(tmp) / f, arcname=f)
        os.replace(packed, path)
    return path


def read_bundle(path) -> tuple[dict, dict]:
    """(the LLM metadata, {step: loaded library}) of the bundle at `path`."""
    path = Path(path)
    if not path.is_file():
        raise NPUError("ERR_BAD_ARTIFACT", f"no LLM artifact at {path}")
    try:
        with tarfile.open(path, "r:") as tar, tempfile.TemporaryDirectory() as tmp:
            index = json.loads(tar.extractfile("llm.json").read())
            if index.get("format") != FORMAT:
                found = index.get("format")
                raise NPUError("ERR_BAD_ARTIFACT", f"{path}: LLM artifact format {found}, this tvm_npu reads {FORMAT}")
            loaded = {}
            names = set(index["sha256"])
            if not names <= {"prefill.so", "decode.so"} or not set(index["libraries"].values()) <= names:
                raise NPUError("ERR_BAD_ARTIFACT", f"{path}: llm.json names libraries {sorted(names)}; {_AGAIN}")
            for f, digest in index["sha256"].items():
                data = tar.extractfile(f).read()
                if hashlib.sha256(data).hexdigest() != digest:
                    raise NPUError("ERR_BAD_ARTIFACT", f"{path}: {f} disagrees with its SHA-256 in llm.json; {_AGAIN}")
                (Path(tmp) / f).write_bytes(data)
                loaded[f] = runtime.load_module(Path(tmp) / f)  # dlopen maps the file: deleting it after is safe
            libs = {step: loaded[f] for step, f in index["libraries"].items()}
            return index["meta"], libs
    except NPUError:
        raise
    except (tarfile.TarError, KeyError, ValueError, AttributeError, OSError) as err:
        raise NPUError(
            "ERR_BAD_ARTIFACT", f"{path} is not a complete LLM artifact ({type(err).__name__}: {err}); {_AGAIN}"
        ) from None
