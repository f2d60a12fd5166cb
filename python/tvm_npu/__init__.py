"""tvm_npu: a bring-your-own-codegen NPU backend for Apache TVM (Relax) with a bit-exact reference NPU.

    import tvm, tvm_npu
    ex = tvm.compile(mod, target="npu", relax_pipeline="npu")      # or tvm_npu.build(mod, params=...)

The package is laid out by pipeline stage (docs/architecture.md); imports run one way, down it:
tools -> llm, dse -> build -> backend -> partition -> quantization -> rewrite -> frontend -> ir, runtime,
models -> contract.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import sys


def _autoload() -> None:
    """Entry point of the `tvm.backends` group: TVM calls it at `import tvm`.

    Defined before any import, because `import tvm` inside this package re-enters it through the
    entry point while the package is still initialising.
    """
    from .pipeline import register

    register()


from .contract.lazy import lazy_exports  # standard library only: no TVM, no re-entry

# The public API, imported on first use (PEP 562): `tvm-npu --help` and `import tvm_npu.tools.cli` stay
# free of TVM and tvm-ffi (6 s with torch installed). Each name: (module, attribute; None for the module).
_LAZY = {
    "CODES": (".contract", "CODES"),
    "NPU_REF": (".contract", "NPU_REF"),
    "NPU_SMALL": (".contract", "NPU_SMALL"),
    "PRESETS": (".contract", "PRESETS"),
    "NPUConfig": (".contract", "NPUConfig"),
    "NPUError": (".contract", "NPUError"),
    "NPUFallbackWarning": (".contract", "NPUFallbackWarning"),
    "SRAMFragmentationWarning": (".contract", "SRAMFragmentationWarning"),
    "get_config": (".contract", "get_config"),
    "from_onnx": (".frontend", "from_onnx"),
    "QuantReport": (".quantization", "QuantReport"),
    "quantize": (".quantization", "quantize"),
    "BuildReport": (".partition", "BuildReport"),
    "partition_for_npu": (".partition", "partition_for_npu"),
    "EnergyModel": (".backend.plan.energy", "EnergyModel"),
    "Model": (".runtime", "Model"),
    "export_library": (".runtime", "export_library"),
    "load_module": (".runtime", "load_module"),
    "build": (".build", "build"),
    "npu_pipeline": (".build", "npu_pipeline"),
    "SweepResult": (".dse", "SweepResult"),
    "estimate": (".dse", "estimate"),
    "sweep": (".dse", "sweep"),
    "llm": (".llm", None),  # tvm_npu.llm.compile: prefill / decode of a decoder (docs/llm.md)
    "AsyncModel": (".tools", "AsyncModel"),
    "StreamingSession": (".tools", "StreamingSession"),
    "format_sqnr_table": (".tools", "format_sqnr_table"),
    "layer_sqnr": (".tools", "layer_sqnr"),
    "profile": (".tools", "profile"),
    "profile_to_csv": (".tools", "to_csv"),
    "write_chrome_trace": (".tools", "write_chrome_trace"),
}


def _register_once() -> None:
    """After the first public name is imported: register with TVM unless that is already done or under
    way (tvm_npu.pipeline imported), for a source tree whose `tvm.backends` entry point is not installed."""
    if "tvm_npu.pipeline" not in sys.modules:
        import tvm  # noqa: F401  (its entry point registers; _autoload then only checks)

        _autoload()


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), _register_once)

# The public API: the names a user script reaches as tvm_npu.<name>.
__all__ = sorted(_LAZY)

try:  # the version is written once, in pyproject.toml
    __version__ = _metadata.version("tvm_npu")
except _metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"

if "tvm" in sys.modules:  # TVM first (`import tvm, tvm_npu`): register now, as its entry point would
    _autoload()
