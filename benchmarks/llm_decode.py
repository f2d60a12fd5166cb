"""LLM benchmark (issue 20): decode against its DDR roofline, prefill MAC utilization, the host emulator
next to onnxruntime, and a Qwen2-1.5B-shaped estimate on npu-ref and npu-laptop.

Three parts, printed side by side in one run (a benchmark, not a test: it prints numbers; compare them on
one machine, in one run):

1. Measured on the reference NPU, through `tvm_npu.llm` with a GPT-2-like and a Llama-like step model
   (tvm_npu.models.decoder, seeded weights): one decode step's cycles next to its DDR roofline (the
   bytes it moved / ddr_bytes_per_cycle, and the ideal: weights + the KV rows read, once), and a
   128-token prefill's MAC utilization; with the fp16 and the int8 KV cache (kv8), and the decode step's DDR
   bytes and the KV bytes it read; where the cache lives (kv_placement: "sram" when the whole cache fits in
   half of SRAM, the default "auto" on these models, next to the same models forced to "ddr"). With an SRAM
   cache the ideal roofline has no KV bytes: the rows never cross DDR.
2. Host emulator: the wall time of one decode step of the GPT-2-like model on the reference NPU
   (tvm_npu, CPU ops included) next to onnxruntime's CPU time for the same step model, same machine,
   interleaved rounds.
3. A Qwen2-1.5B-shaped configuration (28 layers, d 1536, 12 query / 2 KV heads, FFN 8960, vocab
   151936), cost model only: one decoder layer's step (decode S=1, prefill S=128) estimated by the
   compiler (tvm_npu.dse.estimator: every NPU region planned and costed, nothing run), times 28, plus
   the LM head (one eighth of the vocabulary, times 8: its cost is linear in the columns); random
   weights. Prefill ms and decode tokens/s at the preset's clock, fp16, int8 (W8A16) and int4 (W4A16,
   group 128) weights, next
   to the field's 22 tokens/s reference (issue 20).

4. int4 against int8 weights (issue 21): one decode step of the measured models with group-wise int4
   weights (W4A16, group 128) next to int8 (W8A16): DDR bytes per token and tokens/s on the cycle model,
   with the fp16 KV cache on both sides, then the int8 KV cache on both sides.

    python benchmarks/llm_decode.py [--skip-measured] [--skip-host] [--skip-qwen] [--skip-int4] [--rounds 51]
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tvm import relax

import tvm_npu
from tvm_npu.dse.estimator import estimate
from tvm_npu.models.decoder import gpt2_step, llama_step
from tvm_npu.quantization import quantize_weights_int4, quantize_weights_int8

QWEN = dict(layers=28, d=1536, heads=12, kv_heads=2, ffn=8960, vocab=151936)
FIELD_TOKENS_PER_S = 22  # issue 20: a Qwen2-1.5B-class model on a laptop NPU after weight re-layout


def _measured(name, builder, config: str, kv_dtype: str = "float16", kv_placement: str = "auto") -> dict:
    """Decode roofline and prefill utilization of one small model on the reference NPU (`kv_dtype` "int8": the
    int8 KV cache, calibrated on the default prompts; `kv_placement` where the cache lives)."""
    lm = tvm_npu.llm.compile(
        functools.partial(builder),
        max_context=256,
        prefill_len=128,
        config=config,
        kv_dtype=kv_dtype,
        kv_placement=kv_placement,
    )
    cfg = tvm_npu.get_config(config)
    lm.prefill(np.arange(128, dtype=np.int64) % 200)
    prefill = lm.profile()["prefill"]
    lm.decode(7)
    decode = lm.profile()["decode"]
    regions = lm.reports["decode"].regions.values()
    weights = sum(layer["weight_bytes"] for r in regions for layer in r.get("layers", []))
    info = lm.meta["step"]
    el = 1 if kv_dtype == "int8" else 2
    kv_read = 2 * info["layers"] * info["kv_heads"] * 129 * info["head_dim"] * el  # K and V, 129 rows
    kv_ddr = kv_read if decode["kv_placement"] == "ddr" else 0  # an SRAM cache's rows never cross DDR
    with tempfile.TemporaryDirectory() as tmp:
        artifact = lm.export_library(Path(tmp) / "lm.so").stat().st_size
    return {
        **lm.memory(),
        "artifact_bytes": artifact,
        "model": name + (" kv8" if kv_dtype == "int8" else ""),
        "kv": decode["kv_placement"],
        "kv_bytes": decode["kv_bytes"],
        "decode_cycles": decode["cycles"],
        "decode_ddr_bytes": decode["ddr_bytes"],
        "roofline_moved": decode["ddr_bytes"] / cfg.ddr_bytes_per_cycle,
        "roofline_ideal": (weights + kv_ddr) / cfg.ddr_bytes_per_cycle,
        "prefill_mac_util": prefill["mac_util"],
        "prefill_cycles": prefill["cycles"],
    }


def _print_measured(rows: list) -> None:
    print("1. Measured on the reference NPU (npu-ref; 128-token prefill, then one decode step at position 128)")
    print(f"   {'model':12s} {'KV in':>10s} {'decode cycles':>14s} {'roofline(moved)':>16s} {'% of it':>8s} "
          f"{'roofline(ideal)':>16s} {'% of it':>8s} {'prefill MAC util':>17s} {'decode DDR B':>13s} "
          f"{'KV bytes':>9s}")  # fmt: skip
    for r in rows:
        print(
            f"   {r['model']:17s} {r['kv']:>5s} {r['decode_cycles']:>9,} {r['roofline_moved']:>16,.0f} "
            f"{100 * r['roofline_moved'] / r['decode_cycles']:>7.1f}% {r['roofline_ideal']:>16,.0f} "
            f"{100 * r['roofline_ideal'] / r['decode_cycles']:>7.1f}% {100 * r['prefill_mac_util']:>16.1f}% "
            f"{r['decode_ddr_bytes']:>13,} {r['kv_bytes']:>9,}"
        )
    for r in rows:  # prefill and decode in one library, their weights held once (docs/llm.md, "The artifact")
        print(
            f"   {r['model']:12s} NPU weights {r['weights_bytes']:,} B unshared, {r['weights_resident_bytes']:,} B "
            f"resident; lm.export_library: {r['artifact_bytes']:,} B"
        )


def _host(rounds: int) -> None:
    """One decode step of the GPT-2-like model: tvm_npu (reference NPU + CPU ops) vs onnxruntime (CPU)."""
    T = 64
    step = gpt2_step(layers=4, d=128, heads=4, ffn=512, vocab=512, max_context=T, seq_len=1)
    lm = tvm_npu.llm.compile(step, max_context=T)
    lm.prefill(np.array([1], np.int64))
    sess = ort.InferenceSession(step.SerializeToString())
    names = [i.name for i in step.graph.input]
    cache = [np.zeros((1, 4, T, 32), np.float32) for _ in names[2:]]
    feed = dict(zip(names, [np.array([[5]], np.int64), np.array([1], np.int64), *cache]))
    npu, cpu = [], []
    for _ in range(rounds):  # interleaved, so background load hits both alike
        lm.reset()
        lm.prefill(np.array([1], np.int64))
        t = time.perf_counter()
        lm.decode(5)
        npu.append(time.perf_counter() - t)
        t = time.perf_counter()
        sess.run(None, feed)
        cpu.append(time.perf_counter() - t)
    a, b = statistics.median(npu), statistics.median(cpu)
    print("2. Host emulator, one decode step (GPT-2-like, 4 layers, d 128), median of", rounds, "rounds")
    print(f"   tvm_npu {1e3 * a:.2f} ms, onnxruntime {1e3 * b:.2f} ms: ratio {a / b:.2f}x (target <= 2x)")


def _quantized(mod, weights: str):
    if weights == "int8":
        return quantize_weights_int8(mod)
    if weights == "int4":
        return quantize_weights_int4(mod, group_size=128, progress=False)[0]
    return mod


def _layer_estimate(config: str, seq_len: int, max_context: int, weights: str) -> dict:
    mod = tvm_npu.from_onnx(
        llama_step(layers=1, d=QWEN["d"], heads=QWEN["heads"], kv_heads=QWEN["kv_heads"], ffn=QWEN["ffn"], vocab=64,
                   max_context=max_context, seq_len=seq_len)
    )  # fmt: skip
    return estimate(_quantized(mod, weights), config)


def _head_estimate(config: str, rows: int, weights: str) -> dict:
    cols = QWEN["vocab"] // 8
    w = (np.random.default_rng(0).standard_normal((QWEN["d"], cols)) / np.sqrt(QWEN["d"])).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, QWEN["d"]), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, relax.const(w))))
        bb.emit_func_output(out)
    mod = bb.get()
    return estimate(_quantized(mod, weights), config)


def _qwen(config: str, weights: str) -> None:
    cfg = tvm_npu.get_config(config)
    clock = cfg.clock_mhz * 1e6
    dec, pre = _layer_estimate(config, 1, 1024, weights), _layer_estimate(config, 128, 1024, weights)
    head1 = head_last = _head_estimate(config, 1, weights)  # prefill computes the last row's logits only
    decode_cycles = QWEN["layers"] * dec["cycles"] + 8 * head1["cycles"]
    prefill_cycles = QWEN["layers"] * pre["cycles"] + 8 * head_last["cycles"]
    weight_bytes = QWEN["layers"] * dec["weight_bytes"] + 8 * head1["weight_bytes"]
    roofline = weight_bytes / cfg.ddr_bytes_per_cycle
    peak_fp16 = cfg.mac_rows * cfg.mac_cols / cfg.fp16_rate_div
    util = QWEN["layers"] * pre["macs"] / (QWEN["layers"] * pre["cycles"] * peak_fp16)
    cpu_codes = sorted(set(dec.get("cpu_codes", {})) | set(pre.get("cpu_codes", {})))
    print(
        f"   {config:11s} {weights}: decode {clock / decode_cycles:6.1f} tokens/s ({decode_cycles / 1e6:.1f} M cycles, "
        f"{100 * roofline / decode_cycles:.0f}% of the weight roofline, {weight_bytes / 1e9:.2f} GB/token); "
        f"prefill of 128 {1e3 * prefill_cycles / clock:.1f} ms (layer MAC util {100 * util:.0f}%); "
        f"field reference {FIELD_TOKENS_PER_S} tokens/s"
    )
    print(f"   {'':11s} ops on the CPU (not timed): {', '.join(cpu_codes) or 'none'}")


def _int4_vs_int8() -> None:
    """Issue 21: one decode step (position 128) of the 4-layer d-256 models, int4 (g128) against int8."""
    print("4. int4 (W4A16, group 128) against int8 (W8A16) weights, one decode step at position 128, npu-ref")
    print("   (issue 21: DDR bytes per token <= 0.6x, tokens/s >= 1.7x)")
    models = {
        "gpt2-like": functools.partial(gpt2_step, layers=4, d=256, heads=4, ffn=1024, vocab=2048),
        "llama-like": functools.partial(llama_step, layers=4, d=256, heads=4, kv_heads=2, ffn=768, vocab=2048),
    }
    for name, builder in models.items():
        # The same KV cache on both sides: where it fits (auto: SRAM), and forced into DDR, where each
        # step also reads the cache, which int4 weights do not shrink
        for kv_dtype, placement in (("float16", "auto"), ("float16", "ddr"), ("int8", "auto")):
            got = {}
            for weights in ("int8", "int4"):
                lm = tvm_npu.llm.compile(
                    builder,
                    max_context=256,
                    prefill_len=128,
                    weights=weights,
                    kv_dtype=kv_dtype,
                    kv_placement=placement,
                )
                lm.prefill(np.arange(128, dtype=np.int64) % 200)
                lm.decode(7)
                got[weights] = lm.profile()["decode"]
            b8, b4 = got["int8"]["ddr_bytes"], got["int4"]["ddr_bytes"]
            t8, t4 = got["int8"]["tokens_per_s"], got["int4"]["tokens_per_s"]
            c8, c4 = got["int8"]["cycles"], got["int4"]["cycles"]
            kv = ("fp16" if kv_dtype == "float16" else "int8") + f" KV in {got['int4']['kv_placement']}"
            print(
                f"   {name:12s} {kv}: DDR bytes/token {b8:,} -> {b4:,} ({b4 / b8:.2f}x); "
                f"cycles {c8:,} -> {c4:,}; tokens/s {t8:,.0f} -> {t4:,.0f} ({t4 / t8:.2f}x)"
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-measured", action="store_true")
    ap.add_argument("--skip-host", action="store_true")
    ap.add_argument("--skip-qwen", action="store_true")
    ap.add_argument("--skip-int4", action="store_true")
    ap.add_argument("--rounds", type=int, default=51)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs; fallbacks are in the report
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)  # a fallback's traceback: the report names it
    if not args.skip_measured:
        gpt2 = functools.partial(gpt2_step, layers=4, d=256, heads=4, ffn=1024, vocab=2048)
        llama = functools.partial(llama_step, layers=4, d=256, heads=4, kv_heads=2, ffn=768, vocab=2048)
        # head_dim 128: an int8 cache row is one 128-byte burst, an fp16 one two (at 64 both are one)
        llama128 = functools.partial(llama_step, layers=4, d=256, heads=2, kv_heads=1, ffn=768, vocab=2048)
        rows = [_measured("gpt2-like", gpt2, "npu-ref"), _measured("llama-like", llama, "npu-ref")]
        rows += [_measured("gpt2-like", gpt2, "npu-ref", "int8"), _measured("llama-like", llama, "npu-ref", "int8")]
        rows += [_measured("llama-D128", llama128, "npu-ref", k) for k in ("float16", "int8")]
        # The same two models with the cache forced into DDR: what the SRAM cache saves per token
        for n, b in (("gpt2-like", gpt2), ("llama-like", llama)):
            rows.append(_measured(n, b, "npu-ref", kv_placement="ddr"))
        _print_measured(rows)
    if not args.skip_host:
        _host(args.rounds)
    if not args.skip_qwen:
        print("3. Qwen2-1.5B-shaped estimate (cost model, random weights; position 0..1023 cache of 1024)")
        for config in ("npu-ref", "npu-laptop"):
            for weights in ("fp16", "int8", "int4"):
                _qwen(config, weights)
    if not args.skip_int4:
        _int4_vs_int8()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
