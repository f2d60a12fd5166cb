"""LLM quality benchmark (issue 33): the shipped tiny-llama's held-out perplexity measured on the reference NPU
for each weight and KV-cache scheme, beside the float model (torch, float32, the same tokens and windows).

For each scheme the model is compiled with `tvm_npu.llm.compile` (max_context 128, prefill bucket 32, npu-ref)
and scored teacher-forced with `tvm_npu.llm.perplexity` over the first `--tokens` tokens of the held-out text
(`tvm_npu.models.heldout_text`), windows of 128 every 64 tokens, through the prefill step; GPTQ, AWQ and a W4A8
prefill calibrate on the training split (the pydoc_data topics the training log does not hold out). Printed:
perplexity on the NPU, the float model's, the relative change, the top-1 agreement and the KL divergence per
token. A benchmark, not a test: it prints numbers (one run, one machine); `--write-docs` puts the table into
docs/llm.md between its markers.

    python benchmarks/llm_quality.py [--tokens N] [--schemes fp16,int8,...] [--write-docs]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import time
import warnings

import numpy as np

import tvm_npu
import tvm_npu.llm
from tvm_npu.frontend import hf_folder
from tvm_npu.llm.reference import torch_logits

SCHEMES = {
    "fp16": dict(weights="fp16"),
    "int8": dict(weights="int8"),
    "int8 + int8 KV": dict(weights="int8", kv_dtype="int8"),
    "int4 RTN g128": dict(weights="int4", group_size=128),
    "int4 RTN g64": dict(weights="int4", group_size=64),
    "int4 RTN g32": dict(weights="int4", group_size=32),
    "int4 GPTQ g128": dict(weights="int4", group_size=128, weight_method="gptq"),
    "int4 GPTQ g64": dict(weights="int4", group_size=64, weight_method="gptq"),
    "int4 GPTQ g32": dict(weights="int4", group_size=32, weight_method="gptq"),
    "int4 AWQ g128": dict(weights="int4", group_size=128, weight_method="awq"),
    "int4 AWQ g64": dict(weights="int4", group_size=64, weight_method="awq"),
    "int4 AWQ g32": dict(weights="int4", group_size=32, weight_method="awq"),
    "int4 RTN g128 + W4A8 prefill": dict(weights="int4", group_size=128, prefill_activations="int8"),
    "int4 GPTQ g128 + W4A8 prefill": dict(
        weights="int4", group_size=128, weight_method="gptq", prefill_activations="int8"
    ),
    "int4 AWQ g128 + W4A8 prefill": dict(
        weights="int4", group_size=128, weight_method="awq", prefill_activations="int8"
    ),
}
BEGIN, END = "<!-- llm-quality:begin -->", "<!-- llm-quality:end -->"
T, S = 128, 32


def calibration_ids(folder: str, tok, n: int = 16, length: int = 256) -> list[np.ndarray]:
    """`n` windows of `length` token ids from the training split (the topics the log does not hold out)."""
    from pydoc_data.topics import topics

    with open(os.path.join(folder, "train_log.json")) as f:
        held = set(json.load(f)["text"]["heldout_topics"])
    text = "\n".join(topics[k] for k in sorted(topics) if k not in held)
    ids = np.asarray(tok.encode(text).ids, np.int64)
    starts = np.random.default_rng(0).integers(0, ids.size - length, n)
    return [ids[s : s + length] for s in starts]


def _paired(a: np.ndarray, b: np.ndarray, ratio: bool) -> tuple:
    """(change, standard error, verdict) of per-token values `a` against `b` on the same tokens: the
    perplexity ratio - 1 (`ratio`, a and b nll) or the mean difference (KL). "better" / "worse" beyond two
    standard errors, else "no measured difference"."""
    d = a - b
    se = d.std(ddof=1) / np.sqrt(d.size)
    change, err = (float(np.expm1(d.mean())), float(np.exp(d.mean()) * se)) if ratio else (float(d.mean()), float(se))
    return change, err, "better" if change < -2 * err else "worse" if change > 2 * err else "no measured difference"


def paired_against_rtn(evals: dict) -> list[tuple]:
    """(scheme, its RTN, then the perplexity's and the KL's (change, standard error, verdict)) for each GPTQ /
    AWQ scheme whose RTN row (same group size) was measured: the per-token differences of the two builds on
    the same tokens, whose spread is much smaller than either's against the float model."""
    out = []
    for name, ev in evals.items():
        m = re.fullmatch(r"int4 (GPTQ|AWQ) (g\d+)", name)
        rtn = f"int4 RTN {m.group(2)}" if m else None
        if rtn not in evals:
            continue
        ppl = _paired(ev.token_nll, evals[rtn].token_nll, ratio=True)
        out.append((name, rtn, *ppl, *_paired(ev.token_kl, evals[rtn].token_kl, ratio=False)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=None, help="held-out tokens scored (default: all of them)")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated, from: " + ", ".join(SCHEMES))
    ap.add_argument("--write-docs", action="store_true", help="write the table into docs/llm.md")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    folder = tvm_npu.models.pretrained("tiny-llama")
    tok = hf_folder.tokenizer(folder)
    ids = np.asarray(tok.encode(tvm_npu.models.heldout_text("tiny-llama")).ids, np.int64)[: args.tokens]
    reference = torch_logits(folder)
    calibration = calibration_ids(folder, tok)
    rows, evals = [], {}
    for name in args.schemes.split(","):
        options = dict(SCHEMES[name])
        if options.get("weight_method") or options.get("prefill_activations") == "int8":
            options["calibration"] = calibration
        start = time.time()
        lm = tvm_npu.llm.compile(folder, max_context=T, prefill_len=S, **options)
        ev = tvm_npu.llm.perplexity(lm, ids, reference=reference, progress=True)
        rel = ev.perplexity / ev.reference_perplexity - 1
        evals[name] = ev
        rows.append((name, ev.perplexity, ev.reference_perplexity, rel, ev.change_stderr, ev.top1_agreement, ev.kl,
                     lm.meta["kv_cache"]))  # fmt: skip
        print(f"{name:16s} ppl {ev.perplexity:8.3f}  float {ev.reference_perplexity:8.3f}  {rel:+7.2%}  "
              f"top-1 {ev.top1_agreement:6.2%}  KL {ev.kl:.4f}  ({time.time() - start:.0f} s)", flush=True)  # fmt: skip
    table = [
        f"Generated by `python benchmarks/llm_quality.py{f' --tokens {args.tokens}' if args.tokens else ''}` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC ({platform.machine()}, "
        f"{os.cpu_count()} CPUs); {ids.size} held-out tokens of tiny-llama, max_context {T}, windows every {T // 2}.",
        "",
        "| scheme | perplexity on the NPU | float model (torch) | change (+- standard error) | top-1 agreement "
        "| KL (nats/token) | KV cache |",
        "|---|---|---|---|---|---|---|",
    ]
    table += [
        f"| {n} | {p:.3f} | {r:.3f} | {d:+.2%} +- {e:.2%} | {a:.2%} | {k:.4f} | {kv} |"
        for n, p, r, d, e, a, k, kv in rows
    ]
    paired = paired_against_rtn(evals)
    if paired:
        table += ["", "Against round to nearest at the same group size, on the same tokens (paired):", ""]
        table += [
            "| scheme | perplexity change against RTN (+- standard error) | verdict | KL change against RTN "
            "(nats/token, +- standard error) | verdict |",
            "|---|---|---|---|---|",
        ]
        table += [
            f"| {n} vs {r} | {d:+.3%} +- {e:.3%} | {v} | {kd:+.5f} +- {ke:.5f} ({kd / evals[r].kl:+.0%}) | {kv} |"
            for n, r, d, e, v, kd, ke, kv in paired
        ]
    print("\n".join(table))
    if args.write_docs:
        path = os.path.join(os.path.dirname(__file__), "..", "docs", "llm.md")
        with open(path) as f:
            doc = f.read()
        block = BEGIN + "\n" + "\n".join(table) + "\n" + END
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
        with open(path, "w") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
