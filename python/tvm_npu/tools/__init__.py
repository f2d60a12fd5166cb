"""User-facing tools on top of the build: profiles, traces, accuracy (per-layer SQNR), sessions
(streaming state, asynchronous calls), reports, the compiled graph for Netron and the `tvm-npu`
command line.
"""

from .accuracy import format_sqnr_table, layer_sqnr
from .export_graph import export_graph
from .profiler import profile, saturation_warnings, to_csv
from .session import AsyncModel, StreamingSession
from .trace import write_chrome_trace
