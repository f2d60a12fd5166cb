"""Design-space exploration: sweep NPU configurations (MACs, SRAM, DDR bandwidth, clock) over models,
with the cost model's cycles and the energy estimate; Pareto fronts, tables and plots.
"""

from .estimator import estimate
from .sweeper import SweepResult, sweep
