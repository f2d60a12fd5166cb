"""Sweep stage 1 — the grid: parse the swept values and build one NPUConfig per combination.

Values are written as on the command line: MAC arrays "16x16" (rows x columns; "32" is 32x32), SRAM
sizes "512KiB", "2MiB", "1GiB" or bytes ("524288"), DDR bandwidths in bytes per cycle ("16"). A value
that does not parse is the user's mistake: NPUError ERR_INVALID_CONFIG saying what to write. A value
that parses but makes a configuration the contract forbids (NPUConfig's checks, e.g. SRAM that is not a
multiple of alignment x banks) is a result, not a mistake: that point's row is infeasible, with the
reason, and the other points still run.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ..contract.config import NPUConfig
from ..contract.errors import NPUError

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep: its name and either a config or why there is none."""

    name: str
    values: dict  # mac_rows, mac_cols, sram_bytes, ddr_bytes_per_cycle
    config: NPUConfig | None
    error: NPUError | None = None


def _items(option: str, spec) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    items = [s.strip() for s in items]
    if not items or any(not s for s in items):
        raise NPUError(
            "ERR_INVALID_CONFIG", f"{option} {spec!r}: give one value or a comma-separated list without empty items"
        )
    return list(dict.fromkeys(items))  # a repeated value would only repeat a row


def parse_mac(spec) -> list[tuple[int, int]]:
    """ "16x16,32x32" (or [ "16x16", ... ]) -> [(16, 16), (32, 32)]; "32" means 32x32."""
    out = []
    for s in _items("--mac", spec):
        m = re.fullmatch(r"(\d+)(?:\s*[xX*]\s*(\d+))?", s)
        if not m or int(m.group(1)) <= 0 or (m.group(2) and int(m.group(2)) <= 0):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"--mac {s!r}: write the MAC array as ROWSxCOLS with positive integers, e.g. 32x32",
            )
        out.append((int(m.group(1)), int(m.group(2) or m.group(1))))
    return out


def parse_size(s: str) -> int:
    """ "512KiB" -> 524288; binary units only (B, KiB, MiB, GiB), so a size is never ambiguous."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)", s)
    unit = m.group(2).lower() if m else None
    if unit not in _UNITS:
        hint = " (KB / MB are ambiguous: use KiB / MiB)" if unit in ("k", "kb", "m", "mb", "g", "gb") else ""
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"--sram {s!r}: write a size as a number with B, KiB, MiB or GiB, e.g. 512KiB or 2MiB{hint}",
        )
    size = float(m.group(1)) * _UNITS[unit]
    if size != int(size) or size <= 0:
        raise NPUError("ERR_INVALID_CONFIG", f"--sram {s!r}: the size must be a positive whole number of bytes")
    return int(size)


def parse_sram(spec) -> list[int]:
    return list(dict.fromkeys(parse_size(s) for s in _items("--sram", spec)))


def parse_ddr(spec) -> list[int]:
    out = []
    for s in _items("--ddr-bw", spec):
        if not re.fullmatch(r"\d+", s) or int(s) <= 0:
            raise NPUError(
                "ERR_INVALID_CONFIG", f"--ddr-bw {s!r}: write DDR bandwidth as whole bytes per cycle, e.g. 8,16,32"
            )
        out.append(int(s))
    return out


def size_name(n: int) -> str:
    """524288 -> "512KiB" (the largest unit that divides it)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def grid(base: NPUConfig, mac, sram, ddr_bw) -> list[Point]:
    """Every combination of the swept values on top of `base`, MAC array outermost."""
    points = []
    for (rows, cols), sram_bytes, bw in itertools.product(parse_mac(mac), parse_sram(sram), parse_ddr(ddr_bw)):
        name = f"mac{rows}x{cols}-sram{size_name(sram_bytes)}-ddr{bw}"
        values = {"mac_rows": rows, "mac_cols": cols, "sram_bytes": sram_bytes, "ddr_bytes_per_cycle": bw}
        try:
            points.append(Point(name, values, base.replace(name=name, **values)))
        except NPUError as err:
            points.append(Point(name, values, None, err))
    return points
