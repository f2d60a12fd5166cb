"""The code blocks of README.md and docs/*.md, as the doc test runs them.

A block is a fenced ```python, ```bash or ```sh block. An HTML comment on the line before it (blank lines
between allowed) says how it is tested:

    <!-- doc-test: skip (why it cannot run as written) -->
    <!-- doc-test: expect "text its output contains" "and more" -->
    <!-- doc-test: slow -->                                   (the file's test is marked slow)
    <!-- doc-test: needs torch diffusers -->                  (the file's test skips without them: an extra)

Every other block runs. A file's blocks run in order in one Python process (a block may use the names an
earlier block of its file defined), shell blocks with `bash -e` from that process, in a folder that holds
the small model the docs' commands name (see test_doc_blocks.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGS = {"python": "python", "bash": "bash", "sh": "bash"}
_FENCE = re.compile(r"^```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    doc: str  # path relative to the repository
    line: int  # line of the opening fence, 1-based
    kind: str  # "python" or "bash"
    code: str
    skip: str | None = None  # the reason, when the block is not run
    expect: list[str] = field(default_factory=list)
    slow: bool = False
    needs: list[str] = field(default_factory=list)  # modules of an optional extra the block imports

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, whatever exists at test time."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The testable blocks of one Markdown file, with their directives."""
    lines = path.read_text().splitlines()
    out, directive, i = [], None, 0
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if m:
            directive = m.group(1)
        fence = _FENCE.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            kind = LANGS.get(fence.group(1))
            if kind:
                out.append(_block(rel, i + 1, kind, "\n".join(lines[i + 1 : end]) + "\n", directive or ""))
            directive, i = None, end + 1
            continue
        if line.strip() and not m:
            directive = None  # a directive applies to the very next block only
        i += 1
    return out


def _block(doc: str, line: int, kind: str, code: str, directive: str) -> Block:
    block = Block(doc, line, kind, code)
    skip = re.match(r"skip\s*(?:\((.*)\))?", directive)
    if skip:
        block.skip = (skip.group(1) or "").strip() or "no reason given"
    block.expect = re.findall(r'"([^"]*)"', directive) if "expect" in directive else []
    block.slow = bool(re.search(r"\bslow\b", directive))
    needs = re.search(r"\bneeds\s+([\w\s]+?)(?:\s+expect\b|\s+slow\b|$)", directive)
    block.needs = needs.group(1).split() if needs else []
    return block


def driver(doc_blocks: list[Block]) -> str:
    """A Python script that runs the blocks in order, each between two marker lines on stdout. It is a
    plain script (no `__main__` guard), as a user's copy of the blocks would be."""
    parts = ["import subprocess"]
    for n, b in enumerate(doc_blocks):
        if b.skip:
            continue
        parts.append(f"print('@@doc-block {n} start', flush=True)")
        if b.kind == "python":
            parts.append(f"exec(compile({b.code!r}, {b.where!r}, 'exec'), globals())")
        else:
            parts.append(f"subprocess.run(['bash', '-e', '-c', {b.code!r}], check=True)")
        parts.append(f"print('@@doc-block {n} end', flush=True)")
    return "\n".join(parts) + "\n"


def outputs(stdout: str) -> dict[int, str]:
    """Each block's output, by block index, from the driver's markers (a block that did not end has its
    output up to where it stopped)."""
    found: dict[int, str] = {}
    for m in re.finditer(r"@@doc-block (\d+) start\n(.*?)(?=@@doc-block \1 end|\Z)", stdout, re.S):
        found[int(m.group(1))] = m.group(2)
    return found


def ended(stdout: str) -> set[int]:
    return {int(n) for n in re.findall(r"@@doc-block (\d+) end", stdout)}
