"""docs/conformance.md's tables: one per case set ("ci", the README's pytest run; "full",
NPU_CONFORMANCE=full), rendered from a session's results and kept between markers."""

from __future__ import annotations

import collections
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
FAMILY_ORDER = (
    "conv2d",
    "batch_norm",
    "dense",
    "pool",
    "add",
    "eltwise",
    "unary",
    "softmax",
    "concat",
    "reshape",
    "slice",
    "requantize",
    "quantize_io",
)
DATAPATH = {"fp16": "fp16 (float model)", "int8": "int8 (QDQ model)"}


def render(results: dict, set_name: str) -> str:
    """The table of `results` (case id -> family, dtype, where, codes, verdict)."""
    groups = collections.defaultdict(list)
    for row in results.values():
        groups[(row["family"], row["dtype"])].append(row)
    order = {f: i for i, f in enumerate(FAMILY_ORDER)}
    lines = [
        f"Case set `{set_name}`: {len(results)} cases.",
        "",
        "| family | datapath | cases | on NPU | on CPU fallback | fallback reasons | known bugs (xfail) | failures |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    totals = collections.Counter()
    for family, dtype in sorted(groups, key=lambda k: (order.get(k[0], len(order)), k[0], k[1])):
        rows = groups[(family, dtype)]
        counts = collections.Counter(
            cases=len(rows),
            npu=sum(r["where"] == "npu" for r in rows),
            cpu=sum(r["where"] == "cpu" for r in rows),
            xfail=sum(r["verdict"] == "xfail" for r in rows),
            fail=sum(r["verdict"] == "fail" for r in rows),
        )
        totals.update(counts)
        codes = collections.Counter(c for r in rows if r["where"] == "cpu" for c in r["codes"])
        reasons = ", ".join(f"`{c}` {n}" for c, n in sorted(codes.items())) or "-"
        lines.append(
            f"| {family} | {DATAPATH[dtype]} | {counts['cases']} | {counts['npu']} | {counts['cpu']} | {reasons} "
            f"| {counts['xfail']} | {counts['fail']} |"
        )
    lines.append(
        f"| **all** | | {totals['cases']} | {totals['npu']} | {totals['cpu']} | "
        f"| {totals['xfail']} | {totals['fail']} |"
    )
    return "\n".join(lines) + "\n"


def _markers(set_name: str) -> tuple[str, str]:
    return f"<!-- BEGIN conformance table: {set_name} -->\n", f"<!-- END conformance table: {set_name} -->"


def read_section(set_name: str) -> str | None:
    begin, end = _markers(set_name)
    match = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), DOC.read_text(), re.S)
    return match.group(1) if match else None


def write_section(set_name: str, text: str) -> None:
    begin, end = _markers(set_name)
    doc = DOC.read_text()
    block = begin + text + end
    if begin in doc:
        doc = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(doc)
