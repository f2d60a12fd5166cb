"""`tvm-npu profile` shows SRAM utilization per layer and for the run, and warns about fragmentation
in its own words (tools/sram_profile.py)."""

import re
import warnings

import numpy as np
import onnx

from builders import residual_block
from tvm_npu.contract import config as config_mod
from tvm_npu.contract.errors import SRAMFragmentationWarning
from tvm_npu.models import small_cnn
from tvm_npu.tools import commands
from tvm_npu.tools.cli import main

LINE = re.compile(
    r"SRAM: peak (\d+) of (\d+) B \(([\d.]+)%\), time-weighted ([\d.]+)%; at the peak (\d+) B free, "
    r"largest free block (\d+) B"
)


def test_profile_prints_sram_columns_and_the_run_line(tmp_path, capsys):
    onnx.save(small_cnn(seed=0), str(tmp_path / "model.onnx"))
    assert main(["profile", str(tmp_path / "model.onnx")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[-4:] == ["SRAM", "peak", "SRAM", "avg"]
    peak, size, pct, tw, free, largest = LINE.search(out).groups()
    highest = int(re.search(r"SRAM peak (\d+) B,", out).group(1))  # the planner's highest SRAM byte in use
    # Bytes live never exceed the highest byte in use; on npu-ref (2 MiB) nothing is split up.
    assert int(size) == 2**21 and 0 < int(peak) <= highest
    assert float(pct) == round(100 * int(peak) / 2**21, 1)
    assert 0 < float(tw) <= float(pct)
    assert int(free) == int(largest) == 2**21 - int(peak)
    rows = [ln.split() for ln in lines[2:] if ln.startswith("npu")]
    assert rows and all(float(r[-2].rstrip("%")) <= float(pct) for r in rows)  # each layer's peak <= the run's
    assert "SRAM fragmentation" not in capsys.readouterr().err


def test_profile_warns_once_per_fragmented_layer(tmp_path, capsys, monkeypatch):
    # The residual block on a 32 KiB SRAM: two layers run smaller tiles than the cost model would pick
    # (tests/backend/test_sram_usage.py checks the numbers); the CLI prints each warning once, its way.
    mod, _ = residual_block(np.random.default_rng(0), c=8, hw=32)
    # The CLI takes preset names only: let "npu-small" stand for npu-ref with 32 KiB of SRAM here.
    small = config_mod.NPU_REF.replace(name="npu-small", sram_bytes=32768)
    monkeypatch.setitem(config_mod.PRESETS, "npu-small", small)
    monkeypatch.setattr(commands, "_import", lambda path: mod)
    (tmp_path / "m.onnx").write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["profile", str(tmp_path / "m.onnx"), "--config", "npu-small"]) == 0
    captured = capsys.readouterr()
    warned = [ln for ln in captured.err.splitlines() if "SRAM fragmentation" in ln]
    assert len(warned) == 2, captured.err
    assert all(ln.startswith("tvm-npu: warning: npu0: SRAM fragmentation: layer ") for ln in warned)
    assert not [w for w in caught if issubclass(w.category, SRAMFragmentationWarning)]  # not twice
    peak, size, *_ = LINE.search(captured.out).groups()
    assert int(size) == 32768 and int(peak) <= 32768
