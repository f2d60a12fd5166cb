"""SD-1.5-shaped UNet step estimate on npu-laptop (issue 34, item 5). A benchmark, not a test.

SD-1.5's UNet (diffusers' UNet2DConditionModel with its default block layout, cross_attention_dim 768: the
SD-1.5 config) is instantiated once on the CPU, seeded. One forward pass on the meta device with hooks
records every block's input shapes; blocks of the same class, weights' shapes and input shapes are one
*kind* (a ResNet block at each width / resolution, incl. the channel-changing ones and the up blocks'
concatenated inputs; the transformer blocks at 320@64x64, 640@32x32, 1280@16x16 and 1280@8x8; the down
and up samplers; conv_in; GroupNorm + SiLU + conv_out; the time-embedding MLP). ONE instance of each kind
is exported to ONNX at static shapes and estimated on npu-laptop (tvm_npu.estimate: every NPU region
planned and costed, nothing run); its cycles, DDR bytes, regions and CPU MACs are multiplied by the
kind's count and summed into a step. The seeded weights do not change cycles (shapes do).

What the sum leaves out: the sinusoidal timestep projection (Sin / Cos of the run-time timestep, on the
CPU in the real UNet too), the skip connections' concats (copies between blocks) and the DDR round trip
of each block boundary that a whole-UNet build might keep in SRAM (each block is its own model here, so
the sum counts every boundary through DDR: an upper bound on that traffic). CPU ops are not timed: a
kind's CPU MACs are reported, not costed.

Results are cached per kind and batch in benchmarks/results/diffusion_sd15_step.json; a run resumes.
Run one at a time: the 64x64 kinds take minutes and GBs each.

    python benchmarks/diffusion_sd15_step.py [--batch 1 2] [--only KIND...] [--report]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import tempfile
import time
import traceback
import warnings
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "diffusion_sd15_step.json"
CONFIG = "npu-laptop"
STEPS = 20
LATENT, TEXT, TEXT_DIM, TIME_DIM = 64, 77, 768, 1280
KEYS = ("cycles", "macs", "cpu_macs", "regions", "ddr_bytes", "cpu_codes", "latency_us")


def sd15_unet(device: str = "cpu"):
    """SD-1.5's UNet: diffusers' default UNet2DConditionModel layout (320/640/1280/1280, 2 layers a block,
    attention_head_dim 8, which diffusers reads as 8 heads) with cross_attention_dim 768, seeded."""
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    with torch.device(device):
        return UNet2DConditionModel(sample_size=LATENT, cross_attention_dim=TEXT_DIM).eval()


def _hooked_modules(unet) -> dict:
    """name -> module of every block the step is cut into."""
    named = dict(unet.named_modules())
    blocks = {"conv_in": named["conv_in"], "time_embedding": named["time_embedding"], "conv_out": named["conv_out"]}
    for name, m in named.items():
        cls = type(m).__name__
        if cls in ("ResnetBlock2D", "Transformer2DModel", "Downsample2D", "Upsample2D"):
            blocks[name] = m
    return blocks


def _kind_name(cls: str, module, shapes: list) -> str:
    x = shapes[0]
    if cls == "ResnetBlock2D":
        return f"resnet {module.in_channels}->{module.out_channels} @{x[2]}x{x[3]}"
    if cls == "Transformer2DModel":
        return f"transformer {x[1]}@{x[2]}x{x[3]}"
    if cls == "Downsample2D":
        return f"downsample {x[1]} {x[2]}->{x[2] // 2}"
    if cls == "Upsample2D":
        return f"upsample {x[1]} {x[2]}->{x[2] * 2}"
    if cls == "conv_out":
        return f"norm+silu+conv_out {x[1]}->4 @{x[2]}x{x[3]}"
    if cls == "conv_in":
        return f"conv_in 4->{module.out_channels} @{x[2]}x{x[3]}"
    return "time_embedding 320->1280->1280"


def enumerate_kinds() -> tuple[dict, int]:
    """({kind: {class, count, params, instances, shapes}}, the whole UNet's parameter count), from a
    meta-device forward pass at batch 1 (shapes only, no memory, no arithmetic)."""
    import torch

    unet = sd15_unet("meta")
    total = sum(p.numel() for p in unet.parameters())
    blocks = _hooked_modules(unet)
    seen: dict = {}

    def hook(name):
        def f(module, args, kwargs, _out):
            shapes = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
            if "encoder_hidden_states" in kwargs and kwargs["encoder_hidden_states"] is not None:
                shapes.append(list(kwargs["encoder_hidden_states"].shape))
            seen.setdefault(name, shapes)

        return f

    handles = [m.register_forward_hook(hook(n), with_kwargs=True) for n, m in blocks.items()]
    with torch.no_grad():
        unet(torch.empty(1, 4, LATENT, LATENT, device="meta"), torch.tensor(10, device="meta"),
             encoder_hidden_states=torch.empty(1, TEXT, TEXT_DIM, device="meta"))  # fmt: skip
    for h in handles:
        h.remove()
    kinds: dict = {}
    for name, m in blocks.items():
        cls = type(m).__name__ if name not in ("conv_in", "conv_out", "time_embedding") else name
        params = sum(p.numel() for p in m.parameters())
        if name == "conv_out":  # GroupNorm + SiLU + conv_out: the UNet's tail, one kind
            params += sum(p.numel() for p in unet.conv_norm_out.parameters())
        shapes = seen[name]
        wshapes = [list(p.shape) for p in m.parameters()]
        kind = _kind_name(cls, m, shapes)
        k = kinds.setdefault(kind, {"class": cls, "count": 0, "params": params, "instances": [], "shapes": shapes,
                                    "_w": wshapes})  # fmt: skip
        if k["_w"] != wshapes or k["shapes"] != shapes:
            raise RuntimeError(f"{name} is not the same kind as {k['instances'][0]}")  # a keying bug: stop
        k["count"] += 1
        k["instances"].append(name)
    for k in kinds.values():
        del k["_w"]
    return kinds, total


def _wrapper(unet, kind: dict):
    """A torch module calling the kind's first instance with the inputs the UNet gives it."""
    import torch

    name, cls = kind["instances"][0], kind["class"]
    sub = dict(unet.named_modules())[name]

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sub = sub
            if cls == "conv_out":
                self.norm, self.act = unet.conv_norm_out, unet.conv_act

        def forward(self, *xs):
            if cls == "ResnetBlock2D":
                return self.sub(xs[0], xs[1])
            if cls == "Transformer2DModel":
                return self.sub(xs[0], encoder_hidden_states=xs[1], return_dict=False)[0]
            if cls == "conv_out":
                return self.sub(self.act(self.norm(xs[0])))
            return self.sub(xs[0])

    return Block()


def export_kind(unet, kind: dict, batch: int, path: str) -> str:
    """The kind's first instance to ONNX at `batch`, static shapes, seeded inputs."""
    import torch

    from tvm_npu.models import diffusers_export

    torch.manual_seed(1)
    args = tuple(torch.randn(batch, *s[1:]) for s in kind["shapes"])
    names = [f"x{i}" for i in range(len(args))]
    return diffusers_export._export(_wrapper(unet, kind), args, path, names, ["y"], None)


def _estimate(path: str) -> dict:
    import tvm_npu
    from tvm_npu.contract.errors import NPUError
    from tvm_npu.dse.estimator import estimate

    t = time.perf_counter()
    try:
        e = estimate(tvm_npu.from_onnx(path), CONFIG)
    except NPUError as err:
        return {"error": err.code, "message": str(err)[:400], "compile_s": round(time.perf_counter() - t, 1)}
    except Exception as err:  # pylint: disable=broad-except  # reported, not hidden: an uncoded failure
        return {"error": "UNCODED " + type(err).__name__, "message": traceback.format_exc()[-600:],
                "compile_s": round(time.perf_counter() - t, 1)}  # fmt: skip
    cfg = tvm_npu.get_config(CONFIG)
    out = {k: e[k] for k in KEYS}
    out["mac_util"] = e["macs"] / (e["cycles"] * cfg.mac_rows * cfg.mac_cols / cfg.fp16_rate_div) if e["cycles"] else 0
    out["compile_s"] = round(time.perf_counter() - t, 1)
    return out


def _load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def _save(cache: dict) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(cache, indent=1) + "\n")


