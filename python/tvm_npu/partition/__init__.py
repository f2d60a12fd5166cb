"""Stage 4 — patterns and partition: the pattern table and its constraint checks (each `constraint_*`
docstring is the reason a user reads), FuseOpsByPattern + MergeCompositeFunctions into NPU regions,
region limits, and the report of where each op ran and why.
"""

from .partitioner import partition_for_npu
from .report import BuildReport, Placement
