"""Diffusion UNet benchmark (issue 34): fused against unfused attention, the UNet step's MAC utilization on
the laptop preset, and SD-1.5-sized transformer blocks. All numbers come from the cost model (tvm_npu.estimate:
every NPU region planned and costed, nothing run), in one run, as ratios. This is a benchmark, not a test.

1. Tiny UNet (tvm_npu.models.diffusers_export, seeded): one step's cycles, its MACs on the NPU and
   MAC utilization = NPU MACs / (cycles x peak fp16 MACs per cycle), on npu-ref and npu-laptop.
2. Attention fused against unfused, for each attention block of the tiny UNet (self- and cross-attention).
   The block is cut out of the same ONNX file (onnx.utils.extract_model), from its to_q input (and to_k's) to
   its to_out output. "Fused" is that block built as one model: what the build makes of it today (head
   slices, QK^T, the scaled softmax and .V in one region; with the CPU's head reshapes it is 4 regions in all).
   "Unfused" is the same ops cut into five models at the kernel edges a backend without the fusion has:
   Q/K/V projections with the head split, QK^T, softmax, .V, head merge with to_out.
   Each one is its own region, and its intermediate goes through DDR. The unfused
   cycles are the sum of the five. No build option is involved: only the public estimate, run on
   sub-models of the user's file.
3. (Without --quick) SD-1.5-sized Transformer2DModel blocks (8 heads, cross-attention to 77 x 768) at
   320@64x64, 640@32x32 and 1280@16x16, exported at batch 1 (1280@16x16 also at batch 2, the CFG pair)
   and estimated on npu-laptop, with their results cached in benchmarks/results/diffusion_unet_sd15.json
   (delete an entry to measure it again). Each compile takes minutes and about 2 GB.

    python benchmarks/diffusion_unet.py [--quick] [--channels 1280]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

import onnx
import onnx.utils

import tvm_npu
from tvm_npu.dse.estimator import estimate
from tvm_npu.models import diffusers_export

RESULTS = Path(__file__).parent / "results" / "diffusion_unet_sd15.json"
SD15_BLOCKS = ((320, 64), (640, 32), (1280, 16))  # (channels, latent side) of SD-1.5's transformer blocks
# Also at batch 2: classifier-free guidance runs the UNet on the conditioned and unconditioned latents
# together, so each weight read serves twice the tokens.
SD15_BATCH2 = ((1280, 16),)


def _util(e: dict, config: str) -> float:
    cfg = tvm_npu.get_config(config)
    return e["macs"] / (e["cycles"] * cfg.mac_rows * cfg.mac_cols / cfg.fp16_rate_div)


def _cycles(path: str, config: str) -> dict:
    return estimate(tvm_npu.from_onnx(path), config)


def _attention_edges(model: onnx.ModelProto, prefix: str) -> tuple[list, list]:
    """The fused block's (inputs, output) and the five unfused pieces' [(inputs, outputs)] of `prefix`."""
    out = {n.name: list(n.output) for n in model.graph.node}
    inp = {n.name: list(n.input) for n in model.graph.node}
    q_in, kv_in = inp[prefix + "/to_q/MatMul"][0], inp[prefix + "/to_k/MatMul"][0]
    ins = list(dict.fromkeys([q_in, kv_in]))
    q, k, v = out[prefix + "/Mul"][0], out[prefix + "/Mul_1"][0], out[prefix + "/Transpose_1"][0]
    s, a, o = out[prefix + "/MatMul"][0], out[prefix + "/Softmax"][0], out[prefix + "/MatMul_1"][0]
    y = out[prefix + "/to_out.0/Add"][0]
    pieces = [(ins, [q, k, v]), ([q, k], [s]), ([s], [a]), ([a, v], [o]), ([o], [y])]
    return (ins, [y]), pieces


def _extract(src: str, ins: list, outs: list, tmp: Path, i: int) -> str:
    path = str(tmp / f"piece{i}.onnx")
    onnx.utils.extract_model(src, path, ins, outs)
    return path


def attention_fused_vs_unfused(src: str, config: str) -> list[dict]:
    """Per attention block of the ONNX UNet (or block) `src`: fused and unfused cycles on `config`."""
    model = onnx.shape_inference.infer_shapes(onnx.load(src))
    inferred = src + ".inferred.onnx"
    onnx.save(model, inferred)
    prefixes = sorted({n.name[: -len("/to_q/MatMul")] for n in model.graph.node if n.name.endswith("/to_q/MatMul")})
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for prefix in prefixes:
            (ins, outs), pieces = _attention_edges(model, prefix)
            fused = _cycles(_extract(inferred, ins, outs, tmp, 0), config)
            parts = [_cycles(_extract(inferred, i, o, tmp, n + 1), config) for n, (i, o) in enumerate(pieces)]
            rows.append({
                "block": prefix.strip("/").replace("model/", ""),
                "fused_cycles": fused["cycles"], "fused_regions": fused["regions"], "fused_cpu_macs": fused["cpu_macs"],
                "unfused_cycles": sum(p["cycles"] for p in parts), "unfused_regions": sum(p["regions"] for p in parts),
                "unfused_cpu_macs": sum(p["cpu_macs"] for p in parts), "macs": fused["macs"],
                "unfused_ddr_bytes": sum(p["ddr_bytes"] for p in parts), "fused_ddr_bytes": fused["ddr_bytes"],
            })  # fmt: skip
    return rows


def _print_attention(rows: list, config: str) -> None:
    print(f"2. Attention blocks, fused (one model) against unfused (five models, intermediates in DDR), {config}")
    print(f"   {'block':55s} {'fused cyc':>10s} {'unfused cyc':>12s} {'ratio':>6s} {'DDR B fused':>12s} "
          f"{'DDR B unfused':>14s} {'regions':>8s} {'CPU MACs':>9s}")  # fmt: skip
    for r in rows:
        print(f"   {r['block']:55s} {r['fused_cycles']:>10,} {r['unfused_cycles']:>12,} "
              f"{r['unfused_cycles'] / r['fused_cycles']:>5.2f}x {r['fused_ddr_bytes']:>12,} "
              f"{r['unfused_ddr_bytes']:>14,} {r['fused_regions']:>3}/{r['unfused_regions']:<4} "
              f"{r['fused_cpu_macs'] + r['unfused_cpu_macs']:>9,}")  # fmt: skip
    f, u = sum(r["fused_cycles"] for r in rows), sum(r["unfused_cycles"] for r in rows)
    print(f"   all attention blocks: {f:,} fused, {u:,} unfused cycles: {u / f:.2f}x (issue 34's target >= 1.3x)")


def _sd15_block(channels: int, side: int, tmp: Path, batch: int = 1) -> str:
    """SD-1.5's Transformer2DModel at `channels` (8 heads) on a side x side latent at `batch` (2: the
    classifier-free guidance pair), seeded."""
    import torch
    from diffusers.models.transformers.transformer_2d import Transformer2DModel

    torch.manual_seed(0)
    block = Transformer2DModel(
        num_attention_heads=8, attention_head_dim=channels // 8, in_channels=channels, cross_attention_dim=768,
        norm_num_groups=32,
    ).eval()  # fmt: skip

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x, text):
            return self.block(x, encoder_hidden_states=text, return_dict=False)[0]

    args = (torch.randn(batch, channels, side, side), torch.randn(batch, 77, 768))
    path = str(tmp / f"tf{channels}b{batch}.onnx")
    return diffusers_export._export(Block(), args, path, ["x", "text"], ["y"], None)


def sd15_blocks(channels_only: tuple | None = None) -> dict:
    """Estimate the SD-1.5-sized blocks not yet in the cache (those of `channels_only`, if given)."""
    cache = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    runs = [(c, s, 1) for c, s in SD15_BLOCKS] + [(c, s, 2) for c, s in SD15_BATCH2]
    with tempfile.TemporaryDirectory() as d:
        for channels, side, batch in runs:
            key = f"transformer {channels}@{side}x{side}" + (f" batch {batch}" if batch > 1 else "")
            if key in cache or (channels_only and channels not in channels_only):
                continue
            t = time.perf_counter()
            e = _cycles(_sd15_block(channels, side, Path(d), batch), "npu-laptop")
            cache[key] = {k: e[k] for k in ("cycles", "macs", "cpu_macs", "regions", "ddr_bytes", "cpu_codes")}
            cache[key].update(mac_util=_util(e, "npu-laptop"), compile_s=round(time.perf_counter() - t, 1))
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(cache, indent=1) + "\n")
    return cache


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny UNet only (about 2 minutes)")
    ap.add_argument("--channels", type=int, nargs="*", help="SD-1.5 blocks of these channel counts only")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs; fallbacks are in the estimate
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        unet = diffusers_export.export_unet(str(Path(d) / "unet.onnx"), batch=1)
        print("1. Tiny UNet, one step at batch 1 (cost model)")
        for config in ("npu-ref", "npu-laptop"):
            e = _cycles(unet, config)
            print(f"   {config:11s} {e['cycles']:>9,} cycles, {e['macs']:,} MACs on the NPU ({e['cpu_macs']:,} on the "
                  f"CPU), {e['regions']} regions; MAC utilization {100 * _util(e, config):.1f}% (target >= 50% on "
                  "npu-laptop)")  # fmt: skip
        for config in ("npu-ref", "npu-laptop"):
            _print_attention(attention_fused_vs_unfused(unet, config), config)
    if not args.quick:
        print("3. SD-1.5-sized transformer blocks, npu-laptop, batch 1 (1280 also at 2; cached in", RESULTS.name + ")")
        for key, r in sd15_blocks(tuple(args.channels or ())).items():
            if "cycles" not in r:  # the attention rows (attention_fused_vs_unfused)
                continue
            share = r["macs"] / (r["macs"] + r["cpu_macs"])
            print(f"   {key:32s} {r['cycles']:>10,} cycles, {100 * share:.0f}% of MACs on the NPU, MAC utilization "
                  f"{100 * r['mac_util']:.1f}%, {r['regions']} region(s), {r['ddr_bytes'] / 1e6:.1f} MB DDR; "
                  f"on the CPU: {r['cpu_codes']}")  # fmt: skip
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
