"""`tvm_npu.diffusion.compile`: a Stable-Diffusion-shaped pipeline from its three ONNX files.

    pipe = tvm_npu.diffusion.compile("text_encoder.onnx", "unet.onnx", "vae_decoder.onnx")
    image = pipe.generate(prompt_ids, steps=20, guidance=7.5, seed=0, negative_ids=empty_ids)  # uint8 HxWx3
    pipe.profile()                 # cycles per stage and per step, the thermal log
    pipe.export_library("sd.so")   # text encoder + UNet: one library

- The text encoder and the UNet are built for the NPU and linked into one executable (link.py): entry
  functions "encode", "prompt" and "denoise", and "diffusion_meta" (what `load` needs, as JSON).
  "prompt" is what of the UNet depends on the text embedding alone, split off by
  ir/split_invariant.py: the K and V of every cross-attention, computed once per image; "denoise" is
  the rest, run once per step on those tensors. The embedding and the K / V go from entry to entry as
  the device tensors the previous one returned; only the latents cross to the host, for the sampler's
  step. `hoist_prompt=False` keeps the UNet whole (one "denoise" of the embedding, as before).
- The VAE decoder runs on the CPU (TVM's llvm build): hundreds of MB of weights for one call per image,
  where the NPU's DDR traffic would buy nothing. `vae="npu"` builds it for the NPU instead.
- Classifier-free guidance runs the text encoder and the UNet at batch 2 (the negative prompt's row
  first), one call per step, as the exported graphs are specialised (`guidance=True`, the default);
  `guidance=False` compiles batch 1.
- The sampler is diffusion/scheduler.py's DDIM on the CPU; the thermal policy
  (diffusion/thermal_steps.py) may cut the steps and lowers the clock of a run that gets hot.

Shapes are read from the files: the text encoder's positions (static, e.g. 77 for CLIP) and width, the
UNet's latent channels and size, the VAE's upscale; `height` / `width` specialise exports with dynamic
axes and are checked against static ones. What does not fit together is ERR_INVALID_MODEL naming both
sides, before anything is built.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import threading

import numpy as np
import onnx
import tvm
from tvm import relax

from .. import link, runtime
from ..contract.config import NPUConfig, get_config
from ..contract.errors import NPUError
from ..ir.graph import region_calls
from ..ir.split_invariant import entry, split_invariant
from . import folder as sd_folder
from . import loop
from .scheduler import DDIM
from .thermal_steps import StepPolicy, ThermalLoop

META_FUNCTION = "diffusion_meta"
ENTRIES = ("encode", "prompt", "denoise")  # "prompt": only when something is hoisted (meta "entries")
FORMAT = 2  # of the pipeline artifact's metadata (2: the prompt entry)
# what the metadata keeps of _shapes: what generate and load need
SHAPE_KEYS = ("batch", "te_batch", "positions", "width", "channels", "latent", "scale", "unet_inputs", "unet_order",
              "timestep")  # fmt: skip


def _read(model, what: str) -> onnx.ModelProto:
    from ..frontend.onnx import read_model

    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, str | bytes) and not hasattr(model, "__fspath__"):
        raise NPUError("ERR_INVALID_MODEL", f"{what}: pass an ONNX path or ModelProto, not {type(model).__name__}")
    return read_model(model)


def _inputs(model: onnx.ModelProto) -> list:
    """[(name, [dim or None], numpy dtype)] of the graph inputs that are not initializers."""
    init = {i.name for i in model.graph.initializer}
    out = []
    for i in model.graph.input:
        if i.name in init:
            continue
        t = i.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        out.append((i.name, dims, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).name))
    return out


def _outputs(model: onnx.ModelProto) -> list:
    return [[d.dim_value if d.HasField("dim_value") else None for d in o.type.tensor_type.shape.dim]
            for o in model.graph.output]  # fmt: skip


def _fit(what: str, dims: list, want: list) -> list:
    """`want` where `dims` is dynamic, and ERR_INVALID_MODEL where a static dim differs."""
    for k, (d, w) in enumerate(zip(dims, want)):
        if d is not None and w is not None and d != w:
            raise NPUError("ERR_INVALID_MODEL", f"{what}: axis {k} is {d} in the file, the pipeline needs {w}")
    return [w if d is None else d for d, w in zip(dims, want)]


def _shapes(te, unet, vae, height, width, batch: int) -> dict:
    """Every static shape of the three graphs, checked against each other (the module doc)."""
    te_in = _inputs(te)
    if len(te_in) != 1 or len(te_in[0][1]) != 2 or te_in[0][1][1] is None:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"text encoder inputs {[(n, d) for n, d, _ in te_in]}: expected one input_ids [batch, positions] with "
            "the positions static (export it at its max_position_embeddings, 77 for CLIP)",
        )
    positions = te_in[0][1][1]
    hidden = next((o for o in _outputs(te) if len(o) == 3), None)
    if hidden is None or hidden[2] is None:
        raise NPUError("ERR_INVALID_MODEL", "text encoder: no output [batch, positions, width] (last_hidden_state)")
    by_rank = {len(d): (n, d, t) for n, d, t in _inputs(unet)}
    if len(by_rank) != 3 or set(by_rank) - {0, 1, 3, 4} or 4 not in by_rank or 3 not in by_rank:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"UNet inputs {[(n, d) for n, d, _ in _inputs(unet)]}: expected (sample [B, C, h, w], timestep, "
            "encoder_hidden_states [B, positions, width]); added conditions (SDXL's) are not supported",
        )
    sample, ehs = by_rank[4], by_rank[3]
    tstep = by_rank.get(0) or by_rank[1]
    vae_in = _inputs(vae)
    if len(vae_in) != 1 or len(vae_in[0][1]) != 4:
        raise NPUError("ERR_INVALID_MODEL", "VAE decoder: expected one input, the latents [1, C, h, w]")
    out = _outputs(vae)[0]
    lat, img = vae_in[0][1], out
    scale = img[2] // lat[2] if None not in (img[2], lat[2]) else 8  # diffusers' VAEs upscale by 8
    h = sample[1][2] or lat[2] or (height // scale if height else None)
    w = sample[1][3] or lat[3] or (width // scale if width else None)
    if h is None or w is None:
        raise NPUError("ERR_INVALID_MODEL", "the latent size is dynamic in every file: give height= and width=")
    for what, size, got in (("height", h, height), ("width", w, width)):
        if got is not None and got != size * scale:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"{what}={got}: the UNet's sample is {size} latent pixels, {size * scale} image pixels at the VAE's "
                f"x{scale}; export the UNet at sample size {got // scale} or ask for {size * scale}",
            )
    channels = sample[1][1] or lat[1]
    return {
        "batch": batch, "positions": positions, "width": hidden[2], "channels": channels, "latent": [h, w],
        "scale": scale,
        # A text encoder exported at batch 1 serves a batch-2 UNet by two calls (its rows stacked on the
        # host, once per image); one with a dynamic or matching batch runs once and hands over on device.
        "te_batch": 1 if te_in[0][1][0] == 1 else batch,
        "te": {te_in[0][0]: _fit("text encoder input_ids", te_in[0][1], [1 if te_in[0][1][0] == 1 else batch,
                                                                         positions])},
        "unet": {
            sample[0]: _fit(f"UNet {sample[0]}", sample[1], [batch, channels, h, w]),
            ehs[0]: _fit(f"UNet {ehs[0]}", ehs[1], [batch, positions, hidden[2]]),
            tstep[0]: _fit(f"UNet {tstep[0]}", tstep[1], [batch] * len(tstep[1])),
        },
        "vae": {vae_in[0][0]: _fit("VAE decoder latents", lat, [1, channels, h, w])},
        "unet_inputs": [sample[0], tstep[0], ehs[0]], "unet_order": [n for n, _, _ in _inputs(unet)],
        "timestep": {"shape": _fit("UNet timestep", tstep[1], [batch] * len(tstep[1])), "dtype": tstep[2]},
    }  # fmt: skip


def _first(out):
    """A VM call's first output (a graph with several outputs returns an array of them)."""
    return out[0] if isinstance(out, tvm.ir.Array | list | tuple) else out


