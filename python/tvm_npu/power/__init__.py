"""Sustained performance: the power model (DVFS operating points, leakage, clock tree), the lumped RC
thermal model, the governors, and the two-stage CPU -> NPU pipeline over a stream of frames
(docs/npu.md section 9, docs/sustained.md). Data apart from the hardware contract.
"""

from .governor import POLICIES, Governor
from .model import DEFAULT_POWER, NpuWork, OperatingPoint, PowerModel, operating_points, work_of
from .pipeline import SustainResult, simulate
from .thermal import THERMALS, Thermal, get_thermal
