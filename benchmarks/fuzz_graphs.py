"""Differential graph fuzzing, a long campaign: random graphs compiled for the NPU against the references.

    python benchmarks/fuzz_graphs.py --examples 2000 [--seed 0] [--dtype fp16|int8] [--minutes 30]

The generator and the oracles are tests/graph_fuzz.py (its docstring says what is compared and why);
tests/pipeline/test_graph_fuzz.py runs a bounded, derandomized profile in CI. Each graph ends as pass, coded
(an NPUError: the compiler refused it and said why), skip (outside what the reference can judge), fail
(a wrong answer) or error (an uncoded exception). Fails and errors are bugs: their specs are appended to
fuzz_graph_failures.jsonl (paste one into REGRESSIONS after minimizing it) and the campaign goes on.
Coded errors go to fuzz_graph_coded.jsonl, to review whether each refusal was right.
The spec being checked is kept in fuzz_graph_current.json, so a crash leaves it behind. Prints the
counts; docs/reliability.md records the campaigns. Exit status 1 when any bug was found.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings

import graph_fuzz


class OutOfTime(Exception):
    """--minutes ran out: ends the hypothesis run without counting a graph."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp16", "int8"], default=None, help="default: both (2:1)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (fewer graphs)")
    args = ap.parse_args(argv)
    counts, codes, skips, oracles = (collections.Counter() for _ in range(4))
    worst = {"fp16": 0.0, "int8": 0.0}
    start = time.time()

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(args.seed)
    @given(graph_fuzz.graph_specs(dtype=args.dtype))
    def one(spec):
        if args.minutes is not None and time.time() - start > 60 * args.minutes:
            raise OutOfTime
        Path("fuzz_graph_current.json").write_text(json.dumps(spec))
        out = graph_fuzz.check(spec)
        counts[out.kind] += 1
        counts["npu_ops"] += out.npu_ops
        if out.kind == "coded":  # kept for review: a coded refusal of a graph the NPU could run is a bug too
            codes[out.detail.split(":", 1)[0]] += 1
            with open("fuzz_graph_coded.jsonl", "a") as f:
                f.write(json.dumps({"detail": out.detail[:2000], "spec": spec}) + "\n")
        elif out.kind == "skip":
            skips[out.detail[:60]] += 1
        elif out.bug:
            with open("fuzz_graph_failures.jsonl", "a") as f:
                f.write(json.dumps({"kind": out.kind, "detail": out.detail[:2000], "spec": spec}) + "\n")
            print(f"BUG ({out.kind}): {out.detail.splitlines()[0]}\n  spec = {spec!r}", flush=True)
        if out.kind == "pass":
            worst[spec["dtype"]] = max(worst[spec["dtype"]], out.worst)
            oracles[f"{spec['dtype']} against {out.extra.get('oracle', 'TVM llvm')}"] += 1
        n = sum(counts[k] for k in ("pass", "coded", "skip", "fail", "error"))
        if n % 100 == 0:
            print(f"{n} graphs, {time.time() - start:.0f} s: {dict(counts)}", flush=True)

    try:
        one()
    except OutOfTime:
        pass
    Path("fuzz_graph_current.json").unlink(missing_ok=True)
    n = sum(counts[k] for k in ("pass", "coded", "skip", "fail", "error"))
    print(
        f"{n} graphs (seed {args.seed}) in {time.time() - start:.0f} s: {counts['pass']} passed, "
        f"{counts['coded']} coded errors, {counts['skip']} skipped, {counts['fail']} wrong answers, "
        f"{counts['error']} uncoded errors; {counts['npu_ops']} ops placed on the NPU"
    )
    print(f"passed: {dict(oracles)}")
    print(f"coded: {dict(codes)}")
    print(f"skipped: {dict(skips)}")
    print(f"worst passing result: fp16 {worst['fp16']:.3f} of the bound, int8 {worst['int8']:.0f} LSB")
    return 1 if counts["fail"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
