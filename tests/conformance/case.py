"""One conformance case (a small network, its inputs, its datapath) and the deterministic choice of
cases over an attribute space.

`variations(base, axes, ...)` is the case generator every family uses: the base point, every value of
every attribute axis with the others at the base (so each value is covered on its own), and a few seeded
random combinations of all axes (interactions); NPU_CONFORMANCE=full adds the whole product (capped)."""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .net import Net, Quant

FULL = os.environ.get("NPU_CONFORMANCE", "") == "full"
SET_NAME = "full" if FULL else "ci"

# Input value profiles: what the entries of a model input are.
FP16_MAX = 6.0e4  # within fp16's largest finite value, 65504
VALUE_PROFILES = ("normal", "fp16_max", "fp16_tiny", "inf", "inf_nan")


@dataclass
class Case:
    family: str  # the op family of SUPPORTED_OPS.md
    name: str  # unique within the family and datapath
    dtype: str  # "fp16" (float model) or "int8" (QDQ model)
    ops: tuple  # the Relax ops whose placement is the case's (e.g. ("relax.nn.conv2d",))
    make_net: Callable[[np.random.Generator], Net]
    values: str = "normal"
    quant: Quant | None = None
    amplitude: float = 1.0  # the inputs' standard deviation ("normal")
    xfail: str | None = None  # a known bug: the case is marked xfail(strict=True) with this text
    attrs: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        q = f"-{self.quant.tag}" if self.quant is not None else ""
        v = "" if self.values == "normal" else f"-{self.values}"
        return f"{self.family}/{self.dtype}/{self.name}{q}{v}"

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(zlib.crc32(self.id.encode()))

    def net(self) -> Net:
        return self.make_net(self.rng())

    def feeds(self, net: Net, n: int = 2) -> list[dict]:
        """`n` seeded input sets for the network's inputs, of the case's value profile."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()) + 1)
        return [{name: self._values(rng, shape) for name, shape in net.inputs} for _ in range(n)]

    def _values(self, rng, shape):
        x = rng.standard_normal(shape) * self.amplitude
        if self.values == "fp16_max":
            x = np.clip(x * FP16_MAX / 2.5, -FP16_MAX, FP16_MAX)
        elif self.values == "fp16_tiny":
            x = x * 2e-5  # fp16 subnormals (below 6.1e-5) and values that round to 0
        elif self.values in ("inf", "inf_nan"):
            specials = [np.inf, -np.inf] + ([np.nan] if self.values == "inf_nan" else [])
            flat = x.reshape(-1)
            picks = rng.choice(flat.size, size=max(1, flat.size // 16), replace=False)
            flat[picks] = rng.choice(specials, size=picks.size)
        return x.astype(np.float32)


def variations(base: dict, axes: dict, n_random: int = 3, seed: int = 0, full_cap: int = 400) -> list[dict]:
    """Attribute points: `base`, each value of each axis alone, and `n_random` seeded combinations;
    with NPU_CONFORMANCE=full also up to `full_cap` points of the full product (seeded sample)."""
    points = [dict(base)]
    for key, values in axes.items():
        points += [{**base, key: v} for v in values if v != base.get(key)]
    rng = np.random.default_rng(seed)
    keys = list(axes)
    for _ in range(n_random):
        points.append({**base, **{k: axes[k][rng.integers(len(axes[k]))] for k in keys}})
    if FULL:
        product = [dict(zip(keys, combo)) for combo in itertools.product(*[axes[k] for k in keys])]
        picks = rng.permutation(len(product))[:full_cap]
        points += [{**base, **product[i]} for i in sorted(picks)]
    unique = {}
    for p in points:
        unique.setdefault(repr(sorted(p.items())), p)
    return list(unique.values())


QUANTS_CI = [
    Quant("int8", "zero", "zero"),
    Quant("int8", "lo", "hi"),
    Quant("int8", "hi", "lo"),
    Quant("uint8", "lo", "hi"),
    Quant("uint8", "hi", "odd"),
    Quant("int8", "odd", "odd", per_channel=False),
]
QUANTS_FULL = [
    Quant(d, zi, zo, pc)
    for d in ("int8", "uint8")
    for zi in ("lo", "hi", "zero", "odd")
    for zo in ("lo", "hi", "zero", "odd")
    for pc in (True, False)
]


def quants() -> list[Quant]:
    return QUANTS_FULL if FULL else QUANTS_CI


def tag(params: dict) -> str:
    """A readable, stable case name from attribute values."""

    def fmt(v):
        if isinstance(v, (list, tuple)):
            return "x".join(fmt(e) for e in v)
        return str(v)

    return "-".join(f"{k}{fmt(v)}" for k, v in params.items())
