"""`tvm-npu diffuse`: compile a text encoder + UNet + VAE decoder (three ONNX files), run the denoising
loop on the NPU and write the image as a PNG; print the cycles per stage and per step, and with
`--thermal` the thermal policy's log (the die's temperature, the clock, the steps in all)."""

from __future__ import annotations

import math
import os

# Only the standard library at import: cli.py builds this command's parser for `tvm-npu --help`, which
# never loads TVM or tvm-ffi (tests/tools/test_cli_help_fast.py). The command imports what it runs.


def _ids(text: str | None, flag: str):
    import numpy as np

    from ..contract.errors import NPUError

    if text is None:
        return None
    try:
        return np.array([int(t) for t in text.split(",")], np.int64)
    except ValueError:
        raise NPUError(
            "ERR_INVALID_CONFIG", f"{flag} {text!r}: give token ids as integers separated by commas"
        ) from None


def add_parser(sub, config) -> None:
    p = sub.add_parser("diffuse", help="text encoder + UNet on the NPU, VAE on the CPU: an image (docs/diffusion.md)")
    p.add_argument("text_encoder", help="the text encoder's ONNX file, or a Stable Diffusion folder (optimum's layout)")
    p.add_argument("unet", nargs="?", help="the UNet's ONNX file (not with a folder)")
    p.add_argument("vae_decoder", nargs="?", help="the VAE decoder's ONNX file (not with a folder)")
    p.add_argument("--prompt", help="the prompt as text (a folder: its tokenizer encodes it)")
    p.add_argument("--negative-prompt", default="", help="the negative prompt as text (default: empty)")
    p.add_argument("--prompt-ids", help="the prompt's token ids, padded to the encoder's positions")
    p.add_argument("--negative-ids", help="the negative (or empty) prompt's ids, for guidance > 1")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--trace", help="write the loop's steps (and the thermal log) as a Perfetto / Chrome trace")
    p.add_argument("--steps", type=int, default=20, help="DDIM steps (default: %(default)s)")
    p.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance, 1 none (%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the start noise's seed (default: %(default)s)")
    p.add_argument("--height", type=int, help="image height, for exports with dynamic axes")
    p.add_argument("--width", type=int, help="image width, for exports with dynamic axes")
    p.add_argument("--vae", choices=("cpu", "npu"), default="cpu", help="where the VAE decoder runs (%(default)s)")
    p.add_argument("--thermal", choices=("phone", "laptop", "large"), help="run the thermal step policy on this cooler")
    p.add_argument("--start-c", type=float, help="the die's temperature when the loop starts (default: ambient)")
    p.add_argument("--hot-c", type=float, default=75.0, help="the policy's threshold in C (default: %(default)s)")
    config(p)


def cmd_diffuse(args) -> int:
    from .. import diffusion
    from ..contract.errors import NPUError
    from ..runtime.files import replacing
    from .commands import _existing, outputs_apart

    if args.unet is None and args.vae_decoder is None:  # a Stable Diffusion folder (diffusion/folder.py)
        if not os.path.isfile(os.path.join(args.text_encoder, "model_index.json")):
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{args.text_encoder}: not a Stable Diffusion folder (no model_index.json); give the folder optimum "
                "exported, or the three ONNX files",
            )
        files = [args.text_encoder]
    elif args.unet is None or args.vae_decoder is None:
        raise NPUError("ERR_INVALID_CONFIG", "give a Stable Diffusion folder, or the three ONNX files")
    else:
        files = [_existing(args.text_encoder, "text encoder"), _existing(args.unet, "UNet"),
                 _existing(args.vae_decoder, "VAE decoder")]  # fmt: skip
    if (args.prompt is None) == (args.prompt_ids is None):
        raise NPUError("ERR_INVALID_CONFIG", "give the prompt as --prompt TEXT (a folder) or as --prompt-ids")
    outputs_apart({"--output": args.output, "--trace": args.trace}, files)
    if not str(args.output).lower().endswith(".png"):
        raise NPUError("ERR_INVALID_CONFIG", f"--output {args.output!r}: the image is written as PNG: name it .png")
    ids, neg = _ids(args.prompt_ids, "--prompt-ids"), _ids(args.negative_ids, "--negative-ids")
    # what generate would refuse after the build, refused before it
    diffusion.DDIM().plan(args.steps)
    if not math.isfinite(args.guidance):
        raise NPUError("ERR_INVALID_CONFIG", f"--guidance {args.guidance}: give a finite number (7.5 is usual)")
    policy = diffusion.StepPolicy(hot_c=args.hot_c) if args.thermal else None
    guided = args.guidance != 1
    if guided and neg is None and args.prompt is None:
        raise NPUError("ERR_INVALID_CONFIG", "--negative-ids: guidance > 1 needs the negative (or empty) prompt's ids")
    pipe = diffusion.compile(*files, height=args.height, width=args.width, guidance=guided, config=args.config,
                             vae=args.vae)  # fmt: skip
    text = {"prompt": args.prompt, "negative_prompt": args.negative_prompt} if args.prompt is not None else {}
    image = pipe.generate(ids, steps=args.steps, guidance=args.guidance, seed=args.seed, negative_ids=neg,
                          thermal_policy=policy, thermal=args.thermal or "laptop", start_c=args.start_c,
                          **text)  # fmt: skip
    from PIL import Image  # matplotlib's own image library: a dependency of the core through it

    with replacing(args.output) as tmp:
        Image.fromarray(image, mode="RGB").save(tmp, format="PNG")
    prof = pipe.profile()
    print(f"wrote {args.output} ({image.shape[1]}x{image.shape[0]})")
    if args.trace:
        from .trace import write_denoise_trace

        write_denoise_trace(prof, pipe.meta["config"]["clock_mhz"], args.trace)
        print(f"wrote {args.trace}")
    print(f"text encoder: {prof['encode_cycles']} NPU cycles")
    if prof["prompt_cycles"]:
        print(f"prompt (cross-attention K / V, once per image): {prof['prompt_cycles']} NPU cycles")
    print(f"UNet: {len(prof['steps'])} steps, {prof['denoise_cycles']} NPU cycles "
          f"({prof['denoise_cycles'] // max(1, len(prof['steps']))} per step)")  # fmt: skip
    for e in prof["thermal"]:
        cut = f", cut {e['cut']} steps" if e["cut"] else ""
        print(f"  step {e['step']:3d} t={e['t']:4d}: die {e['temp_c']:.1f} C, {e['mhz']:.0f} MHz, "
              f"{e['steps_total']} steps in all{cut}")  # fmt: skip
    return 0
