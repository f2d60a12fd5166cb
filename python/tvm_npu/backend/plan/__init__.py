"""Stage 6 — plan: an NPU region's layers become a command stream. Concatenations written in place,
row tiles and output-channel blocks, SRAM residency by live range, weight slots streamed behind
compute, DMA waits from data dependencies; `cost_model` is the one cost model, `energy` the
energy estimate built on its counts.
"""

from .planner import plan