def _order(kinds: dict) -> list:
    """Cheapest compile first (pixels x channels of the input), so a run cut short has the most kinds."""

    def size(k):
        s = kinds[k]["shapes"][0]
        work = s[1] * (s[2] * s[3] if len(s) == 4 else 1)
        return work * (s[2] * s[3] if kinds[k]["class"] == "Transformer2DModel" else 1)

    return sorted(kinds, key=size)


def run(batches: list, only: list | None, skip: list | None = None) -> dict:
    cache = _load()
    kinds, total = enumerate_kinds()
    cache["unet"] = {"params": total, "params_by_kinds": sum(k["params"] * k["count"] for k in kinds.values()),
                     "config": "UNet2DConditionModel defaults, cross_attention_dim 768, sample_size 64"}  # fmt: skip
    cache.setdefault("kinds", {})
    for name, k in kinds.items():
        cache["kinds"].setdefault(name, {}).update({x: k[x] for x in ("class", "count", "params", "shapes")},
                                                  instances=k["instances"])  # fmt: skip
    _save(cache)
    unet = sd15_unet("cpu")
    with tempfile.TemporaryDirectory() as d:
        for batch in batches:
            for name in _order(kinds):
                slot = cache["kinds"][name]
                if f"b{batch}" in slot or (only and not any(o in name for o in only)) or name in (skip or ()):
                    continue
                print(f"[{time.strftime('%H:%M:%S')}] batch {batch} {name} ...", flush=True)
                path = export_kind(unet, kinds[name], batch, str(Path(d) / "k.onnx"))
                slot[f"b{batch}"] = _estimate(path)
                print("   ", json.dumps(slot[f"b{batch}"])[:300], flush=True)
                _save(cache)
                gc.collect()
    return cache


