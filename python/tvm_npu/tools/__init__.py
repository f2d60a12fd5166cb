"""User-facing tools on top of the build: profiles, traces, accuracy (per-layer SQNR), sessions
(streaming state, asynchronous calls), reports, sustained runs, the listing of a compiled stream
(disasm / asm), the compiled graph for Netron and the `tvm-npu` command line.
"""

from ..contract.lazy import lazy_exports

# Imported on first use: `tvm-npu --help` (tools/cli.py) imports this package and none of TVM.
_LAZY = {
    "format_sqnr_table": (".accuracy", "format_sqnr_table"),
    "layer_sqnr": (".accuracy", "layer_sqnr"),
    "asm": (".asm", "asm"),
    "disasm": (".disasm", "disasm"),
    "export_graph": (".export_graph", "export_graph"),
    "profile": (".profiler", "profile"),
    "saturation_warnings": (".profiler", "saturation_warnings"),
    "to_csv": (".profiler", "to_csv"),
    "AsyncModel": (".session", "AsyncModel"),
    "StreamingSession": (".session", "StreamingSession"),
    "sustain": (".sustain", "sustain"),
    "write_chrome_trace": (".trace", "write_chrome_trace"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
__all__ = sorted(_LAZY)
