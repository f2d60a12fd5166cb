"""Stages 5-8 — the NPU backend: lower an NPU region to layers, plan it (layout, slices, tiling, SRAM,
weight streaming, DMA waits; one cost model), verify the stream, and emit it (`codegen`, the
`relax.ext.npu` hook). `compile_region` runs the four on one region.
"""

from .codegen import compile_region
from .lower import lower_function
