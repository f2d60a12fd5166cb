"""User-facing tools on top of the build: profiles, traces, accuracy (per-layer SQNR), sessions
(streaming state, asynchronous calls), reports, sustained runs, the listing of a compiled stream
(disasm / asm), the compiled graph for Netron and the `tvm-npu` command line.
"""

from .accuracy import format_sqnr_table, layer_sqnr
from .asm import asm
from .disasm import disasm
from .export_graph import export_graph
from .profiler import profile, saturation_warnings, to_csv
from .session import AsyncModel, StreamingSession
from .sustain import sustain
from .trace import write_chrome_trace
