"""W4A8 against W4A16 and int8 (issue 21): int4 group-wise weights under int8 activations on the tutorial LLMs.

The tutorial's Hugging Face GPT-2 and Llama (tutorials/llm_decode.py: 4 layers, d 128, 4 heads, vocab 512,
seeded random weights), exported as torch exports them and specialized to steps of S tokens
(`frontend.to_step_model`, T = 64), quantized four ways:

- int8: `tvm_npu.quantize(mod, cal)`, int8 activations and int8 per-channel weights (W8A8);
- W4A8: `tvm_npu.quantize(mod, cal, weight_bits=4, group_size=128, activations="int8")`, the same int8
  activations with int4 group-wise dense weights (CONV2D w_dtype int4 under int8);
- W4A16: `tvm_npu.quantize(mod, weight_bits=4, group_size=128)`, int4 weights under fp16 activations;
- W8A16: `quantization.quantize_weights_int8`, the int8 weight-only build `llm.compile(weights="int8")` uses.

Each is built for the NPU. Printed: the logits SQNR against the float model (TVM's llvm build) on held-out
16-token prompts, run on the NPU; and one decode step's (S = 1) NPU cycles and DDR bytes on the cycle
model. Needs the `llm` extra (torch, transformers) to export the models.

    python benchmarks/w4a8_weights.py [--calibration 32] [--archs gpt2 llama]
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tvm
from int4_weights import SIZES, T, _batch, _logits
from tvm import relax

import tvm_npu
from tvm_npu import runtime
from tvm_npu.contract import stream
from tvm_npu.frontend import to_step_model
from tvm_npu.models import hf_export
from tvm_npu.quantization import quantize_weights_int8
from tvm_npu.tools.accuracy import sqnr_db

S_PROMPT, GROUP = 16, 128


def _variants(mod, cal) -> dict:
    """{name: the quantized module} of the four builds (module docstring)."""
    return {
        "int8": tvm_npu.quantize(mod, cal, progress=False)[0],
        "W4A8": tvm_npu.quantize(mod, cal, weight_bits=4, group_size=GROUP, activations="int8", progress=False)[0],
        "W4A16": tvm_npu.quantize(mod, weight_bits=4, group_size=GROUP, progress=False)[0],
        "W8A16": quantize_weights_int8(mod),
    }


def _kinds(ex) -> str:
    """The CONV2D commands of `ex` by activation and weight dtype, e.g. "W4A8 x13, W8A8 x1"."""
    names = {1: "16", 2: "8"}
    counts: dict = {}
    for m in runtime.npu_modules(ex):
        for c in stream.decode(bytes(m["get_stream"]())).commands:
            if c.op == "CONV2D":
                w = {7: "4", 8: "4", 2: "8"}.get(c.args["w_dtype"] & 0xFF, names[c.args["dtype"]])
                kind = f"W{w}A{names[c.args['dtype']]}"
                counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))


def _npu_run(mod, batches) -> tuple:
    """(logits of `batches` on the NPU build of `mod`, the NPU cycles and DDR bytes of one call, its dense
    layers by kind)."""
    ex = tvm_npu.build(mod)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    modules = runtime.npu_modules(vm)
    outs = []
    for b in batches:
        for m in modules:
            m["reset_profile"]()
        r = vm["main"](*[tvm.runtime.tensor(a) for a in b])
        outs.append((r if hasattr(r, "numpy") else r[0]).numpy())
    totals = [runtime.profile_of(m)["total"] for m in modules]
    cycles = sum(t["total_cycles"] for t in totals)
    ddr = sum(t["ddr_read_bytes"] + t["ddr_write_bytes"] for t in totals)
    return np.concatenate(outs), cycles, ddr, _kinds(ex)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=int, default=32, help="calibration prompts of 16 tokens")
    ap.add_argument("--archs", nargs="+", default=["gpt2", "llama"])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs
    print(f"W4A8 vs W4A16 vs int8 (group {GROUP}): logits SQNR vs fp32 on the NPU; one decode step (S = 1)")
    print(
        f"   {'model':6s} {'build':6s} {'logits SQNR':>12s} {'decode cycles':>14s} {'decode DDR bytes':>17s}   "
        "dense layers (CONV2D) of the decode step"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            path = hf_export.export(arch, str(Path(tmp) / f"{arch}.onnx"), seed=0, **SIZES)
            prompt, step = to_step_model(path, T, S_PROMPT), to_step_model(path, T, 1)
            mod, dec = tvm_npu.from_onnx(prompt), tvm_npu.from_onnx(step)
            cal = [_batch(prompt, s) for s in range(args.calibration)]
            held_out = [_batch(prompt, 1000 + s) for s in range(4)]
            ref = _logits(mod, held_out)
            dec_cal = [_batch(step, s) for s in range(args.calibration)]
            prompts, steps = _variants(mod, cal), _variants(dec, dec_cal)
            for name in prompts:
                logits = _npu_run(prompts[name], held_out)[0]
                _, cycles, ddr, kinds = _npu_run(steps[name], [_batch(step, 2000)])
                print(f"   {arch:6s} {name:6s} {sqnr_db(ref, logits):9.2f} dB {cycles:>14,} {ddr:>17,}   {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
