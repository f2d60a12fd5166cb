"""tvm_npu.diffusion.compile on the tiny diffusers exports (models/diffusers_export.py): the image of a
4-step guided run against the same loop run with onnxruntime and diffusers' own DDIMScheduler; the text
encoder + UNet as one library that loads back to the same image; per-step cycles; the thermal policy's
cut; `tvm-npu diffuse`; and bad requests refused before anything runs."""

import math

import numpy as np
import pytest

import tvm_npu.diffusion as diffusion
from tvm_npu.contract.errors import NPUError

STEPS, GUIDANCE, SEED = 4, 7.5, 3


@pytest.fixture(scope="module")
def files(diffusers_export):
    return (diffusers_export("text_encoder", batch=2), diffusers_export("unet", batch=2),
            diffusers_export("vae_decoder"))  # fmt: skip


@pytest.fixture(scope="module")
def pipe(files):
    return diffusion.compile(*files)


@pytest.fixture(scope="module")
def prompt():
    from tvm_npu.models import diffusers_export as de

    rng = np.random.default_rng(0)
    ids = rng.integers(2, de.VOCAB - 2, de.SEQ)
    neg = np.full(de.SEQ, 1)
    ids[0] = neg[0] = de.VOCAB - 2  # bos
    return ids, neg


def _onnxruntime_image(files, ids, neg, steps=STEPS):
    """The same run with onnxruntime's sessions of the three files and diffusers' DDIMScheduler (SD 1.x's
    settings), the guidance and the VAE scaling as diffusers' StableDiffusionPipeline writes them."""
    import diffusers
    import onnxruntime as ort
    import torch

    te, unet, vae = (ort.InferenceSession(f, providers=["CPUExecutionProvider"]) for f in files)
    emb = te.run(None, {"input_ids": np.stack([neg, ids]).astype(np.int64)})[0]
    sched = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                    clip_sample=False, set_alpha_to_one=False, steps_offset=1)  # fmt: skip
    sched.set_timesteps(steps)
    x = np.random.default_rng(SEED).standard_normal((1, 4, 8, 8)).astype(np.float32)
    for t in sched.timesteps:
        feed = {"sample": np.concatenate([x, x]), "timestep": np.full(2, float(t), np.float32),
                "encoder_hidden_states": emb}  # fmt: skip
        eps = unet.run(None, feed)[0]
        eps = eps[:1] + GUIDANCE * (eps[1:] - eps[:1])
        x = sched.step(torch.from_numpy(eps), t, torch.from_numpy(x)).prev_sample.numpy()
    dec = vae.run(None, {"latent_sample": x / 0.18215})[0]
    return (np.clip(dec[0] / 2 + 0.5, 0, 1).transpose(1, 2, 0) * 255).round().astype(np.uint8)


def _psnr(a, b) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def test_a_guided_run_is_onnxruntimes_image(pipe, files, prompt):
    ids, neg = prompt
    image = pipe.generate(ids, steps=STEPS, guidance=GUIDANCE, seed=SEED, negative_ids=neg)
    ref = _onnxruntime_image(files, ids, neg)
    assert image.shape == ref.shape == (16, 16, 3) and image.dtype == np.uint8
    assert ref.std() > 5  # an image, not a flat field
    assert _psnr(image, ref) >= 35.0, _psnr(image, ref)
    prof = pipe.profile()
    assert prof["encode_cycles"] > 0 and len(prof["steps"]) == STEPS
    per_step = {s["cycles"] for s in prof["steps"]}
    assert len(per_step) == 1 and per_step.pop() > 0  # each step the same UNet work
    assert prof["denoise_cycles"] == sum(s["cycles"] for s in prof["steps"])
    # The thermal model's step (the streams' static schedule, each region once per call) is the runtime's
    # measured step. (With attention's heads on the NPU no two of this UNet's regions are one module any
    # more; a region called twice per frame is tests/tools/test_sustain.py's case.)
    assert pipe.step_work().cycles == prof["steps"][0]["cycles"]
    assert [s["t"] for s in prof["steps"]] == [751, 501, 251, 1]


def test_one_library_loads_back_to_the_same_image(pipe, files, prompt, tmp_path):
    """Text encoder + UNet are one library (entries encode and denoise); loaded with the VAE's file it
    gives the same bytes. The batch-2 text encoder hands its embedding to the UNet without a copy."""
    ids, neg = prompt
    assert pipe.meta["te_batch"] == 2
    lib = pipe.export_library(tmp_path / "sd.so")
    again = diffusion.load(lib, files[2])
    a = pipe.generate(ids, steps=2, guidance=GUIDANCE, seed=1, negative_ids=neg)
    b = again.generate(ids, steps=2, guidance=GUIDANCE, seed=1, negative_ids=neg)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(NPUError, match="ERR_BAD_ARTIFACT"):
        diffusion.load(tmp_path / "missing.so", files[2])


