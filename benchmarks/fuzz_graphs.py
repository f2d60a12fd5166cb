"""Differential graph fuzzing, a long campaign: random graphs compiled for the NPU against the references.

    python benchmarks/fuzz_graphs.py --examples 2000 [--seed 0] [--dtype fp16|int8] [--minutes 30]
        [--family classic|new|shape|constants|dynamic|ops|all]

The generator and the oracles are tests/graph_fuzz.py (its docstring says what is compared and why);
tests/pipeline/test_graph_fuzz.py runs a bounded, derandomized profile in CI. Each graph ends as pass, coded
(an NPUError: the compiler refused it and said why), skip (outside what the reference can judge), fail
(a wrong answer), error (an uncoded exception, or a coded one other than a documented compile-time
refusal) or internal (a region fell back to the CPU with NPU_E_INTERNAL: the answer is right, but the
compiler failed on it). --family picks the generator: classic (graph_fuzz.graph_specs), one of the
families of tests/graph_fuzz_families.py, new (the four of them) or all. Fails, errors and internals
are bugs: their specs are appended to
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
import graph_fuzz_families

KINDS = ("pass", "coded", "skip", "fail", "error", "internal")


def strategies(family: str, dtype: str | None) -> list:
    """The generators a campaign runs one after the other, splitting --examples between them: "new" runs
    each new family in turn (an equal share each), "all" the classic generator and then them."""
    classic = graph_fuzz.graph_specs(dtype=dtype)
    new = [graph_fuzz_families.family_specs(family=f) for f in graph_fuzz_families.FAMILIES]
    if family == "classic":
        return [classic]
    if family in graph_fuzz_families.FAMILIES:
        return [graph_fuzz_families.family_specs(family=family)]
    return new if family == "new" else [classic, *new]


class OutOfTime(Exception):
    """--minutes ran out: ends the hypothesis run without counting a graph."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp16", "int8"], default=None, help="default: both (2:1)")
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (fewer graphs)")
    families = ["classic", "new", "all", *graph_fuzz_families.FAMILIES]
    ap.add_argument("--family", choices=families, default="classic", help="the generator (default classic)")
    args = ap.parse_args(argv)
    counts, codes, skips, oracles, by_family = (collections.Counter() for _ in range(5))
    worst = {"fp16": 0.0, "int8": 0.0}
    start = time.time()

    def one(spec):
        if args.minutes is not None and time.time() - start > 60 * args.minutes:
            raise OutOfTime
        Path("fuzz_graph_current.json").write_text(json.dumps(spec))
        out = graph_fuzz.check(spec)
        counts[out.kind] += 1
        by_family[(spec.get("family", "classic"), out.kind)] += 1
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
        n = sum(counts[k] for k in KINDS)
        if n % 100 == 0:
            print(f"{n} graphs, {time.time() - start:.0f} s: {dict(counts)}", flush=True)

    gens = strategies(args.family, args.dtype)
    for i, gen in enumerate(gens):
        share = args.examples // len(gens) + (i < args.examples % len(gens))
        run = settings(
            max_examples=share,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(seed(args.seed)(given(gen)(one)))
        try:
            run()
        except OutOfTime:
            break
    Path("fuzz_graph_current.json").unlink(missing_ok=True)
    n = sum(counts[k] for k in KINDS)
    print(
        f"{n} graphs (seed {args.seed}) in {time.time() - start:.0f} s: {counts['pass']} passed, "
        f"{counts['coded']} coded errors, {counts['skip']} skipped, {counts['fail']} wrong answers, "
        f"{counts['error']} uncoded errors, {counts['internal']} NPU_E_INTERNAL fallbacks; "
        f"{counts['npu_ops']} ops placed on the NPU"
    )
    print("per family:")
    for fam in sorted({f for f, _ in by_family}):
        print(f"  {fam:10s} " + ", ".join(f"{k} {by_family[(fam, k)]}" for k in KINDS))
    print(f"passed: {dict(oracles)}")
    print(f"coded: {dict(codes)}")
    print(f"skipped: {dict(skips)}")
    print(f"worst passing result: fp16 {worst['fp16']:.3f} of the bound, int8 {worst['int8']:.0f} LSB")
    return 1 if counts["fail"] or counts["error"] or counts["internal"] else 0


if __name__ == "__main__":
    sys.exit(main())
