"""W4A8 prefill benchmark (issue 33): `prefill_activations="int8"` against the W4A16 prefill of the same int4
codes, on the measured models of benchmarks/llm_decode.py (GPT-2-like and Llama-like, 4 layers, d 256, vocab
2048, seeded weights; max_context 256, prefill bucket 128, group 128, round to nearest, npu-ref).

Printed per model: one 128-token prefill's cycles, MAC utilization and DDR bytes in both builds, then one
decode step's cycles (the same W4A16 step in both: it must not change), and the prefill logits' SQNR
against the float (fp16) build's. Calibration: 8 prompts of 128 random ids (these weights are random: the
quality of a trained model is benchmarks/llm_quality.py's "+ W4A8 prefill" rows). A benchmark, not a test:
it prints numbers from one run on one machine.

    python benchmarks/w4a8_prefill.py
"""

from __future__ import annotations

import argparse
import functools
import logging
import warnings

import numpy as np

import tvm_npu
import tvm_npu.llm
from tvm_npu.models.decoder import gpt2_step, llama_step

T, S = 256, 128
MODELS = {
    "gpt2-like": functools.partial(gpt2_step, layers=4, d=256, heads=4, ffn=1024, vocab=2048),
    "llama-like": functools.partial(llama_step, layers=4, d=256, heads=4, kv_heads=2, ffn=768, vocab=2048),
}


def _sqnr_db(got: np.ndarray, ref: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((got - ref).astype(np.float64) ** 2)))


def _run(builder, prompt, **options) -> tuple[dict, dict, np.ndarray]:
    lm = tvm_npu.llm.compile(builder, max_context=T, prefill_len=S, **options)
    logits = lm.prefill(prompt, all_logits=True)
    prefill = lm.profile()["prefill"]
    lm.decode(int(np.argmax(logits[-1])))
    return prefill, lm.profile()["decode"], logits


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs; fallbacks are in the report
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 2048, S)
    calibration = [rng.integers(0, 2048, S) for _ in range(8)]
    print(f"{'model':11s} {'build':14s} {'prefill cycles':>15s} {'MAC util':>9s} {'prefill DDR B':>14s} "
          f"{'decode cycles':>14s} {'logits SQNR':>12s}")  # fmt: skip
    for name, builder in MODELS.items():
        _, _, ref = _run(builder, prompt, weights="fp16")
        a16 = _run(builder, prompt, weights="int4")
        a8 = _run(builder, prompt, weights="int4", prefill_activations="int8", calibration=calibration)
        for build, (pre, dec, logits) in (("W4A16 prefill", a16), ("W4A8 prefill", a8)):
            ratio = f" ({pre['cycles'] / a16[0]['cycles']:.2f}x)" if build.startswith("W4A8") else ""
            print(f"{name:11s} {build:14s} {pre['cycles']:>15,d}{ratio} {100 * pre['mac_util']:>8.1f}% "
                  f"{pre['ddr_bytes']:>14,d} {dec['cycles']:>14,d} {_sqnr_db(logits, ref):>10.2f} dB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
