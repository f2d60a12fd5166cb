"""Write the contract's other forms from `spec.py`: the C++ headers and the tables of docs/npu.md.

    python -m tvm_npu.contract.generate           # rewrite the generated files of this checkout
    python -m tvm_npu.contract.generate --check   # exit 1 and name every file that is stale

Writes include/tvm_npu/stream_format.h and include/tvm_npu/npu_config.h whole, and in docs/npu.md
every block between ``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->``, leaving
the prose around them alone. Plain standard library: the output is committed, so building the runtime
or a host application needs no Python. The headers are laid out the way clang-format (Google style,
100 columns: the repository's .clang-format) leaves them.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

from . import layout, spec

COMMAND = "python -m tvm_npu.contract.generate"
SPEC_PATH = "python/tvm_npu/contract/spec.py"
STREAM_FORMAT_H = "include/tvm_npu/stream_format.h"
NPU_CONFIG_H = "include/tvm_npu/npu_config.h"
NPU_MD = "docs/npu.md"
_C_TYPES = {"u32": "uint32_t", "u16": "uint16_t", "i32": "int32_t", "f32": "float"}
_COLUMNS = 100

# ---------------------------------------------------------------------------------------------------
# C++
# ---------------------------------------------------------------------------------------------------


def _banner() -> list:
    return [
        f"// Generated from {SPEC_PATH} by {COMMAND}.",
        "// Do not edit: change the spec and regenerate (tests/contract/ checks this file).",
    ]


def _wrap(text: str, prefix: str, first: str | None = None) -> list:
    """`text` as comment lines of at most 100 columns: `first` opens the first line (else `prefix`)."""
    lines = []
    for para in text.split("\n"):
        if not para:
            lines.append(prefix.rstrip())
            continue
        lines += textwrap.wrap(
            para,
            _COLUMNS,
            initial_indent=first if first and not lines else prefix,
            subsequent_indent=prefix,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return lines


def _doc_block(brief: str, details: list | None = None, indent: str = "") -> list:
    """A Doxygen comment: `/*! \\brief ... */`, on one line when it fits."""
    one = f"{indent}/*! \\brief {brief} */"
    if not details and len(one) <= _COLUMNS:
        return [one]
    lines = [f"{indent}/*!"] + _wrap(brief, f"{indent} *        ", f"{indent} * \\brief ")
    if details:
        lines.append(f"{indent} *")
        lines += _wrap("\n".join(details), f"{indent} * ")
    return lines + [f"{indent} */"]


def _aligned(rows: list, indent: str = "  ") -> list:
    """Lines of code with trailing comments, the comments of consecutive commented lines aligned
    (clang-format's AlignTrailingComments)."""
    out: list = []
    run: list = []

    def flush():
        width = max(len(code) for code, _ in run)
        out.extend(f"{indent}{code.ljust(width)}  // {comment}" for code, comment in run)
        run.clear()

    for code, comment in rows:
        if comment:
            run.append((code, comment))
            continue
        if run:
            flush()
        out.append(f"{indent}{code}")
    if run:
        flush()
    return out


def _struct(name: str, fields: list, brief: str | None = None, details: list | None = None) -> list:
    lines = _doc_block(brief, details) if brief else []
    rows = []
    for f in fields:
        count = f"[{f['count']}]" if "count" in f else ""
        rows.append((f"{_C_TYPES[f.get('type', 'u32')]} {f['name']}{count};", f.get("comment", "")))
    return lines + [f"struct {name} {{"] + _aligned(rows) + ["};"]


def _enum(name: str, values: list, brief: str | None = None) -> list:
    lines = _doc_block(brief) if brief else []
    rows = [(f"{v['c']} = {v['code']},", v.get("comment", "")) for v in values]
    return lines + [f"enum {name} : uint32_t {{"] + _aligned(rows) + ["};"]


def _switch(signature: str, brief: str, cases: list, default: str | None, fallback: str | None = None) -> list:
    """An inline function of one argument returning a value per case, one case a line (.clang-format
    keeps short case labels on one line)."""
    arg = signature.split("(")[1].rstrip(")").split()[-1]
    lines = _doc_block(brief) + [f"inline {signature} {{", f"  switch ({arg}) {{"]
    for label, value in cases:
        lines.append(f"    case {label}: return {value};")
    if default is not None:
        lines.append(f"    default: return {default};")
    lines.append("  }")
    if fallback is not None:
        lines.append(f"  return {fallback};")
    return lines + ["}"]


def _operand_structs() -> tuple:
    """The operand struct of every opcode (DMA_LOAD and DMA_STORE share one), with its word counts:
    k<X>OperandWords for the newest minor, k<X>OperandWords1<m> for an older one that had fewer."""
    lines: list = []
    asserts: list = []
    seen: dict = {}
    for op in spec.OPCODES:
        struct_name = op.get("c_struct")
        if struct_name is None:
            continue
        fields = op.get("c_fields", op["operands"])
        if struct_name in seen:
            if seen[struct_name] != fields:
                raise ValueError(f"{op['name']} shares {struct_name} but lists other fields")
            continue
        seen[struct_name] = fields
        sharing = [o["name"] for o in spec.OPCODES if o.get("c_struct") == struct_name]
        since = op.get("operands_since", {})
        comments = dict(op.get("comments", {}))
        for operand, enum in op.get("enums", {}).items():
            comments.setdefault(operand, spec.ENUMS[enum]["c"])
        base = struct_name[: -len("Operands")]
        n = len(fields)
        # The first note completes the brief; the others, after an empty one, are its details.
        notes = op.get("notes") or [""]
        brief = f"Operands of {' and '.join(sharing)}, words 1..{n}" + (f": {notes[0]}" if notes[0] else ".")
        details = notes[2:] or None
        rows = [
            {"name": c_name, "comment": comments.get(operand, "")} for operand, c_name in zip(op["operands"], fields)
        ]
        lines += [""] + _struct(struct_name, rows, brief, details)
        lines.append(f"constexpr uint32_t k{base}OperandWords = {n};")
        for minor in range(op.get("since", 0), max(since.values(), default=0)):
            older = sum(1 for operand in op["operands"] if since.get(operand, 0) <= minor)
            lines.append(f"// A {spec.VERSION_MAJOR}.{minor} stream has {older} {op['name']} operands.")
            lines.append(f"constexpr uint32_t k{base}OperandWords{spec.VERSION_MAJOR}{minor} = {older};")
        asserts.append(
            f'static_assert(sizeof({struct_name}) == 4 * k{base}OperandWords, "{" / ".join(sharing)} operand layout");'
        )
    return lines, asserts


def stream_format_h() -> str:
    major, minor = layout.VERSION_MAJOR, layout.VERSION_MINOR
    history = "; ".join(f"{major}.{m['minor']}: {m['added']}" for m in spec.MINORS[1:])
    out = _banner() + [
        "/*!",
        " * \\file tvm_npu/stream_format.h",
        *_wrap(
            f"The command stream's on-blob layout, version {major}.{minor} (docs/npu.md section 6). "
            "A runtime reads every older minor: a minor only appends (operands whose value 0 keeps "
            f"the older meaning, dtypes, opcodes). {history}.",
            " *        ",
            " * \\brief ",
        ),
        " *",
        " * Every structure is a run of little-endian u32 words (the header's version is two u16), so a",
        " * little-endian host reads one with a memcpy. The structs carry no behaviour: what operand values",
        " * mean beyond their layout is in tvm_npu/operand_rules.h, parsing and validation in",
        " * src/runtime/stream_parser.cc.",
        " */",
        "#ifndef TVM_NPU_STREAM_FORMAT_H_",
        "#define TVM_NPU_STREAM_FORMAT_H_",
        "",
        "#include <cstdint>",
        "",
        "namespace tvm_npu {",
        "namespace stream {",
        "",
    ]
    consts = {c["py"]: c for c in spec.CONSTANTS}
    magic = consts["MAGIC"]
    out += [
        f'constexpr uint32_t kMagic = 0x{magic["value"]:08X};  // bytes "NPUS"',
        f"constexpr uint16_t kVersionMajor = {major};",
        f"constexpr uint16_t kVersionMinor = {minor};",
    ]
    for m in spec.MINORS[1:]:
        out += _wrap(f"{major}.{m['minor']}: {m['added']}.", "// ")
        out.append(f"constexpr uint16_t k{m['c']}Minor = {m['minor']};")
    out += [
        "",
        f"constexpr uint32_t kHeaderBytes = {layout.HEADER.size};",
        f"constexpr uint32_t kConfigOffset = {layout.CONFIG_OFFSET};",
        f"constexpr uint32_t kConfigBytes = {layout.CONFIG.size};",
        f"constexpr uint32_t kTensorTableOffset = {layout.TENSOR_TABLE_OFFSET};",
        f"constexpr uint32_t kTensorBytes = {layout.TENSOR.size};",
        f"constexpr uint32_t kQParamsBytes = {layout.QPARAMS.size};",
        f"constexpr uint32_t kCommandBytes = {layout.COMMAND_BYTES};",
        f"constexpr uint32_t kCommandWords = {layout.COMMAND_WORDS};",
    ]
    for c in spec.CONSTANTS:
        if c is magic:
            continue
        value = f"0x{c['value']:X}" if c["value"] > 0xFFFF else str(c["value"])
        out += _wrap(c["doc"][0].upper() + c["doc"][1:] + ".", "// ")
        out.append(f"constexpr uint32_t {c['c']} = {value};")

    out += [""] + _enum("Opcode", [{"c": op["c"], "code": f"0x{op['code']:02X}"} for op in spec.OPCODES])
    out += [""] + _switch(
        "const char* OpcodeName(uint32_t opcode)",
        'The opcode\'s name as written in docs/npu.md section 4, or "unknown".',
        [(op["c"], f'"{op["name"]}"') for op in spec.OPCODES],
        '"unknown"',
    )
    for enum in spec.ENUMS.values():
        out += [""] + _enum(enum["c"], enum["values"], enum.get("brief"))

    waits = spec.WAITS
    engines = ", ".join(e.upper() for e in waits["engines"])
    out += [""] + _doc_block(
        f"Wait fields of word 0 (docs/npu.md section 5): one {waits['bits']}-bit field per engine, engine "
        f"e at bits {waits['shift']} + {waits['bits']} * e. A value k in 0..{waits['no_wait'] - 1} holds "
        "the command until at most k commands are outstanding on that engine; kNoWait means no wait. "
        f"Engines are numbered {engines}."
    )
    out += [
        f"constexpr uint32_t kNumWaitFields = {len(waits['engines'])};",
        f"constexpr uint32_t kWaitShift = {waits['shift']};",
        f"constexpr uint32_t kWaitFieldBits = {waits['bits']};",
        f"constexpr uint32_t kNoWait = {waits['no_wait']};",
    ]

    for record in (spec.HEADER, spec.QPARAMS, spec.TENSOR):
        out += [""] + _struct(record["c"], record["fields"], record.get("brief"))
    word0_end = waits["shift"] + waits["bits"] * len(waits["engines"])
    out += [""] + _doc_block(
        f"A raw command: word 0 = opcode | wait fields << {waits['shift']} (bits "
        f"{word0_end}-31 zero), words 1..{layout.COMMAND_WORDS - 1} operands."
    )
    out += [
        "struct Command {",
        "  uint32_t words[kCommandWords];",
        "",
        "  uint32_t opcode() const { return words[0] & 0xFF; }",
        *_doc_block(
            f"The wait field for engine `e`: 0..{waits['no_wait'] - 1} outstanding commands, or kNoWait.", indent="  "
        ),
        (
            "  uint32_t wait(uint32_t e) const { return (words[0] >> (kWaitShift + kWaitFieldBits * e)) & "
            f"0x{(1 << waits['bits']) - 1:X}; }}"
        ),
        "};",
    ]
    structs, asserts = _operand_structs()
    out += structs
    out += [
        "",
        'static_assert(sizeof(Header) == kHeaderBytes, "header layout");',
        'static_assert(sizeof(TensorDesc) == kTensorBytes, "tensor descriptor layout");',
        'static_assert(sizeof(QParams) == kQParamsBytes, "quantization table entry layout");',
        'static_assert(sizeof(Command) == kCommandBytes, "command layout");',
        *asserts,
    ]
    dtypes = spec.ENUMS["dtype"]["values"]
    out += [""] + _switch(
        "uint32_t DTypeBytes(uint32_t dtype)",
        "Bytes per element of a stream dtype, 0 for an unknown code.",
        [(v["c"], v["bytes"]) for v in dtypes],
        "0",
    )
    out += ["", "}  // namespace stream", "}  // namespace tvm_npu", "", "#endif  // TVM_NPU_STREAM_FORMAT_H_"]
    return "\n".join(out) + "\n"


def npu_config_h() -> str:
    fields = spec.CONFIG["fields"]
    out = _banner() + [
        "/*!",
        " * \\file tvm_npu/npu_config.h",
        " * \\brief The NPU's numbers (docs/npu.md section 1) and status codes (section 7).",
        " *",
        " * Python reads the same spec (tvm_npu.contract.config and .errors). The field order is the order",
        " * of the configuration block of a command stream, so a block can be copied into this struct word",
        " * by word.",
        " */",
        "#ifndef TVM_NPU_NPU_CONFIG_H_",
        "#define TVM_NPU_NPU_CONFIG_H_",
        "",
        "#include <cstdint>",
        "",
        "namespace tvm_npu {",
        "",
        "struct NPUConfig {",
        *_aligned([(f"uint32_t {f['name']};", f["doc"]) for f in fields]),
    ]
    for preset in spec.PRESETS:
        values = ", ".join(str(preset["values"][f["name"]]) for f in fields)
        out += [
            "",
            f"  /*! \\brief The `{preset['name']}` preset. */",
            f"  static NPUConfig {preset['c']}() {{",
            f"    return {{{values}}};",
            "  }",
        ]
    out += [
        "};",
        "",
        (
            f"static_assert(sizeof(NPUConfig) == {layout.CONFIG.size}, "
            f'"NPUConfig must match the {layout.CONFIG.size}-byte configuration block");'
        ),
        "",
        "enum class NPUStatus : uint32_t {",
        *[f"  {e['c']} = {e['value']}," for e in spec.ERRORS],
        "};",
        "",
    ]
    out += _switch(
        "const char* StatusName(NPUStatus status)",
        'The code\'s name as written in docs/npu.md, e.g. "ERR_BAD_STREAM".',
        [(f"NPUStatus::{e['c']}", f'"{e["name"]}"') for e in spec.ERRORS],
        None,
        '"ERR_UNKNOWN"',
    )
    out += ["", "}  // namespace tvm_npu", "", "#endif  // TVM_NPU_NPU_CONFIG_H_"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------
# docs/npu.md
# ---------------------------------------------------------------------------------------------------


def _table(header: list, rows: list) -> list:
    """A Markdown table, columns padded to their widest cell of at most 80 characters."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max([len(r[i]) for r in cells if len(r[i]) <= 80] or [3]) for i in range(len(header))]

    def line(row):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return [line(cells[0]), rule] + [line(r) for r in cells[1:]]


def _doc_name(v: dict) -> str:
    return v.get("doc_name", v["name"])


def _display(field: dict, value: int) -> str:
    kind = field.get("display")
    if kind == "clock" and value % 1000 == 0:
        return f"{value} ({value // 1000} GHz)"
    if kind == "size":
        for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size} {unit} ({value})"
    return str(value)


def _bytes(record: layout.Record, f: dict) -> str:
    at = record.offsets[f["name"]]
    size = layout.Record({"c": "", "fields": [dict(f)]}).size
    return f"{at}-{at + size - 1}"


def _record_table(record: layout.Record) -> list:
    rows = []
    for f in record.fields:
        kind = f.get("type", "u32") + (f"[{f['count']}]" if "count" in f else "")
        meaning = f.get("doc", "")
        if "value" in f:
            value = f["value"] if isinstance(f["value"], int) else layout.NAMED_VALUES[f["value"]]
            shown = f"0x{value:08X}" if value > 0xFFFF else str(value)
            meaning = f"= {shown}" + (f": {meaning}" if meaning else "")
        if "enum" in f:
            meaning += " (codes below)"
        if f.get("since"):
            meaning = f"format {spec.VERSION_MAJOR}.{f['since']}: {meaning}"
        rows.append([_bytes(record, f), f"`{f['name']}`", kind, meaning])
    return _table(["bytes", "field", "type", "meaning"], rows)


def _codes(values: list) -> str:
    return ", ".join(f"{v['code']} {_doc_name(v)}" + (f" ({v['doc']})" if v.get("doc") else "") for v in values)


_ENGINE_NAMES = {None: "—", "dma": "DMA ch.", "mac": "MAC", "vector": "vector"}


def _blob_table() -> list:
    qparams_since = next(f["since"] for f in spec.HEADER["fields"] if f["name"] == "qparams_offset")
    return _table(
        ["offset", "size", "content"],
        [
            [0, layout.HEADER.size, "header"],
            [layout.CONFIG_OFFSET, layout.CONFIG.size, "configuration block"],
            [
                layout.TENSOR_TABLE_OFFSET,
                f"{layout.TENSOR.size} * num_tensors",
                "tensor table (I/O and weight descriptors)",
            ],
            ["...", f"{layout.COMMAND_BYTES} * num_commands", "command table"],
            [
                "`qparams_offset`",
                f"{layout.QPARAMS.size} * num_tensors",
                f"quantization table (format {spec.VERSION_MAJOR}.{qparams_since}; optional)",
            ],
            [
                f"... ({layout.NAMED_VALUES['WEIGHTS_ALIGNMENT']}-aligned)",
                "weights_bytes",
                "weight region (copied to DDR address 0)",
            ],
        ],
    )


def _command_block() -> list:
    waits = spec.WAITS
    fields = " | ".join(f"wait_{e} << {waits['shift'] + waits['bits'] * i}" for i, e in enumerate(waits["engines"]))
    word0_end = waits["shift"] + waits["bits"] * len(waits["engines"])
    lead = (
        f"**Command** ({layout.COMMAND_WORDS} x u32): word 0 = `opcode | {fields}` ({waits['bits']}-bit "
        f"wait fields as in section 5, {waits['no_wait']} = no wait; bits {word0_end}-31 zero), words "
        f"1-{layout.COMMAND_WORDS - 1} operands (unused ones zero)."
    )
    rows = [[f"`{op['name']}`", f"`{', '.join(op['operands'])}`" if op["operands"] else "none"] for op in spec.OPCODES]
    return [lead, ""] + _table(["command", "operand words 1.."], rows)


def doc_blocks() -> dict:
    """The generated blocks of docs/npu.md, by marker name."""
    presets, fields, dtypes = spec.PRESETS, spec.CONFIG["fields"], spec.ENUMS["dtype"]["values"]
    blocks = {
        "config": _table(
            ["field", "meaning"] + [f"`{p['name']}`" for p in presets],
            [[f"`{f['name']}`", f["doc"]] + [_display(f, p["values"][f["name"]]) for p in presets] for f in fields],
        ),
        "dtypes": _table(
            ["code", "name", "size", "use"],
            [[v["code"], _doc_name(v), v.get("doc_size", v["bytes"]), v["use"]] for v in dtypes],
        ),
        "unary-funcs": _table(
            ["`func`", "name", "fp32 evaluation (in this order)", "guarantee"],
            [
                [
                    v["code"],
                    _doc_name(v) + (f" (format 1.{v['since']})" if v.get("since") else ""),
                    v["fp32"],
                    v["guarantee"],
                ]
                for v in spec.ENUMS["unary_func"]["values"]
            ],
        ),
        "opcodes": _table(
            ["opcode", "name", "engine", "what it does"],
            [[f"0x{op['code']:02X}", f"`{op['name']}`", _ENGINE_NAMES[op["engine"]], op["doc"]] for op in spec.OPCODES],
        ),
        "blob": _blob_table(),
        "header": [f"**Header** ({layout.HEADER.size} bytes):", ""] + _record_table(layout.HEADER),
        "qparams": [f"**Quantization table entry** ({layout.QPARAMS.size} bytes):", ""] + _record_table(layout.QPARAMS),
        "config-block": [
            f"**Configuration block** ({len(fields)} x u32, in this order): "
            + ", ".join(f"`{f['name']}`" for f in fields)
            + "."
        ],
        "tensor-descriptor": [f"**Tensor descriptor** ({layout.TENSOR.size} bytes):", ""]
        + _record_table(layout.TENSOR),
        "operands": _command_block(),
        "enums": ["**Codes** of the enumerated fields and operands:", ""]
        + _table(["field", "codes"], [[e["field"], _codes(e["values"])] for e in spec.ENUMS.values()]),
        "errors": _table(
            ["value", "code", "meaning and what to change"],
            [[e["value"], f"`{e['name']}`", e["doc"]] for e in spec.ERRORS],
        ),
    }
    return {name: "\n".join(_wrap_prose(lines)) for name, lines in blocks.items()}


def _wrap_prose(lines: list) -> list:
    """Table rows as they are; a paragraph wrapped at 105 columns, as the rest of docs/npu.md."""
    out: list = []
    for line in lines:
        out += (
            [line]
            if line.startswith("|") or not line
            else textwrap.wrap(line, 105, break_long_words=False, break_on_hyphens=False)
        )
    return out


_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) [^\n]*-->\n)(?P<body>.*?)"
    r"(<!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)


def splice_docs(text: str) -> str:
    """`text` (docs/npu.md) with every generated block rewritten; an unknown or missing block is an error."""
    blocks, found = doc_blocks(), set()

    def fill(m):
        name = m.group("name")
        if name not in blocks:
            raise ValueError(f"{NPU_MD}: unknown generated block {name!r}")
        found.add(name)
        return m.group(1) + blocks[name] + "\n" + m.group(4)

    out = _BLOCK.sub(fill, text)
    missing = set(blocks) - found
    if missing:
        raise ValueError(
            f"{NPU_MD} has no block(s) {sorted(missing)}: add "
            f"'<!-- BEGIN GENERATED: name (...) -->' ... '<!-- END GENERATED: name -->'"
        )
    return out


def begin_marker(name: str) -> str:
    return f"<!-- BEGIN GENERATED: {name} (from {SPEC_PATH}; run {COMMAND}) -->"


# ---------------------------------------------------------------------------------------------------


def outputs(root: Path) -> dict:
    """Every generated file's path under `root` and its expected text."""
    return {
        root / STREAM_FORMAT_H: stream_format_h(),
        root / NPU_CONFIG_H: npu_config_h(),
        root / NPU_MD: splice_docs((root / NPU_MD).read_text()),
    }


def stale(root: Path) -> list:
    """The generated files under `root` whose text differs from the spec's."""
    return [p for p, text in outputs(root).items() if not p.exists() or p.read_text() != text]


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parents[3],
        help="the source checkout (default: the one this file is in)",
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if not (args.root / NPU_MD).exists():
        parser.error(f"{args.root} is not a tvm_npu source checkout (no {NPU_MD}); pass --root")
    if args.check:
        paths = stale(args.root)
        for p in paths:
            print(f"stale: {p.relative_to(args.root)}; run: {COMMAND}", file=sys.stderr)
        return 1 if paths else 0
    for path, text in outputs(args.root).items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
