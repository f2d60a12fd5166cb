"""The NPU's hardware description: one dataclass, separate from compiler options.

Every number here is documented in docs/npu.md (section 1) and mirrored field for field in
include/tvm_npu/npu_config.h. A compiled command stream carries the configuration it was compiled for,
so the emulator always times a stream with the hardware the compiler planned for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import NPUError

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class NPUConfig:
    """A virtual NPU. Field order is the order of the stream's configuration block."""

    name: str = "npu-ref"
    clock_mhz: int = 1000
    mac_rows: int = 32
    mac_cols: int = 32
    fp16_rate_div: int = 4
    sram_bytes: int = 2 * MiB
    sram_banks: int = 16
    ddr_bytes_per_cycle: int = 16
    burst_bytes: int = 128
    dma_latency: int = 64
    dma_channels: int = 2
    vector_lanes: int = 64
    alignment: int = 128
    op_overhead: int = 32
    max_rank: int = 4
    max_width: int = 2048
    max_tensors: int = 64

    # The stream's configuration block: these 16 words, in this order (docs/npu.md section 6).
    BLOCK_FIELDS = (
        "clock_mhz", "mac_rows", "mac_cols", "fp16_rate_div", "sram_bytes", "sram_banks",
        "ddr_bytes_per_cycle", "burst_bytes", "dma_latency", "dma_channels", "vector_lanes",
        "alignment", "op_overhead", "max_rank", "max_width", "max_tensors",
    )

    def __post_init__(self):
        for field in self.BLOCK_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise NPUError("ERR_OP_NOT_SUPPORTED",
                               f"NPUConfig.{field} must be a positive integer, got {value!r}")
        if self.alignment & (self.alignment - 1) or self.burst_bytes % self.alignment:
            raise NPUError("ERR_OP_NOT_SUPPORTED",
                           "NPUConfig.alignment must be a power of two dividing burst_bytes")
        if self.sram_bytes % (self.alignment * self.sram_banks):
            raise NPUError("ERR_OP_NOT_SUPPORTED",
                           "NPUConfig.sram_bytes must be a multiple of alignment * sram_banks")

    @property
    def int8_macs_per_cycle(self) -> int:
        return self.mac_rows * self.mac_cols

    def block(self) -> list[int]:
        """The 16 words of the stream's configuration block."""
        return [getattr(self, f) for f in self.BLOCK_FIELDS]

    def replace(self, **changes) -> "NPUConfig":
        """A copy with some fields changed, e.g. ``NPU_REF.replace(sram_bytes=1 * MiB)``."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


NPU_REF = NPUConfig()
NPU_SMALL = NPUConfig(name="npu-small", clock_mhz=500, mac_rows=16, mac_cols=16,
                      sram_bytes=512 * KiB, sram_banks=8, ddr_bytes_per_cycle=8, vector_lanes=32)

PRESETS = {c.name: c for c in (NPU_REF, NPU_SMALL)}


def get_config(config: "NPUConfig | str | None" = None) -> NPUConfig:
    """Resolve a preset name, an NPUConfig, or None (the default ``npu-ref``)."""
    if config is None:
        return NPU_REF
    if isinstance(config, NPUConfig):
        return config
    if isinstance(config, str) and config in PRESETS:
        return PRESETS[config]
    raise NPUError("ERR_OP_NOT_SUPPORTED",
                   f"unknown NPU configuration {config!r}; use one of {sorted(PRESETS)} or an NPUConfig")
