"""What counting an int8 KV cache's saturation costs the host (issue 32; docs/llm.md, "An int8 KV cache").

The median wall time of `lm.decode` on a 2-layer Llama-like step model (tests/llm's: d 64, 4 query / 2 KV heads,
max_context 44, prefill 8) with the fp16 cache, the int8 cache, and the int8 cache with its saturation counter
replaced by the one a cache that cannot saturate has (llm/kv_saturation.py's NoCounter): the last two differ
by what the counting costs. Interleaved rounds, each a 4-token prefill then 40 decodes per LLM (a benchmark,
not a test: compare its numbers on one machine, in one run).

    python benchmarks/kv_saturation_host.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import warnings

import numpy as np

import tvm_npu
from tvm_npu.llm import KVSaturationWarning
from tvm_npu.llm.kv_saturation import NoCounter
from tvm_npu.models.decoder import llama_step

T, S = 44, 8
BUILDER = functools.partial(llama_step, layers=2, d=64, heads=4, kv_heads=2, ffn=128, vocab=256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    warnings.simplefilter("ignore", KVSaturationWarning)
    lms = {kv: tvm_npu.llm.compile(BUILDER, max_context=T, prefill_len=S, kv_dtype=kv) for kv in ("float16", "int8")}
    uncounted = tvm_npu.llm.compile(BUILDER, max_context=T, prefill_len=S, kv_dtype="int8")
    uncounted._saturation = NoCounter()
    lms["int8, not counted"] = uncounted
    prompt = np.random.default_rng(3).integers(0, 256, 4)
    times: dict = {name: [] for name in lms}
    for _ in range(rounds):
        for name, lm in lms.items():
            lm.prefill(prompt)
            for i in range(T - len(prompt)):
                start = time.perf_counter()
                lm.decode(i % 256)
                times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name:>18}: median decode {1e3 * statistics.median(t):.3f} ms over {len(t)} steps")


if __name__ == "__main__":
    main()