def _import(model: onnx.ModelProto, batch: int, latent=None) -> tvm.IRModule:
    """frontend/diffusion.py's static-shape import at the pipeline's batch and latent."""
    from ..frontend import diffusion as diffusion_import

    return diffusion_import.from_onnx(model, batch=batch, latent=latent)


def compile(text_encoder, unet=None, vae_decoder=None, height: int | None = None, width: int | None = None,
            guidance: bool = True, config=None, vae: str = "cpu", scheduler: DDIM | None = None,
            vae_scaling_factor: float = 0.18215, hoist_prompt: bool = True) -> Pipeline:  # fmt: skip
    """Build the pipeline (the module doc). `config`: an NPUConfig or preset name; `scheduler`: the DDIM
    sampler (default Stable Diffusion 1.x's); `vae_scaling_factor`: the VAE's latent scale (0.18215 for
    SD 1.x / 2.x, 0.13025 for SDXL: its vae/config.json "scaling_factor"); `hoist_prompt`: compute what
    the UNet does with the text embedding alone (the cross-attention K / V) once per image, not per
    step."""
    if vae not in ("cpu", "npu"):
        raise NPUError("ERR_INVALID_CONFIG", f'vae={vae!r}: use "cpu" (TVM\'s llvm build) or "npu"')
    cfg = get_config(config)
    tokenizer = None
    if unet is None and vae_decoder is None and sd_folder.is_folder(text_encoder):  # optimum's folder (folder.py)
        parts = sd_folder.read(text_encoder, scheduler)
        from .tokenizer import CLIPTokenizer

        tokenizer = CLIPTokenizer(parts["tokenizer"], parts["positions"])
        text_encoder, unet, vae_decoder = parts["text_encoder"], parts["unet"], parts["vae_decoder"]
        scheduler, vae_scaling_factor = parts["scheduler"], parts["vae_scaling_factor"]
    elif unet is None or vae_decoder is None:
        raise NPUError(
            "ERR_INVALID_MODEL",
            f"{text_encoder}: give a Stable Diffusion folder (with model_index.json) or the three ONNX files",
        )
    te, un, va = _read(text_encoder, "text_encoder"), _read(unet, "unet"), _read(vae_decoder, "vae_decoder")
    shapes = _shapes(te, un, va, height, width, 2 if guidance else 1)
    latent = tuple(shapes["latent"])
    te_mod = _import(te, shapes["te_batch"])
    un_mod, va_mod = _import(un, shapes["batch"], latent), _import(va, 1, latent)
    entries, hoisted = [("encode", te_mod, None)], []
    if hoist_prompt:
        # Attention's K scale above its head split first (bit-identical; the NPU flow's rewrites do it
        # anyway): the split then hands each K over as the dense layer's [B, S, H*D] rows, its head
        # split a view left in the step, not as 16-byte head rows that cost one DDR burst each.
        from ..rewrite.scale_before_heads import scale_before_heads

        split, hoisted = split_invariant(scale_before_heads(un_mod), [shapes["unet_inputs"][2]], name="prompt")
    if hoisted:
        entries += [("prompt", entry(split, "prompt"), None), ("denoise", entry(split, "main"), None)]
        shapes["unet_order"] = [p.name for p in split["main"].params]
    else:
        entries.append(("denoise", un_mod, None))
    built, reports = link.build_entries(entries, cfg)
    names = tuple(e for e in ENTRIES if e in built)
    meta = {
        "format": FORMAT, "config": cfg.to_dict(),
        "scheduler": dataclasses.asdict(scheduler or DDIM()),
        "vae_scaling_factor": float(vae_scaling_factor),
        **{k: shapes[k] for k in SHAPE_KEYS}, "ids_dtype": _inputs(te)[0][2],
        "entries": list(names), "prompt_outputs": hoisted,
        "placements": {e: [dict(p.__dict__) for p in reports[e].placements] for e in names},
    }  # fmt: skip
    meta["calls"] = {e: region_calls(built[e][0]) for e in names}
    executable = link.link(built, names, META_FUNCTION, meta)
    if vae == "cpu":
        from ..build import cpu_pipeline

        vae_ex = tvm.compile(va_mod, target="llvm", relax_pipeline=cpu_pipeline())
    else:
        from ..build import build

        vae_ex = build(va_mod, config=cfg)
    pipe = Pipeline(executable, vae_ex, meta)
    pipe.reports, pipe.tokenizer = reports, tokenizer
    return pipe