def transformer_macs(channels: int, side: int, batch: int = 1) -> int:
    """An SD-1.5 transformer block's MACs counted from its shapes (N tokens of C channels, 77 x 768 text):
    proj_in, Q/K/V/out, cross Q/out, GEGLU (C -> 8C, 4C -> C) and proj_out are 20 N C^2; QK^T and .V 2 N^2 C;
    cross K/V 2 x 77 x 768 C; cross QK^T and .V 2 x 77 N C. It matches the estimate's NPU MACs exactly at
    1280@16x16 and 640@32x32, and brackets a kind that was not compiled."""
    n = side * side
    return batch * (
        20 * n * channels**2 + 2 * n * n * channels + 2 * TEXT * TEXT_DIM * channels + 2 * TEXT * n * channels
    )


def summary(cache: dict, batch: int) -> dict:
    """The step's sums at `batch` over the kinds estimated; the kinds missing or refused, listed."""
    import tvm_npu

    clock = tvm_npu.get_config(CONFIG).clock_mhz * 1e6
    tot = {"cycles": 0, "macs": 0, "cpu_macs": 0, "ddr_bytes": 0, "regions": 0}
    missing, failed = [], {}
    for name, k in cache["kinds"].items():
        r = k.get(f"b{batch}")
        if r is None:
            missing.append(name)
        elif "error" in r:
            failed[name] = r["error"]
        else:
            for x in tot:
                tot[x] += r[x] * k["count"]
    tot.update(seconds_per_step=tot["cycles"] / clock, seconds_20_steps=STEPS * tot["cycles"] / clock,
               missing=missing, failed=failed)  # fmt: skip
    # A transformer kind not compiled: its MACs from its shapes, and its cycles at the peak fp16 rate (a lower
    # bound) and at the MAC utilization of the compiled transformer kind with the most tokens, at this batch if
    # it compiled at it (indicative, not a bound: more tokens may use the array worse).
    cfg = tvm_npu.get_config(CONFIG)
    peak = cfg.mac_rows * cfg.mac_cols / cfg.fp16_rate_div
    done = [(k["shapes"][0][2], b == f"b{batch}", k[b]) for k in cache["kinds"].values()
            if k["class"] == "Transformer2DModel" for b in ("b1", "b2") if "cycles" in k.get(b, {})]  # fmt: skip
    util = max(done, key=lambda t: t[:2])[2]["mac_util"] if done else None
    gap = sum(transformer_macs(k["shapes"][0][1], k["shapes"][0][2], batch) * k["count"]
              for n, k in cache["kinds"].items() if n in missing and k["class"] == "Transformer2DModel")  # fmt: skip
    if gap:
        low, mid = tot["cycles"] + gap / peak, tot["cycles"] + gap / (peak * util) if util else None
        tot["missing_bracket"] = {
            "missing_macs": gap, "at_util": util, "cycles_low": int(low), "seconds_20_steps_low": STEPS * low / clock,
            "cycles_at_util": int(mid or 0), "seconds_20_steps_at_util": STEPS * (mid or 0) / clock,
        }  # fmt: skip
    return tot


