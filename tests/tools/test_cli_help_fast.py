"""`tvm-npu --help` and `tvm-npu <cmd> --help` import neither TVM nor tvm-ffi (issue 32: 6 s, it imported
TVM first); the lazy package keeps every public name working as documented."""

import subprocess
import sys

import pytest

HELP = """
import sys
import tvm_npu.tools.cli as cli
try:
    cli.main({argv!r})
except SystemExit as exit:
    assert exit.code == 0, exit.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tvm", "tvm_ffi", "torch", "numpy"))
assert not loaded, loaded
print("ok")
"""


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [["--help"], ["compile", "--help"], ["run", "--help"], ["generate", "--help"]])
def test_help_imports_no_tvm(argv):
    done = python(HELP.format(argv=argv))
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
    assert "usage: tvm-npu" in done.stdout


def test_public_names_resolve_as_before():
    """Each name of tvm_npu.__all__ resolves; tvm_npu.build stays the function after its module loads
    (the import system binds a submodule onto its package), and TVM knows the "npu" pipeline."""
    done = python(
        "import tvm_npu.build, tvm_npu.tools.disasm, tvm_npu, tvm\n"
        "assert callable(tvm_npu.build) and callable(tvm_npu.tools.disasm) and callable(tvm_npu.tools.asm)\n"
        "assert all(getattr(tvm_npu, n) is not None for n in tvm_npu.__all__)\n"
        "assert tvm_npu.llm.compile and tvm_npu.contract.config.get_config('npu-ref').name == 'npu-ref'\n"
        "assert 'npu' in tvm.relax.pipeline.PIPELINE_MAP\n"
        "print('ok')"
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "Failed to autoload" not in done.stderr, done.stderr
