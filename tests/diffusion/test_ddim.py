"""tvm_npu.diffusion.DDIM against diffusers' DDIMScheduler (torch) on the same noise predictions: the
same timesteps and, step by step, the same latents; a shortened run against the DDIM update written out
here; diffusers configs loaded as they are, and the ones it cannot follow refused."""

import numpy as np
import pytest

from tvm_npu.contract.errors import NPUError
from tvm_npu.diffusion.scheduler import DDIM

CONFIGS = [
    {},  # Stable Diffusion 1.x
    {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "timestep_spacing": "trailing",
     "steps_offset": 0},
    {"prediction_type": "v_prediction", "timestep_spacing": "linspace", "set_alpha_to_one": True},
    {"prediction_type": "sample", "num_train_timesteps": 500},
]  # fmt: skip


def _diffusers(ddim: DDIM):
    diffusers = pytest.importorskip("diffusers", reason="needs diffusers (pip install '.[diffusion]')")
    from dataclasses import asdict

    return diffusers.DDIMScheduler(**asdict(ddim), clip_sample=False)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("steps", [1, 3, 20])
def test_every_step_is_diffusers_step(config, steps):
    ddim = DDIM(**config)
    ref = _diffusers(ddim)
    import torch  # diffusers' own dependency: there once diffusers is

    ref.set_timesteps(steps)
    plan = ddim.plan(steps)
    np.testing.assert_array_equal(plan[:, 0], ref.timesteps.numpy())
    rng = np.random.default_rng(steps)
    x = ours = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    for t, s in plan:
        eps = rng.standard_normal(x.shape).astype(np.float32)
        x = ref.step(torch.from_numpy(eps), int(t), torch.from_numpy(x)).prev_sample.numpy()
        ours = ddim.step(eps, int(t), int(s), ours)
        np.testing.assert_allclose(ours, x, rtol=1e-5, atol=1e-5)
    assert np.abs(x).max() > 0.1  # a real latent, not a collapsed one


def test_a_shortened_run_continues_with_the_ddim_update():
    """After 4 of 20 steps the run is cut to 6 more: the rows continue from where the 4th step ended,
    evenly down to the plan's last timestep; each step is the deterministic DDIM update, computed here
    in float64 from the betas' definition (Song et al. 2021, eq. 12 with sigma 0)."""
    ddim = DDIM()
    plan = ddim.replan(ddim.plan(20), 4, 6)
    assert len(plan) == 10 and plan[4, 0] == plan[3, 1] and plan[-1, 0] == ddim.plan(20)[-1, 0]
    assert (np.diff(plan[:, 0]) < 0).all() and (plan[:-1, 1] == plan[1:, 0]).all()
    betas = np.linspace(0.00085**0.5, 0.012**0.5, 1000) ** 2
    abar = np.cumprod(1 - betas)
    rng = np.random.default_rng(0)
    x = ref = rng.standard_normal((4, 8, 8)).astype(np.float32)
    for t, s in plan:
        eps = rng.standard_normal(x.shape).astype(np.float32)
        a_t, a_s = abar[t], abar[s] if s >= 0 else abar[0]
        x0 = (ref - np.sqrt(1 - a_t) * eps) / np.sqrt(a_t)
        ref = np.sqrt(a_s) * x0 + np.sqrt(1 - a_s) * eps
        x = ddim.step(eps, int(t), int(s), x)
    np.testing.assert_allclose(x, ref, rtol=1e-3, atol=1e-3)


def test_diffusers_configs_load_and_what_it_cannot_follow_is_refused(tmp_path):
    diffusers = pytest.importorskip("diffusers", reason="needs diffusers (pip install '.[diffusion]')")
    sd15 = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
            "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
            "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None,
            "clip_sample": False}  # fmt: skip
    path = tmp_path / "scheduler_config.json"
    diffusers.DDIMScheduler.from_config(sd15).save_config(tmp_path)
    assert DDIM.from_config(path) == DDIM() == DDIM.from_config(sd15)
    for bad, says in [
        ({"clip_sample": True}, "clip_sample=True"),
        ({"thresholding": True}, "thresholding=True"),
        ({"beta_schedule": "squaredcos_cap_v2"}, "squaredcos_cap_v2"),
        ({"use_karras_sigmas": True}, "unknown keys ['use_karras_sigmas']"),
        ({"timestep_spacing": "middle"}, "timestep_spacing 'middle'"),
    ]:
        with pytest.raises(NPUError, match="ERR_INVALID_CONFIG") as err:
            DDIM.from_config({**sd15, **bad})
        assert says in str(err.value)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(NPUError, match="not readable JSON"):
        DDIM.from_config(tmp_path / "broken.json")
    for steps in (0, -1, 1001, 2.5, True):
        with pytest.raises(NPUError, match="steps="):
            DDIM().plan(steps)
