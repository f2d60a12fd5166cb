"""Energy and silicon-area estimates from the cost model's counts: pJ per MAC, per DDR byte and per SRAM
byte; mm^2 per MAC and per SRAM bit.

The cycle model (docs/npu.md section 5) has no energy; this module adds one for design-space
exploration (tvm_npu.sweep), as data, apart from the hardware contract. It is a first-order dynamic
energy estimate, not a power model: leakage, clocking, control and the vector unit's arithmetic are
left out, so use it to compare configurations, not to size a power supply.

Where the numbers come from (order-of-magnitude published figures, not measurements of any chip):
M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, for a 45 nm
process at 0.9 V:

- 8-bit integer multiply 0.2 pJ, 32-bit integer add 0.1 pJ: an int8 MAC with an int32 accumulator
  is about 0.3 pJ.
- 16-bit float multiply 1.1 pJ, 32-bit float add 0.9 pJ: an fp16 MAC with an fp32 accumulator is
  about 2.0 pJ.
- 32-bit DRAM read 640 pJ: 160 pJ per DDR byte (interface and device; LPDDR4/5 parts are several
  times lower, which is why the constants are parameters).
- 64-bit cache reads of 10 pJ (8 KB), 20 pJ (32 KB) and 100 pJ (1 MB): 1.25 pJ per byte at 8 KiB,
  growing about as the square root of the array's size (wire length) -- sqrt fits all three points
  within 15%. A banked SRAM reads one bank, so the size that counts is `sram_bytes / sram_banks`.

Area (same source and process, for comparing configurations): an 8-bit multiplier is 282 um^2 and a
32-bit adder 137 um^2, so an int8 MAC is about 419 um^2 (fp16 reuses the int8 slots: docs/npu.md
section 1); a 45 nm 6T SRAM cell is about 0.35 um^2 (Intel's 45 nm process), about 0.5 um^2 per bit
with the array's periphery. DDR bandwidth costs pins and a PHY, not core area: it is not in the area.

Counts: MACs and DDR bus bytes are the cost model's; SRAM bytes are every DMA transfer's bytes (each
DDR byte is also written to or read from SRAM) plus each compute command's operand tiles read once
and its output tile written once (their SRAM footprints, as the planner computes them).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...contract.config import KiB, NPUConfig


@dataclass(frozen=True)
class EnergyModel:
    """Energy constants in picojoules (defaults: Horowitz, ISSCC 2014, 45 nm; see the module doc)."""

    pj_per_mac_int8: float = 0.3
    pj_per_mac_fp16: float = 2.0
    pj_per_ddr_byte: float = 160.0
    pj_per_sram_byte_8kib: float = 1.25  # per byte of an 8 KiB array; scaled by sqrt(bank size / 8 KiB)

    def pj_per_sram_byte(self, cfg: NPUConfig | dict) -> float:
        c = cfg if isinstance(cfg, dict) else asdict(cfg)
        bank = c["sram_bytes"] / c["sram_banks"]
        return self.pj_per_sram_byte_8kib * math.sqrt(bank / (8 * KiB))

    def energy_uj(self, cfg: NPUConfig | dict, macs_int8: int, macs_fp16: int, ddr_bytes: int, sram_bytes: int) -> dict:
        """Microjoules per inference: MACs, DDR and SRAM parts, and their total."""
        parts = {
            "energy_mac_uj": (macs_int8 * self.pj_per_mac_int8 + macs_fp16 * self.pj_per_mac_fp16) * 1e-6,
            "energy_ddr_uj": ddr_bytes * self.pj_per_ddr_byte * 1e-6,
            "energy_sram_uj": sram_bytes * self.pj_per_sram_byte(cfg) * 1e-6,
        }
        parts["energy_uj"] = sum(parts.values())
        return parts


@dataclass(frozen=True)
class AreaModel:
    """Silicon area of the MAC array and the SRAM (defaults: 45 nm, see the module doc)."""

    um2_per_mac: float = 419.0
    um2_per_sram_bit: float = 0.5

    def area_mm2(self, mac_count: int, sram_bytes: int) -> float:
        return (mac_count * self.um2_per_mac + sram_bytes * 8 * self.um2_per_sram_bit) * 1e-6


DEFAULT = EnergyModel()
DEFAULT_AREA = AreaModel()


def command_counts(cfg: NPUConfig, commands: list) -> dict:
    """What the energy estimate counts in a command list: MACs by datapath, and bytes moved in and out
    of SRAM (DMA payloads plus compute operand tiles)."""
    from ...contract.stream import DTYPES
    from .cost_model import mac_macs
    from .emit import footprint  # the planner's own (reads, writes) ranges of a compute command

    counts = {"macs_int8": 0, "macs_fp16": 0, "sram_access_bytes": 0}
    for cmd in commands:
        if cmd.engine is None:
            continue
        if cmd.op in ("DMA_LOAD", "DMA_STORE"):
            counts["sram_access_bytes"] += cmd.args["rows"] * cmd.args["row_bytes"]
            continue
        if cmd.engine == "mac":
            key = "macs_int8" if cmd.args["dtype"] == DTYPES["int8"] else "macs_fp16"
            counts[key] += mac_macs(cmd)
        reads, writes = footprint(cfg, cmd)
        counts["sram_access_bytes"] += sum(hi - lo for _, lo, hi in reads + writes)
    return counts