def test_a_hot_die_cuts_the_steps_and_the_log_says_so(pipe, prompt):
    ids, neg = prompt
    pipe.generate(ids, steps=20, guidance=GUIDANCE, seed=0, negative_ids=neg,
                  thermal_policy=diffusion.StepPolicy(), start_c=80.0)  # fmt: skip
    prof = pipe.profile()
    assert len(prof["steps"]) == 15 and len(prof["thermal"]) == 15
    assert prof["thermal"][0]["cut"] == 5 and prof["thermal"][0]["throttled"]


@pytest.mark.parametrize(
    "change, says",
    [
        ({"steps": 0}, "steps=0"),
        ({"guidance": float("nan")}, "guidance=nan"),
        ({"prompt_ids": np.arange(20)}, "20 token ids, the text encoder takes exactly 8"),
        ({"prompt_ids": np.arange(3)}, "padding='max_length'"),
        ({"negative_ids": None}, "negative_ids"),
        ({"latents": np.zeros((1, 4, 4, 4), np.float32)}, "latents: shape"),
        ({"seed": 1.5}, "seed=1.5"),
    ],
)
def test_bad_requests_are_refused_before_anything_runs(pipe, prompt, change, says):
    ids, neg = prompt
    before = pipe.profile()
    kwargs = {"prompt_ids": ids, "steps": STEPS, "guidance": GUIDANCE, "negative_ids": neg, **change}
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG") as err:
        pipe.generate(**kwargs)
    assert says in str(err.value)
    assert pipe.profile() == before  # nothing half-run


def test_a_unet_whose_sample_does_not_match_the_height_is_coded(files):
    with pytest.raises(NPUError, match="ERR_INVALID_MODEL") as err:
        diffusion.compile(*files, height=64, width=64)
    assert "height=64" in str(err.value) and "16" in str(err.value)


def test_diffuse_writes_the_png_generate_makes(pipe, files, prompt, tmp_path, capsys):
    from PIL import Image

    from tvm_npu.tools.cli import main

    ids, neg = prompt
    out = tmp_path / "image.png"
    argv = ["diffuse", *files, "--prompt-ids", ",".join(map(str, ids)), "--negative-ids", ",".join(map(str, neg)),
            "--steps", "2", "--seed", "5", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"wrote {out} (16x16)" in text and "UNet: 2 steps" in text
    want = pipe.generate(ids, steps=2, guidance=GUIDANCE, seed=5, negative_ids=neg)
    np.testing.assert_array_equal(np.asarray(Image.open(out).convert("RGB")), want)
    assert main([*argv[:-1], files[1]]) == 2  # -o onto the UNet's own file: refused, the file kept
    assert "ERR_INVALID_CONFIG" in capsys.readouterr().err


def test_diffuse_traces_the_steps_and_the_thermal_log(files, prompt, tmp_path, capsys):
    """--trace: one slice per step, back to back, each as long as the thermal model's step time at its
    clock, with the die's temperature and the steps in all as counters."""
    import json

    from tvm_npu.tools.cli import main

    ids, neg = prompt
    trace = tmp_path / "loop.json"
    argv = ["diffuse", *files, "--prompt-ids", ",".join(map(str, ids)), "--negative-ids", ",".join(map(str, neg)),
            "--steps", "12", "--thermal", "laptop", "--start-c", "80", "-o", str(tmp_path / "i.png"),
            "--trace", str(trace)]  # fmt: skip
    assert main(argv) == 0
    assert "cut 2 steps" in capsys.readouterr().out  # 12 -> 10, never below min_steps
    events = json.loads(trace.read_text())["traceEvents"]
    steps = [e for e in events if e["ph"] == "X"]
    assert len(steps) == 10
    assert all(b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=0.01) for a, b in zip(steps, steps[1:]))
    # every step the same UNet work at the same throttled clock (npu-ref's second point, 867 MHz)
    assert {e["args"]["mhz"] for e in steps} == {867.0} and len({e["dur"] for e in steps}) == 1
    assert steps[0]["dur"] > 0 and steps[0]["args"]["cut"] == 2
    temps = [e for e in events if e["name"] == "temperature C"]
    assert len(temps) == 10 and temps[0]["args"]["C"] == 80.0


@pytest.mark.parametrize(
    "change, says",
    [
        ({"--prompt-ids": "1,2,x"}, "--prompt-ids '1,2,x': give token ids as integers"),
        ({"--steps": "0"}, "steps=0"),
        ({"--guidance": "nan"}, "--guidance nan"),
        ({"--negative-ids": None}, "--negative-ids: guidance > 1 needs"),
        ({"-o": "image.jpg"}, "name it .png"),
    ],
)
def test_diffuse_refuses_bad_arguments_before_it_builds(files, tmp_path, capsys, monkeypatch, change, says):
    from tvm_npu.tools.cli import main

    def no_build(*_a, **_k):
        raise AssertionError("built before refusing the arguments")

    monkeypatch.setattr(diffusion, "compile", no_build)
    args = {"--prompt-ids": "1,2,3", "--negative-ids": "1,1,1", "--steps": "4", "--guidance": "7.5",
            "-o": str(tmp_path / "image.png"), **change}  # fmt: skip
    argv = ["diffuse", *files] + [x for k, v in args.items() if v is not None for x in (k, v)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "ERR_INVALID_CONFIG" in err and says in err
