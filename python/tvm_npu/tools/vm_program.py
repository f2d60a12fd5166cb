"""A compiled library's Relax VM program, read back from the executable: its functions' instructions,
its constant pool, and each parameter's name, shape and dtype (for `export_graph`).

The VM executable keeps no Relax IR, only bytecode: `as_text()` lists each function's instructions
(`call NAME in: ARGS dst: REG`, `ret REG`) and `stats()` its constant pool (dtypes, shape tuples, the
parameters' error contexts, which name each parameter and its annotation). Both are TVM 0.27's text
forms; anything they do not say (a constant tensor's values) is left out, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CALL = re.compile(r"^\s*call\s+(\S+)\s+in:(.*?)\s+dst:\s*(\S+)\s*$")
_RET = re.compile(r"^\s*ret\s+(\S+)\s*$")
_PARAM = re.compile(r'param\[(\d+)\], param=([^,]+), annotation=R\.Tensor\(\(([^)]*)\), dtype="(\w+)"\)')


@dataclass
class Instruction:
    """One VM instruction: `op` is "call" (of `func` with `args`, result in `dst`) or "ret" (of `dst`)."""

    op: str
    func: str = ""
    args: list = field(default_factory=list)
    dst: str = ""


@dataclass
class Param:
    name: str
    shape: tuple
    dtype: str


def split_top(text: str) -> list:
    """`text` split at the commas outside quotes and brackets, each item stripped."""
    items, depth, quoted, cur = [], 0, False, []
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        items.append("".join(cur).strip())
    return items


def constants(stats: str) -> list:
    """The constant pool of `VMExecutable.stats()`: shape tuples as tuples of ints, the rest as text."""
    start = stats.find("Constant pool")
    if start < 0:
        return []
    body = stats[stats.index("[", start) + 1 :]
    depth, quoted, end = 1, False, len(body)
    for i, ch in enumerate(body):  # the list's closing bracket
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "[":
            depth += 1
        elif not quoted and ch == "]":
            depth -= 1
            if depth == 0:
                end = i
                break
    out = []
    for item in split_top(body[:end]):
        m = re.fullmatch(r"shapetuple\[([\d, ]*)\]", item)
        out.append(tuple(int(v) for v in m.group(1).split(",") if v.strip()) if m else item.strip('"').strip())
    return out


def functions(text: str) -> dict:
    """Function name -> its instructions, from `VMExecutable.as_text()` (packed functions have none)."""
    funcs, cur = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            name = line[1:].split()[0].rstrip(":;")
            cur = None if line.rstrip().endswith(";") else funcs.setdefault(name, [])
            continue
        if cur is None:
            continue
        m = _CALL.match(line)
        if m:
            cur.append(Instruction("call", m.group(1), split_top(m.group(2)), m.group(3)))
        elif _RET.match(line):
            cur.append(Instruction("ret", dst=_RET.match(line).group(1)))
    return funcs


def params(consts: list, func: str = "main") -> list:
    """`func`'s parameters in order, from the error contexts of its tensor checks."""
    found = {}
    for c in consts:
        if isinstance(c, str) and f"fn={func}," in c:
            m = _PARAM.search(c)
            if m:
                shape = tuple(int(v) for v in m.group(3).split(",") if v.strip())
                found[int(m.group(1))] = Param(m.group(2).strip(), shape, m.group(4))
    return [found[i] for i in sorted(found)]
