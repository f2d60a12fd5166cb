"""Design-space exploration: how much SRAM, MAC array and DDR bandwidth a model needs.

The sweep's driver; each stage is a file:

    grid (sweep_grid.py)  -> estimate every configuration in parallel, resumably (sweep_run.py,
    each one tvm_npu.estimate: the compiler + the cost model, nothing runs)
    -> energy, area, Pareto front, table (sweep_table.py, energy.py) -> plots (sweep_plots.py)

`tvm-npu sweep model.onnx --mac 16x16,32x32 --sram 512KiB,2MiB --ddr-bw 8,16` is the command line;
docs/dse.md says what the numbers mean and how to run a sweep on Dask or Ray.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import multiprocessing
import os
import sys
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..backend.plan.energy import DEFAULT, DEFAULT_AREA, AreaModel, EnergyModel
from ..contract.config import NPUConfig, get_config
from ..contract.errors import NPUError
from ..runtime.files import write_error
from . import grid as sweep_grid
from . import plots as sweep_plots
from . import run as sweep_run
from . import sustained as sweep_sustained
from . import table as sweep_table


@dataclass
class SweepResult:
    """The sweep's table (`rows`, one dict per configuration in grid order) and the files it wrote."""

    rows: list
    folder: Path
    files: list = field(default_factory=list)
    seconds: float = 0.0
    estimated: int = 0  # configurations estimated by this call (the rest came from the results file)

    @property
    def pareto(self) -> list[str]:
        return [r["name"] for r in self.rows if r.get("pareto")]

    def table(self) -> str:
        return sweep_table.text(self.rows)


