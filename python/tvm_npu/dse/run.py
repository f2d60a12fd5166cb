"""Sweep stage 2 — estimate every configuration on a pluggable executor, resumably.

The executor is anything with concurrent.futures.Executor's `submit(fn, *args)` returning a
concurrent.futures.Future: a ProcessPoolExecutor by default (spawned workers: TVM's threads do not
survive a fork), a ThreadPoolExecutor, or a distributed engine's executor (docs/dse.md: Dask's
`Client.get_executor()`, Ray through `RayExecutor` below). A task carries the model's path, not the
model: each worker imports it once and keeps it, so a distributed worker needs the same file path.

Results are one JSON line per configuration, appended by this (the submitting) process as each one
finishes, so a sweep that is stopped resumes where it stopped: rows whose fingerprint (the model's
bytes, the base configuration, tvm_npu's version) matches are not estimated again.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import time
from pathlib import Path

from ..contract.config import NPUConfig
from ..contract.errors import NPUError
from .grid import Point

# A cache of immutable things, per worker: path -> ((mtime, size), IRModule). Threads of a pool may both
# import a model that is not in it yet; either module is the same model, and a dict store is atomic.
# (Estimates in a thread pool run in parallel: a build keeps no module state, and the one part of TVM
# that is not thread-safe takes ir.graph.BLOCK_BUILDER_LOCK.)
_MODELS: dict = {}


def _model(path: str):
    from ..frontend.onnx import from_onnx

    stamp = (os.stat(path).st_mtime_ns, os.stat(path).st_size)
    if path not in _MODELS or _MODELS[path][0] != stamp:
        _MODELS[path] = (stamp, from_onnx(path))
    return _MODELS[path][1]


def evaluate(model_path: str, point_name: str, values: dict, config: NPUConfig) -> dict:
    """One configuration's row (runs in a worker): the estimate, or why the model does not compile."""
    from .estimator import estimate

    row = {"name": point_name, **values, "config": config.to_dict()}
    start = time.perf_counter()
    try:
        row.update(feasible=True, **estimate(_model(model_path), config))
    except NPUError as err:  # e.g. ERR_SRAM_OVERFLOW: a layer that fits no tiling of this SRAM
        row.update(feasible=False, error_code=err.code, reason=_reason(err))
    else:
        if not row["regions"]:  # 0 cycles would be a lie, not a design point: nothing ran on the NPU
            code, n = max(row["cpu_codes"].items(), key=lambda kv: kv[1], default=("NPU_E_UNSUPPORTED_OP", 0))
            row.update(
                feasible=False,
                error_code=code,
                reason=f"no op of the model runs on the NPU ({row['ops']} op(s) on the CPU, {n} "
                f"of them {code}; `tvm-npu report` says why)",
            )
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row


def _reason(err: NPUError) -> str:
    return str(err).removeprefix(f"{err.code}: ")  # the row has the code apart


def fingerprint(model_path: str, base: NPUConfig) -> str:
    """What a stored row depends on besides its own configuration."""
    h = hashlib.sha256(Path(model_path).read_bytes())
    h.update(json.dumps(base.to_dict(), sort_keys=True).encode())
    h.update(importlib.metadata.version("tvm_npu").encode())  # a new compiler may plan differently
    return h.hexdigest()[:16]


def load_rows(path: Path, fp: str) -> dict:
    """Stored rows of this fingerprint, by configuration name (a torn last line is skipped)."""
    rows = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("fingerprint") == fp and row.get("error_code") != "INTERNAL":
                rows[row["name"]] = row
    return rows


class RayExecutor:
    """Ray has no concurrent.futures Executor, but a task's `ObjectRef.future()` is a Future: enough for
    `run`. Call `ray.init(...)` first (docs/dse.md)."""

    def submit(self, fn, *args):
        import ray

        return ray.remote(fn).remote(*args).future()


def default_executor(jobs: int | None) -> cf.Executor:
    return cf.ProcessPoolExecutor(
        max_workers=jobs or os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn")
    )


def run(
    points: list[Point],
    model_path: str,
    results: Path,
    fp: str,
    executor: cf.Executor | None = None,
    jobs: int | None = None,
    progress: bool = True,
) -> list[dict]:
    """Rows for every point, in grid order: stored ones reused, the rest estimated on `executor`."""
    from tqdm import tqdm

    done = load_rows(results, fp)
    results.parent.mkdir(parents=True, exist_ok=True)
    todo = [p for p in points if p.name not in done]
    own = executor is None and any(p.config is not None for p in todo)
    pool = default_executor(jobs) if own else executor
    with (
        open(results, "a") as out,
        tqdm(
            total=len(points), initial=len(points) - len(todo), unit="config", desc="sweep", disable=not progress
        ) as bar,
    ):

        def record(row):
            row["fingerprint"] = fp
            if row.get("error_code") != "INTERNAL":  # a bug, not a result: estimated again next time
                out.write(json.dumps(row) + "\n")
                out.flush()
            done[row["name"]] = row
            bar.update(1)

        try:
            futures = {}
            for p in todo:
                if p.config is None:  # the contract forbids this configuration: nothing to compile
                    record(
                        {
                            "name": p.name,
                            **p.values,
                            "config": None,
                            "feasible": False,
                            "error_code": p.error.code,
                            "reason": _reason(p.error),
                            "seconds": 0.0,
                        }
                    )
                else:
                    futures[pool.submit(evaluate, model_path, p.name, p.values, p.config)] = p
            for fut in cf.as_completed(futures):
                p = futures[fut]
                try:
                    record(fut.result())
                except Exception as err:  # noqa: BLE001  a worker that died must not lose the other rows
                    record(
                        {
                            "name": p.name,
                            **p.values,
                            "config": p.config.to_dict(),
                            "feasible": False,
                            "error_code": "INTERNAL",
                            "reason": f"{type(err).__name__}: {err}",
                            "seconds": 0.0,
                        }
                    )
        finally:
            if own:
                pool.shutdown(cancel_futures=True)
    return [done[p.name] for p in points]
