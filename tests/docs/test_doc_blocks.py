"""Every code block of README.md and docs/*.md runs as written (issue 32).

Each Markdown file's ```python / ```bash / ```sh blocks run in order in one fresh Python process (a
block may use what an earlier block of its file defined; shell blocks run with `bash -e`), in an empty
folder that holds the files the docs name as the user's own (the setup, `user_files` below):

- `model.onnx`: `tvm_npu.models.small_cnn()` (1x3x32x32 float32 -> 10 classes),
- `x.npy`: an input for it (seeded normal values),
- `model.so`: that model compiled for the NPU and exported with `tvm_npu.export_library`.

A block's `<!-- doc-test: expect "..." -->` strings must appear in its output. A block that cannot run
as written says why in `<!-- doc-test: skip (...) -->`; test_skipped_blocks_are_few lists them all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from doc_blocks import ROOT, blocks, doc_files, driver, ended, outputs

# The blocks that do not run (a cluster, a 48-minute fuzz campaign, a package install, a C++ build, a
# decoder export that needs the llm extra): few, each with its reason. Raise only with a reason.
MAX_SKIPPED = 16
TIMEOUT_S = 600


def _docs():
    params = []
    for path in doc_files():
        found = blocks(path)
        if any(not b.skip for b in found):
            marks = [pytest.mark.slow] if any(b.slow and not b.skip for b in found) else []
            params.append(pytest.param(path, id=str(path.relative_to(ROOT)), marks=marks))
    return params


@pytest.fixture(scope="session")
def user_files(tmp_path_factory) -> Path:
    """The files the docs' commands name as the user's: model.onnx, x.npy, model.so (made once)."""
    import onnx

    import tvm_npu

    folder = tmp_path_factory.mktemp("doc_user_files")
    onnx.save(tvm_npu.models.small_cnn(), str(folder / "model.onnx"))
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32"))
    ex = tvm_npu.build(tvm_npu.from_onnx(str(folder / "model.onnx")), target="npu")
    tvm_npu.export_library(ex, str(folder / "model.so"))
    return folder


@pytest.mark.parametrize("doc", _docs())
def test_doc_blocks_run_as_written(doc: Path, user_files: Path, tmp_path: Path):
    found = blocks(doc)
    for module in sorted({m for b in found if not b.skip for m in b.needs}):
        pytest.importorskip(module, reason=f"{doc.name}'s blocks need {module} (an optional extra)")
    for name in ("model.onnx", "x.npy", "model.so"):
        shutil.copy(user_files / name, tmp_path / name)
    script = tmp_path / "doc_blocks_driver.py"
    script.write_text(driver(found))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        [sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    out, done = outputs(proc.stdout), ended(proc.stdout)
    for n, b in enumerate(found):
        if b.skip:
            continue
        assert n in done, (
            f"{b.where}: the {b.kind} block failed (exit {proc.returncode}); its output:\n{out.get(n, '')[-3000:]}\n"
            f"stderr:\n{proc.stderr[-4000:]}"
        )
        for text in b.expect:
            assert text in out[n], f"{b.where}: the output does not contain {text!r}:\n{out[n][-3000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_skipped_blocks_are_few_and_say_why():
    skipped = [b for path in doc_files() for b in blocks(path) if b.skip]
    listing = "\n".join(f"  {b.where}: {b.skip}" for b in skipped)
    print(f"{len(skipped)} doc blocks not run:\n{listing}")
    assert all(b.skip != "no reason given" for b in skipped), listing
    assert len(skipped) <= MAX_SKIPPED, listing


def test_directives_apply_to_the_next_block_only(tmp_path: Path):
    md = tmp_path / "x.md"
    md.write_text(
        "<!-- doc-test: skip (a cluster) -->\n\n```python\nA\n```\n\ntext\n\n"
        '<!-- doc-test: expect "1 2" "three" -->\n```bash\nB\n```\n\n<!-- doc-test: slow -->\nprose\n'
        "```sh\nC\n```\n```text\nD\n```\n"
    )
    got = [(b.kind, b.code, b.skip, b.expect, b.slow) for b in blocks(md)]
    assert got == [
        ("python", "A\n", "a cluster", [], False),
        ("bash", "B\n", None, ["1 2", "three"], False),
        ("bash", "C\n", None, [], False),
    ]


def test_needs_names_the_extras_modules_before_expect_or_slow(tmp_path: Path):
    md = tmp_path / "x.md"
    md.write_text(
        '<!-- doc-test: slow needs torch diffusers expect "img" -->\n```python\nA\n```\n'
        "<!-- doc-test: needs onnxruntime -->\n```python\nB\n```\n```python\nC\n```\n"
    )
    got = [(b.needs, b.slow, b.expect) for b in blocks(md)]
    assert got == [(["torch", "diffusers"], True, ["img"]), (["onnxruntime"], False, []), ([], False, [])]


def test_driver_marks_each_block_and_stops_at_a_failure(tmp_path: Path):
    md = tmp_path / "x.md"
    md.write_text(
        "```python\nv = 6 * 7\nprint(v)\n```\n```bash\necho $((1 + 1))\nfalse\necho no\n```\n"
        "```python\nprint('never')\n```\n"
    )
    found = blocks(md)
    proc = subprocess.run([sys.executable, "-c", driver(found)], capture_output=True, text=True, cwd=tmp_path)
    assert outputs(proc.stdout) == {0: "42\n", 1: "2\n"}
    assert ended(proc.stdout) == {0} and proc.returncode != 0