def report(cache: dict, batches: list) -> None:
    u = cache["unet"]
    print(f"SD-1.5 UNet: {u['params']:,} parameters; the kinds x counts: {u['params_by_kinds']:,}")
    for batch in batches:
        s = summary(cache, batch)
        print(f"\nbatch {batch}, {CONFIG}: {s['cycles']:,} cycles a step = {1e3 * s['seconds_per_step']:.1f} ms, "
              f"{STEPS} steps {s['seconds_20_steps']:.2f} s; NPU MACs {s['macs']:,}, CPU MACs {s['cpu_macs']:,}, "
              f"DDR {s['ddr_bytes'] / 1e9:.2f} GB, {s['regions']} regions")  # fmt: skip
        if s["missing"] or s["failed"]:
            print(f"   missing: {s['missing']}; refused: {s['failed']}")
        b = s.get("missing_bracket")
        if b:
            print(f"   with the missing transformer kinds' {b['missing_macs']:,} MACs (counted from shapes): >= "
                  f"{b['cycles_low']:,} cycles a step (peak rate), {b['seconds_20_steps_low']:.2f} s for {STEPS} "
                  f"steps; at {100 * (b['at_util'] or 0):.1f}% utilization {b['cycles_at_util']:,} cycles, "
                  f"{b['seconds_20_steps_at_util']:.2f} s")  # fmt: skip
        rows = [(n, k, k[f"b{batch}"]) for n, k in cache["kinds"].items() if "cycles" in k.get(f"b{batch}", {})]
        for n, k, r in sorted(rows, key=lambda t: -t[2]["cycles"] * t[1]["count"]):
            share = r["cycles"] * k["count"] / s["cycles"]
            print(f"   {n:34s} x{k['count']:<2} {r['cycles']:>11,} cyc {100 * share:5.1f}%  util "
                  f"{100 * r['mac_util']:5.1f}%  regions {r['regions']:>3}  CPU MACs {r['cpu_macs']:>13,} "
                  f"{r['cpu_codes']}")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 2], help="batches to estimate (2: CFG)")
    ap.add_argument("--only", nargs="+", help="kinds whose name contains one of these")
    ap.add_argument("--skip", nargs="+", help="kinds (full names) not to compile in this run")
    ap.add_argument("--report", action="store_true", help="sum and print the cached results only")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)
    cache = _load() if args.report else run(args.batch, args.only, args.skip)
    cache["summary"] = {f"b{b}": summary(cache, b) for b in args.batch}
    _save(cache)
    report(cache, args.batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
