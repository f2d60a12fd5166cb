"""User-facing tools on top of the build: profiles, traces, accuracy (per-layer SQNR), sessions
(streaming state, asynchronous calls), reports, sustained runs and the `tvm-npu` command line.
"""

from .accuracy import format_sqnr_table, layer_sqnr
from .asm import asm
from .disasm import disasm
from .profiler import profile, to_csv
from .session import AsyncModel, StreamingSession
from .sustain import sustain
from .trace import write_chrome_trace
