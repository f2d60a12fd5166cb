"""The DDIM sampler (Song et al., "Denoising Diffusion Implicit Models", ICLR 2021) in numpy, on the CPU.

The denoising loop's arithmetic is a few multiply-adds per latent element per step: it stays on the
host, between the UNet calls on the NPU. Its parameters are diffusers' DDIMScheduler's, under the same
names, so a model folder's `scheduler/scheduler_config.json` loads as it is (`DDIM.from_config`); the
defaults are Stable Diffusion 1.x's (scaled_linear betas 0.00085 to 0.012 over 1000 steps, "leading"
spacing, steps_offset 1, set_alpha_to_one False). The arithmetic is float32, as diffusers' is.

A step is deterministic (eta 0): from timestep t to the next one s (or to the end, alpha 1 or
alpha_cumprod[0]),

    x0  = (x - sqrt(1 - a_t) * eps) / sqrt(a_t)          (epsilon prediction; v and sample: below)
    x_s = sqrt(a_s) * x0 + sqrt(1 - a_s) * eps

which holds for any s < t, so a loop may continue on fewer steps than it started with (`replan`: the
thermal policy shortens a run part-way). A run is a `plan`: rows (t, s).

What diffusers' DDIMScheduler does beyond this (eta > 0, clipping, dynamic thresholding, trained betas,
zero-terminal-SNR rescaling, the cosine schedule) is refused with a reason, never approximated.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..contract.errors import NPUError

SPACINGS = ("leading", "trailing", "linspace")
PREDICTIONS = ("epsilon", "v_prediction", "sample")
# diffusers config keys that describe nothing about the arithmetic (bookkeeping of its own)
_IGNORED = {"_class_name", "_diffusers_version", "skip_prk_steps", "clip_sample_range", "sample_max_value",
            "dynamic_thresholding_ratio"}  # fmt: skip
# keys with only the value this sampler implements: anything else is refused
_FIXED = {"clip_sample": False, "thresholding": False, "rescale_betas_zero_snr": False, "trained_betas": None}


@dataclass(frozen=True)
class DDIM:
    """The sampler's configuration (diffusers' DDIMScheduler names and meanings)."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    set_alpha_to_one: bool = False
    steps_offset: int = 1
    prediction_type: str = "epsilon"
    timestep_spacing: str = "leading"

    def __post_init__(self):
        if self.beta_schedule not in ("linear", "scaled_linear"):
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"beta_schedule {self.beta_schedule!r}: this sampler has 'linear' and 'scaled_linear'",
            )
        if self.timestep_spacing not in SPACINGS:
            raise NPUError("ERR_INVALID_CONFIG", f"timestep_spacing {self.timestep_spacing!r}: use one of {SPACINGS}")
        if self.prediction_type not in PREDICTIONS:
            raise NPUError("ERR_INVALID_CONFIG", f"prediction_type {self.prediction_type!r}: use one of {PREDICTIONS}")
        if not (0 < self.beta_start < self.beta_end < 1) or self.num_train_timesteps < 2:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"betas {self.beta_start} to {self.beta_end} over {self.num_train_timesteps} steps: give "
                "0 < beta_start < beta_end < 1 and at least 2 training steps",
            )

    @classmethod
    def from_config(cls, config: dict | str | Path) -> DDIM:
        """From diffusers' scheduler config (a dict or a scheduler_config.json). DDIM, PNDM, DDPM and Euler
        configs share these keys; a key whose value asks for arithmetic this sampler does not do is
        ERR_INVALID_CONFIG naming it."""
        if not isinstance(config, dict):
            try:
                config = json.loads(Path(config).read_text())
            except (OSError, ValueError) as err:
                raise NPUError("ERR_INVALID_CONFIG", f"scheduler config {config}: not readable JSON ({err})") from None
        names = {f.name for f in fields(cls)}
        for key, want in _FIXED.items():
            if config.get(key, want) != want:
                raise NPUError(
                    "ERR_INVALID_CONFIG",
                    f"scheduler config {key}={config[key]!r}: this DDIM sampler does not implement it (use {want})",
                )
        unknown = sorted(set(config) - names - set(_FIXED) - _IGNORED)
        if unknown:
            raise NPUError("ERR_INVALID_CONFIG", f"scheduler config: unknown keys {unknown}; known: {sorted(names)}")
        return cls(**{k: v for k, v in config.items() if k in names})

    def alphas_cumprod(self) -> np.ndarray:
        """alpha_bar[t] for t in [0, num_train_timesteps), float32."""
        T = self.num_train_timesteps
        if self.beta_schedule == "linear":
            betas = np.linspace(self.beta_start, self.beta_end, T, dtype=np.float32)
        else:
            betas = np.linspace(self.beta_start**0.5, self.beta_end**0.5, T, dtype=np.float32) ** 2
        return np.cumprod(np.float32(1.0) - betas, dtype=np.float32)

    def plan(self, steps: int) -> np.ndarray:
        """The run's steps as rows (t, s): from timestep t to s, the noisiest first. t as diffusers'
        set_timesteps spaces them; s = t - num_train_timesteps // steps, as its step() takes it (with
        "trailing" or "linspace" spacing that is not always the next row's t: diffusers' arithmetic,
        kept so that the results are its results); s < 0 is the end."""
        T = self.num_train_timesteps
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or not 1 <= steps <= T:
            raise NPUError("ERR_INVALID_CONFIG", f"steps={steps!r}: give an integer from 1 to {T}")
        if self.timestep_spacing == "linspace":
            t = np.linspace(0, T - 1, steps).round()[::-1].astype(np.int64)
        elif self.timestep_spacing == "leading":
            t = (np.arange(steps) * (T // steps)).round()[::-1].astype(np.int64) + self.steps_offset
        else:
            t = np.round(np.arange(T, 0, -T / steps)).astype(np.int64) - 1
        return np.stack([t, t - T // steps], axis=1)

    def replan(self, plan: np.ndarray, done: int, remaining: int) -> np.ndarray:
        """`plan` with its rows after the first `done` replaced by `remaining` rows spread evenly from
        where the run is (the s of row `done - 1`) down to the plan's last t, each going to the next row's
        t, the last to the plan's end. Fewer rows when there are not that many integer timesteps left."""
        if not 0 <= done < len(plan) or isinstance(remaining, bool) or not isinstance(remaining, numbers.Integral):
            raise NPUError("ERR_INVALID_CONFIG", f"replan after {done} of {len(plan)} steps to {remaining!r} more")
        if done == 0:  # nothing run yet: the run as if asked for `remaining` steps
            return self.plan(max(1, int(remaining)))
        start, end = int(plan[done - 1, 1]), int(plan[-1, 0])
        remaining = max(1, min(int(remaining), start - end + 1))  # distinct integer timesteps only
        t = np.linspace(start, end, remaining).round().astype(np.int64) if remaining > 1 else np.array([start])
        s = np.concatenate([t[1:], plan[-1:, 1]])
        return np.concatenate([plan[:done], np.stack([t, s], axis=1)])

    def step(self, eps: np.ndarray, t: int, s: int, x: np.ndarray) -> np.ndarray:
        """The latent at timestep `s` (< t; -1 or less for the end) from `x` at `t` and the UNet's output."""
        a = self.alphas_cumprod()
        final = np.float32(1.0) if self.set_alpha_to_one else a[0]
        a_t, a_s = a[t], a[s] if s >= 0 else final
        eps, x = np.asarray(eps, np.float32), np.asarray(x, np.float32)
        b_t = np.float32(1.0) - a_t
        if self.prediction_type == "epsilon":
            x0 = (x - b_t**0.5 * eps) / a_t**0.5
        elif self.prediction_type == "v_prediction":
            x0, eps = a_t**0.5 * x - b_t**0.5 * eps, a_t**0.5 * eps + b_t**0.5 * x
        else:
            x0, eps = eps, (x - a_t**0.5 * eps) / b_t**0.5
        return (a_s**0.5 * x0 + (np.float32(1.0) - a_s) ** 0.5 * eps).astype(np.float32)
