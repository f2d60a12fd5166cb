"""The NPU's hardware description: one dataclass, separate from compiler options.

The fields, their order and the presets come from the contract spec (tvm_npu/contract/spec.py), which
also generates docs/npu.md section 1 and include/tvm_npu/npu_config.h. A compiled command stream carries
the configuration it was compiled for, so the emulator always times a stream with the hardware the
compiler planned for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import spec
from .errors import NPUError

KiB = 1024
MiB = 1024 * KiB
_DEFAULT = spec.PRESETS[0]["values"]  # npu-ref


@dataclass(frozen=True)
class NPUConfig:
    """A virtual NPU (docs/npu.md section 1); the defaults are ``npu-ref``.

    The fields after ``name`` are the spec's configuration block, in its order (checked at import: a
    field added to the spec must be added here too, for the type checker's sake).
    """

    name: str = spec.PRESETS[0]["name"]
    clock_mhz: int = _DEFAULT["clock_mhz"]
    mac_rows: int = _DEFAULT["mac_rows"]
    mac_cols: int = _DEFAULT["mac_cols"]
    fp16_rate_div: int = _DEFAULT["fp16_rate_div"]
    sram_bytes: int = _DEFAULT["sram_bytes"]
    sram_banks: int = _DEFAULT["sram_banks"]
    ddr_bytes_per_cycle: int = _DEFAULT["ddr_bytes_per_cycle"]
    burst_bytes: int = _DEFAULT["burst_bytes"]
    dma_latency: int = _DEFAULT["dma_latency"]
    dma_channels: int = _DEFAULT["dma_channels"]
    vector_lanes: int = _DEFAULT["vector_lanes"]
    alignment: int = _DEFAULT["alignment"]
    op_overhead: int = _DEFAULT["op_overhead"]
    max_rank: int = _DEFAULT["max_rank"]
    max_width: int = _DEFAULT["max_width"]
    max_tensors: int = _DEFAULT["max_tensors"]

    # The stream's configuration block: these words, in this order (docs/npu.md section 6).
    BLOCK_FIELDS = tuple(f["name"] for f in spec.CONFIG["fields"])

    def __new__(cls, *args, **kwargs):
        # before the dataclass's __init__, whose TypeError named an unknown field but no code
        fields = cls.__dataclass_fields__
        unknown = [k for k in kwargs if k not in fields]
        if unknown or len(args) > len(fields):
            what = f"no field {', '.join(unknown)}" if unknown else f"{len(fields)} fields, {len(args)} given"
            raise NPUError("ERR_INVALID_CONFIG", f"NPUConfig has {what}: its fields are {', '.join(fields)}")
        return super().__new__(cls)

    def __post_init__(self):
        for field in self.BLOCK_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise NPUError("ERR_INVALID_CONFIG", f"NPUConfig.{field} must be a positive integer, got {value!r}")
        if self.alignment & (self.alignment - 1) or self.burst_bytes % self.alignment:
            raise NPUError("ERR_INVALID_CONFIG", "NPUConfig.alignment must be a power of two dividing burst_bytes")
        if self.sram_bytes % (self.alignment * self.sram_banks):
            raise NPUError("ERR_INVALID_CONFIG", "NPUConfig.sram_bytes must be a multiple of alignment * sram_banks")

    @property
    def int8_macs_per_cycle(self) -> int:
        return self.mac_rows * self.mac_cols

    def block(self) -> list[int]:
        """The words of the stream's configuration block."""
        return [getattr(self, f) for f in self.BLOCK_FIELDS]

    def replace(self, **changes) -> NPUConfig:
        """A copy with some fields changed, e.g. ``NPU_REF.replace(sram_bytes=1 * MiB)``."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


if tuple(f.name for f in dataclasses.fields(NPUConfig))[1:] != NPUConfig.BLOCK_FIELDS:
    raise ImportError(
        f"NPUConfig's fields differ from the configuration block of tvm_npu/contract/spec.py: {NPUConfig.BLOCK_FIELDS}"
    )

PRESETS = {p["name"]: NPUConfig(name=p["name"], **p["values"]) for p in spec.PRESETS}
NPU_REF = PRESETS["npu-ref"]
NPU_SMALL = PRESETS["npu-small"]


def get_config(config: NPUConfig | str | None = None) -> NPUConfig:
    """Resolve a preset name, an NPUConfig, or None (the default ``npu-ref``)."""
    if config is None:
        return NPU_REF
    if isinstance(config, NPUConfig):
        return config
    if isinstance(config, str) and config in PRESETS:
        return PRESETS[config]
    raise NPUError(
        "ERR_INVALID_CONFIG", f"unknown NPU configuration {config!r}; use one of {sorted(PRESETS)} or an NPUConfig"
    )