class Pipeline:
    """A compiled text encoder + UNet (one NPU executable) and VAE decoder: `generate`, `profile`,
    `export_library`. One call at a time (a Relax VM is not re-entrant): calls from several threads take
    turns."""

    def __init__(self, executable, vae_executable, meta: dict):
        self.executable, self.meta = executable, meta
        self._vm = relax.VirtualMachine(executable, tvm.cpu())
        self._vae = relax.VirtualMachine(vae_executable, tvm.cpu())
        self.scheduler = DDIM(**meta["scheduler"])
        modules = runtime.npu_modules(self._vm)
        self._modules = {
            e: [m for m in modules if runtime.profile_of(m)["symbol"].startswith(link.prefix(e))]
            for e in meta["entries"]
        }
        self.reports: dict = {}
        self.tokenizer = None  # a folder's CLIP tokenizer (tokenizer.py): generate(prompt="text")
        self._lock = threading.RLock()
        self._profile: dict = {"encode_cycles": 0, "prompt_cycles": 0, "steps": [], "thermal": []}

    # -- inputs --------------------------------------------------------------------------------------------

    def _ids(self, ids, what: str) -> np.ndarray:
        P = self.meta["positions"]
        arr = np.asarray(ids)
        if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.size == 0:
            raise NPUError("ERR_INVALID_CONFIG", f"{what}: give a 1-D array of token ids, not {arr.dtype} {arr.shape}")
        if arr.size != P:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"{what}: {arr.size} token ids, the text encoder takes exactly {P} (its positions): "
                + ("shorten the prompt" if arr.size > P else "pad them as its tokenizer does (padding='max_length')"),
            )
        return arr.astype(self.meta.get("ids_dtype", "int64"))

    def _timestep(self, t: int):
        spec = self.meta["timestep"]
        return tvm.runtime.tensor(np.full(spec["shape"], t, dtype=spec["dtype"]))

    # -- the run -------------------------------------------------------------------------------------------

    def generate(self, prompt_ids=None, steps: int = 20, guidance: float = 7.5, seed: int = 0, negative_ids=None,
                 thermal_policy: StepPolicy | None = None, thermal="laptop", start_c: float | None = None,
                 latents: np.ndarray | None = None, prompt: str | None = None,
                 negative_prompt: str | None = None) -> np.ndarray:  # fmt: skip
        """The image (uint8 [H, W, 3]) for `prompt_ids` (exactly the text encoder's positions, padded as its
        tokenizer pads). With guidance (a batch-2 pipeline) `negative_ids` is the negative prompt's ids (the
        empty prompt's for plain classifier-free guidance). `thermal_policy` (a StepPolicy) lets the die's
        temperature cut the steps and lower the clock; `latents` replaces the seeded start noise.
        `prompt` / `negative_prompt` (text, default "") instead of ids: a folder's tokenizer encodes them."""
        if prompt is not None or negative_prompt is not None:
            if self.tokenizer is None:
                raise NPUError("ERR_INVALID_CONFIG", "prompt=: this pipeline has no tokenizer (compile a Stable "
                               "Diffusion folder), give prompt_ids=")  # fmt: skip
            if prompt_ids is not None or negative_ids is not None:
                raise NPUError("ERR_INVALID_CONFIG", "give the prompt as text or as ids, not both")
            prompt_ids = np.array(self.tokenizer.encode(prompt or "", "prompt"))
            negative_ids = np.array(self.tokenizer.encode(negative_prompt or "", "negative_prompt"))
            if self.meta["batch"] == 1:
                negative_ids = None
        if prompt_ids is None:
            raise NPUError("ERR_INVALID_CONFIG", "give prompt_ids= (token ids) or prompt= (text)")
        plan = self.scheduler.plan(steps)
        if isinstance(guidance, bool) or not isinstance(guidance, numbers.Real) or not math.isfinite(guidance):
            raise NPUError("ERR_INVALID_CONFIG", f"guidance={guidance!r}: give a finite number (7.5 is usual)")
        batch = self.meta["batch"]
        if batch == 1 and guidance != 1:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"guidance={guidance}: this pipeline was compiled with guidance=False (batch 1); pass guidance=1 "
                "or compile with guidance=True",
            )
        ids = self._ids(prompt_ids, "prompt_ids")
        if batch == 2:
            if negative_ids is None:
                raise NPUError(
                    "ERR_INVALID_CONFIG",
                    "negative_ids: classifier-free guidance needs the negative prompt's ids (the empty prompt's, "
                    "padded, for plain guidance)",
                )
            ids = np.stack([self._ids(negative_ids, "negative_ids"), ids])
        else:
            ids = ids[None]
        shape = [1, self.meta["channels"], *self.meta["latent"]]
        if latents is None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise NPUError("ERR_INVALID_CONFIG", f"seed={seed!r}: give an integer")
            latents = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        elif np.shape(latents) != tuple(shape):
            raise NPUError("ERR_INVALID_CONFIG", f"latents: shape {np.shape(latents)}, the UNet takes {shape}")
        loop_thermal = None
        if thermal_policy is not None:
            loop_thermal = ThermalLoop(NPUConfig(**self.meta["config"]), self.step_work(), thermal_policy,
                                       thermal, start_c=start_c)  # fmt: skip
        with self._lock:
            return self._run(ids, latents, plan, guidance, batch, loop_thermal)

    def _run(self, ids, latents, plan, guidance, batch, loop_thermal) -> np.ndarray:
        for m in (m for modules in self._modules.values() for m in modules):
            m["reset_profile"]()
        encode = self._vm["encode"]
        if self.meta["te_batch"] == len(ids):  # the embedding stays a device tensor: the UNet's input
            embedding = _first(encode(tvm.runtime.tensor(ids)))
        else:  # a batch-1 text encoder: one call per row, stacked
            rows = [_first(encode(tvm.runtime.tensor(row[None]))).numpy() for row in ids]
            embedding = tvm.runtime.tensor(np.concatenate(rows))
        order, names = self.meta["unet_order"], self.meta["unet_inputs"]
        resident = {names[2]: embedding}
        if "prompt" in self._modules:  # the cross-attention K / V, once per image, kept on the device
            kv = self._vm["prompt"](embedding)
            resident.update({n: kv[k] for k, n in enumerate(self.meta["prompt_outputs"])})
        self._profile = {"encode_cycles": self._cycles("encode"), "prompt_cycles": self._cycles("prompt"),
                         "steps": [], "thermal": []}  # fmt: skip
        denoise = self._vm["denoise"]
        done = [0]

        def unet(x, t):
            feeds = {names[0]: tvm.runtime.tensor(x), names[1]: self._timestep(t), **resident}
            out = denoise(*[feeds[n] for n in order])
            return _first(out).numpy()

        def on_step(i, t):
            total = self._cycles("denoise")
            self._profile["steps"].append({"step": i, "t": t, "cycles": total - done[0]})
            done[0] = total

        x, _ = loop.run(unet, latents, plan, self.scheduler, guidance, batch, loop_thermal, on_step)
        if loop_thermal is not None:
            self._profile["thermal"] = loop_thermal.log
        decoded = self._vae["main"](tvm.runtime.tensor(x / np.float32(self.meta["vae_scaling_factor"])))
        return loop.to_image(_first(decoded).numpy())

    # -- what it cost --------------------------------------------------------------------------------------

    def _cycles(self, entry: str) -> int:
        return sum(runtime.profile_of(m)["total"]["total_cycles"] for m in self._modules.get(entry, ()))

    def step_work(self):
        """One UNet call's NPU work (power.NpuWork, from its regions' command streams, each region as
        many times as the UNet calls it)."""
        from ..contract import stream
        from ..power import work_of

        cfg, total = NPUConfig(**self.meta["config"]), None
        calls = self.meta["calls"]["denoise"]
        for m in self._modules["denoise"]:
            w = work_of(cfg, stream.decode(bytes(m["get_stream"]())).commands)
            for _ in range(calls.get(runtime.profile_of(m)["symbol"], 1)):  # a shared region, once per call
                total = w if total is None else total + w
        if total is None:
            raise NPUError("NPU_E_UNSUPPORTED_OP", "the UNet has no NPU region: nothing of it runs on the NPU")
        return total

    def profile(self) -> dict:
        """The last `generate`'s cycles: "encode_cycles", "prompt_cycles" (the cross-attention K / V, once
        per image; 0 with hoist_prompt=False), per step {"step", "t", "cycles"}, "denoise_cycles" (their
        sum), and with a thermal policy its per-step log (temperature, clock, steps in all, cut)."""
        p = dict(self._profile)
        p["denoise_cycles"] = sum(s["cycles"] for s in p["steps"])
        return p

    def export_library(self, path):
        """Write the text encoder + UNet executable (one library, its metadata inside); `load(path,
        vae_decoder)` reads it back."""
        return runtime.export_library(self.executable, path)


def load(path, vae_decoder, vae: str = "cpu") -> Pipeline:
    """A pipeline from `export_library`'s library and the VAE decoder's ONNX file (built again: for the CPU
    in seconds)."""
    executable = runtime.load_module(path)
    try:
        meta = json.loads(str(relax.VirtualMachine(executable, tvm.cpu())[META_FUNCTION]()))
    except (AttributeError, RuntimeError, ValueError) as err:
        raise NPUError("ERR_BAD_ARTIFACT", f"{path} is not a diffusion pipeline library ({err})") from None
    if meta.get("format") != FORMAT:
        raise NPUError("ERR_BAD_ARTIFACT", f"{path}: pipeline format {meta.get('format')}, this release reads {FORMAT}")
    va_mod = _import(_read(vae_decoder, "vae_decoder"), 1, tuple(meta["latent"]))
    if vae == "cpu":
        from ..build import cpu_pipeline

        vae_ex = tvm.compile(va_mod, target="llvm", relax_pipeline=cpu_pipeline())
    else:
        from ..build import build

        vae_ex = build(va_mod, config=NPUConfig(**meta["config"]))
    return Pipeline(executable, vae_ex, meta)