def sweep(
    model,
    mac="16x16,32x32,64x64",
    sram="512KiB,1MiB,2MiB,4MiB",
    ddr_bw="8,16,32",
    out: str | Path = "npu_sweep",
    base: NPUConfig | str | None = None,
    executor: cf.Executor | None = None,
    jobs: int | None = None,
    progress: bool = True,
    plots: bool = True,
    energy: EnergyModel = DEFAULT,
    area: AreaModel = DEFAULT_AREA,
    sustain: dict | None = None,
) -> SweepResult:
    """Estimate `model` on every combination of MAC array, SRAM size and DDR bandwidth.

    Parameters
    ----------
    model : str or Path or onnx.ModelProto
        The ONNX model (a ModelProto is saved as `<out>/model.onnx` for the workers).
    mac, sram, ddr_bw : str or list
        Swept values, e.g. "16x16,32x32", ["512KiB", "2MiB"], "8,16,32" (sweep_grid.py).
    out : str or Path
        Folder for results.jsonl (resumable), sweep.csv and the plots.
    base : NPUConfig or str, optional
        The configuration whose other fields every point keeps (default "npu-ref").
    executor : concurrent.futures.Executor, optional
        Where to estimate (anything with `submit` returning a concurrent.futures.Future); by default a
        process pool of `jobs` workers (default: all cores), shut down at the end.
    progress, plots : bool
        Show a progress bar; write the PNG plots.
    energy, area : EnergyModel, AreaModel
        The constants of the energy and area estimates (energy.py).
    sustain : dict, optional
        The sustained run every feasible configuration gets (dse/sustained.py; keys fps, seconds,
        policy, thermal, cpu_ms; default a 30 fps source for 60 s, "throttle", "phone", no CPU part).

    Returns
    -------
    SweepResult
        `.rows` (the table, with the sustained objectives), `.pareto`, `.table()`, `.files`.
        Configurations that the contract forbids or that the model does not fit are rows with
        `feasible` False, `error_code` and `reason`.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        sys.exit(_GUARD_EXIT)  # a spawned worker importing a script that calls sweep() unguarded: no pool in it
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS):
        raise NPUError("ERR_INVALID_CONFIG", f"jobs={jobs!r}: give 1 to {MAX_JOBS} worker processes (None: all cores)")
    start = time.perf_counter()
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file of that name, a read-only parent
        raise write_error(folder, err) from None
    model_path = _model_file(model, folder)
    base_cfg = get_config(base)
    points = sweep_grid.grid(base_cfg, mac, sram, ddr_bw)
    results = folder / "results.jsonl"
    fp = sweep_run.fingerprint(model_path, base_cfg)
    stored = set(sweep_run.load_rows(results, fp))
    threads = None
    if executor is None and _unguarded_script_call():
        warnings.warn(_THREADS_WARNING, stacklevel=2)
        executor = threads = cf.ThreadPoolExecutor(jobs or os.cpu_count() or 1)
    try:
        rows = sweep_run.run(points, model_path, results, fp, executor, jobs, progress)
    finally:
        if threads is not None:
            threads.shutdown(cancel_futures=True)
    _raise_if_workers_died(rows)
    rows = sweep_sustained.add(sweep_table.finish(rows, energy, area), sustain)
    sweep_table.write_csv(rows, folder / "sweep.csv")
    files = [results, folder / "sweep.csv"]
    if plots:
        files += sweep_plots.write_plots(rows, folder, Path(model_path).stem)
    estimated = sum(p.name not in stored for p in points)
    return SweepResult(rows, folder, files, time.perf_counter() - start, estimated)


def _model_file(model, folder: Path) -> str:
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise NPUError(
                "ERR_INVALID_MODEL", f"model file {str(path)!r} does not exist; give the path of an ONNX model"
            )
        from ..frontend.onnx import read_model  # pylint: disable=import-outside-toplevel

        read_model(path)  # once here, not as the same error in every row: ERR_INVALID_MODEL if it is no model
        return str(path.resolve())
    import onnx

    if isinstance(model, onnx.ModelProto):
        path = folder / "model.onnx"
        onnx.save(model, str(path))
        return str(path.resolve())
    raise NPUError(
        "ERR_INVALID_MODEL", f"sweep takes an ONNX file path or an onnx.ModelProto, not {type(model).__name__}"
    )


MAX_JOBS = 64  # worker processes: each imports TVM (~0.3 GB)
_GUARD = 'put the sweep under `if __name__ == "__main__":` in the script'
_GUARD_EXIT = f"tvm_npu.sweep: a worker process ran the main script again and stopped; {_GUARD}"
_THREADS_WARNING = (
    "tvm_npu.sweep runs its estimates in threads of this process: the main script calls it outside "
    '`if __name__ == "__main__":`, and spawned worker processes would run the whole script again; '
    f"{_GUARD} for a process pool"
)
# Rows of workers that died (run.py records the exception's type and message as the row's reason).
_DEAD = ("BrokenProcessPool", "BrokenExecutor", "BrokenThreadPool")


def _raise_if_workers_died(rows: list[dict]) -> None:
    """A sweep whose workers died has no result: an error, not a table of INTERNAL rows."""
    dead = [r for r in rows if r.get("error_code") == "INTERNAL" and str(r.get("reason", "")).startswith(_DEAD)]
    if dead:
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"{len(dead)} of {len(rows)} sweep configurations lost their worker process ({dead[0]['reason']}). "
            f"A worker that dies at start is usually a script without a main guard: {_GUARD}, or pass "
            "executor=concurrent.futures.ThreadPoolExecutor(); the rows estimated so far are kept in results.jsonl",
        )


def _unguarded_script_call() -> bool:
    """True when the main script calls this at its top level outside `if __name__ == "__main__":` (spawned
    workers import the main script again, so a process pool cannot start from there)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return False  # `python -c`, a REPL, a notebook: spawn does not run the main module again
    frame: types.FrameType | None = sys._getframe(1)
    line = None
    while frame is not None:  # the script's own top-level line that led here (the outermost one)
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>" and frame.f_code.co_filename == path:
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return False
    try:
        tree = ast.parse(Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return False
    return not any(_is_main_guard(n) and n.lineno <= line <= (n.end_lineno or n.lineno) for n in tree.body)


def _is_main_guard(node: ast.stmt) -> bool:
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1):
        return False
    sides = [node.test.left, node.test.comparators[0]]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    consts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and consts == {"__main__"} and isinstance(node.test.ops[0], ast.Eq)
