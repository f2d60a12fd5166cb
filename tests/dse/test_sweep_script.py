"""`tvm_npu.sweep` from a plain script, and a sweep whose workers die (issue 32).

Spawned workers import the main script again: a script that calls sweep() outside a main guard used to
fail every row with BrokenProcessPool, print the children's tracebacks and exit 0 with an empty front.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import subprocess
import sys
import textwrap
from concurrent.futures.process import BrokenProcessPool

import onnx
import pytest

import tvm_npu
from tvm_npu.dse import sweeper
from tvm_npu.tools import cli

GRID = 'mac="16x16,32x32", sram=["512KiB"], ddr_bw="8", plots=False'


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep_script") / "model.onnx"
    onnx.save(tvm_npu.models.small_cnn(), str(path))
    return path


def _script(folder, body: str):
    (folder / "script.py").write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "script.py"], cwd=folder, capture_output=True, text=True, timeout=300)


def test_unguarded_script_sweeps_in_threads_with_a_warning(model, tmp_path):
    (tmp_path / "model.onnx").write_bytes(model.read_bytes())
    proc = _script(
        tmp_path,
        f"""
        import tvm_npu

        res = tvm_npu.sweep("model.onnx", {GRID}, out="out", progress=False)
        print("rows", [(r["name"], r["feasible"], r["cycles"]) for r in res.rows])
        """,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runs its estimates in threads" in proc.stderr and "Traceback" not in proc.stderr
    rows = ast.literal_eval(proc.stdout.split("rows ", 1)[1].strip())
    # The same configurations estimated here, in this process, give the same cycles.
    mod = tvm_npu.from_onnx(str(model))
    want = [
        tvm_npu.estimate(
            mod, tvm_npu.NPU_REF.replace(mac_rows=n, mac_cols=n, sram_bytes=512 << 10, ddr_bytes_per_cycle=8)
        )["cycles"]
        for n in (16, 32)
    ]
    assert [r[1] for r in rows] == [True, True] and [r[2] for r in rows] == want


def test_workers_that_die_are_a_coded_error_naming_the_guard(model, tmp_path):
    (tmp_path / "model.onnx").write_bytes(model.read_bytes())
    proc = _script(
        tmp_path,
        f"""
        import concurrent.futures as cf, multiprocessing
        import tvm_npu

        pool = cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
        res = tvm_npu.sweep("model.onnx", {GRID}, out="out", progress=False, executor=pool)
        print("returned")
        """,
    )
    assert proc.returncode != 0 and "returned" not in proc.stdout
    assert "NPUError: ERR_INVALID_CONFIG" in proc.stderr and 'if __name__ == "__main__":' in proc.stderr
    own = [line for line in proc.stderr.splitlines() if "autoload" not in line]
    assert len(own) < 30, proc.stderr  # was 140 lines of child tracebacks


class _DeadPool(cf.Executor):
    def submit(self, fn, *args, **kwargs):
        fut = cf.Future()
        fut.set_exception(BrokenProcessPool("A process in the process pool was terminated abruptly"))
        return fut


def test_cli_sweep_exits_non_zero_when_workers_die(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tvm_npu.dse.run, "default_executor", lambda jobs: _DeadPool())
    monkeypatch.setattr(sweeper, "_unguarded_script_call", lambda: False)
    rc = cli.main(
        [
            "sweep",
            str(model),
            "--mac",
            "16x16",
            "--sram",
            "512KiB",
            "--ddr-bw",
            "8",
            "--no-plots",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "ERR_INVALID_CONFIG" in err and "__main__" in err, err


@pytest.mark.parametrize(
    "src, guarded",
    [
        ('if __name__ == "__main__":\n    x = 1\n', True),
        ("if '__main__' == __name__:\n    x = 1\n", True),
        ('if __name__ != "__main__":\n    x = 1\n', False),
        ("if True:\n    x = 1\n", False),
    ],
)
def test_main_guard_forms(src, guarded):
    assert sweeper._is_main_guard(ast.parse(src).body[0]) is guarded
