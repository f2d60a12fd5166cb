"""The binary contract has one source, tvm_npu/contract/spec.py: the files generated from it are current,
the generated C++ header lays records out as the Python packer does (checked by compiling it), and the
packer puts every operand in the word the spec gives it."""

import dataclasses
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tvm_npu.contract import config, errors, generate, layout, spec

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())


def test_generated_files_are_current():
    stale = [str(p.relative_to(ROOT)) for p in generate.stale(ROOT)]
    assert not stale, f"{stale} differ from {generate.SPEC_PATH}; regenerate them with: {generate.COMMAND}"


def test_check_reports_a_stale_file_and_the_generator_fixes_it(tmp_path, capsys):
    for rel in (generate.STREAM_FORMAT_H, generate.NPU_CONFIG_H, generate.NPU_MD):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    header = tmp_path / generate.STREAM_FORMAT_H
    header.write_text(header.read_text().replace("kSoftmax = 0x24", "kSoftmax = 0x25"))
    doc = tmp_path / generate.NPU_MD
    doc.write_text(doc.read_text().replace("| `ERR_TIMEOUT`", "| `ERR_LATE`"))
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert generate.STREAM_FORMAT_H in err and generate.NPU_MD in err and generate.COMMAND in err
    assert generate.NPU_CONFIG_H not in err
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.main(["--check", "--root", str(tmp_path)]) == 0
    assert "kSoftmax = 0x24" in header.read_text() and "| `ERR_TIMEOUT`" in doc.read_text()


def test_docs_prose_outside_the_generated_blocks_is_kept():
    text = (ROOT / generate.NPU_MD).read_text()
    blocks = generate.doc_blocks()
    for name in blocks:
        assert text.count(f"<!-- BEGIN GENERATED: {name} ") == 1, name
    emptied = generate.splice_docs(text)
    assert emptied == text  # the committed file is a fixed point
    prose = "Validation at load"
    assert prose in text and text.index(prose) > text.index("<!-- END GENERATED: operands -->")


# ---------------------------------------------------------------------------------------------
# The spec is consistent
# ---------------------------------------------------------------------------------------------


def _unique(items, what):
    seen = set()
    dup = [i for i in items if i in seen or seen.add(i)]
    assert not dup, f"duplicate {what}: {dup}"


def test_spec_is_consistent():
    minor = layout.VERSION_MINOR
    assert [m["minor"] for m in spec.MINORS] == list(range(minor + 1))
    _unique([op["code"] for op in spec.OPCODES], "opcode")
    _unique([op["name"] for op in spec.OPCODES] + [op["c"] for op in spec.OPCODES], "opcode name")
    for op in spec.OPCODES:
        _unique(op["operands"], f"{op['name']} operand")
        assert len(op["operands"]) <= spec.COMMAND_WORDS - 1 and 0 <= op["code"] <= 0xFF, op["name"]
        assert len(op.get("c_fields", op["operands"])) == len(op["operands"]), op["name"]
        assert set(op.get("operands_since", {})) <= set(op["operands"]), op["name"]
        assert set(op.get("comments", {})) | set(op.get("enums", {})) <= set(op["operands"]), op["name"]
        assert all(op.get("since", 0) <= m <= minor for m in op.get("operands_since", {}).values())
        # A minor only appends: operands of a later minor follow every older one.
        since = [op.get("operands_since", {}).get(o, 0) for o in op["operands"]]
        assert since == sorted(since), op["name"]
        assert set(op.get("enums", {}).values()) <= set(spec.ENUMS), op["name"]
    for name, enum in spec.ENUMS.items():
        _unique([v["code"] for v in enum["values"]], f"{name} code")
        _unique([v["name"] for v in enum["values"]], f"{name} name")
    _unique([e["value"] for e in spec.ERRORS], "error value")
    assert [e["value"] for e in spec.ERRORS] == list(range(len(spec.ERRORS)))
    for record in (layout.HEADER, layout.CONFIG, layout.TENSOR, layout.QPARAMS):
        assert record.size % 4 == 0, record.name
    fields = [f["name"] for f in spec.CONFIG["fields"]]
    for preset in spec.PRESETS:
        assert list(preset["values"]) == fields, preset["name"]


def test_python_npu_config_has_the_spec_fields():
    """NPUConfig's fields are written out for the type checker; they must be the spec's, in order."""
    names = [f.name for f in dataclasses.fields(config.NPUConfig)]
    assert names == ["name"] + [f["name"] for f in spec.CONFIG["fields"]]
    assert config.NPUConfig() == config.NPU_REF
    assert config.NPU_SMALL.sram_bytes == 512 * 1024 and config.NPU_SMALL.block()[4] == 524288
    assert errors.NPUError("ERR_TIMEOUT", "late").value == 7


# ---------------------------------------------------------------------------------------------
# The packer puts each field where the spec says
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [op["name"] for op in spec.OPCODES])
def test_command_operands_land_in_their_words(op):
    operands = {name: 1000 + i for i, name in enumerate(layout.OPERANDS[op])}
    waits = {"dma1": 3, "vector": 0}
    words = struct.unpack("<32I", layout.pack_command(op, operands, waits))
    n = len(operands)
    assert words[1 : 1 + n] == tuple(range(1000, 1000 + n)) and words[1 + n :] == (0,) * (31 - n)
    code = {o["name"]: o["code"] for o in spec.OPCODES}[op]
    assert words[0] == code | 15 << 8 | 3 << 12 | 15 << 16 | 0 << 20
    assert layout.unpack_command(struct.pack("<32I", *words)) == (op, operands, waits)
    with pytest.raises(ValueError, match="no operands"):
        layout.pack_command(op, {"not_an_operand": 1})


def test_records_pack_in_field_order():
    header = layout.HEADER.pack(num_tensors=2, crc32=0xDEADBEEF, qparams_offset=96)
    magic, major, minor, size, *rest = struct.unpack("<IHH14I", header)
    assert (magic, major, minor, size) == (0x5355504E, 1, layout.VERSION_MINOR, 64)
    assert rest[1] == 2 and rest[9] == 0xDEADBEEF and rest[10] == 96 and rest[11:] == [0, 0]
    words = struct.unpack(
        "<16I",
        layout.TENSOR.pack(role=1, io_index=7, host_shape=[2, 3], view=[1, 2, 3, 4], ddr_addr=4096, row_stride=128),
    )
    assert words == (1, 7, 0, 0, 0, 0, 2, 3, 0, 0, 1, 2, 3, 4, 4096, 128)
    assert struct.unpack("<fi", layout.QPARAMS.pack(scale=0.5, zero_point=-3)) == (0.5, -3)


# ---------------------------------------------------------------------------------------------
# The generated C++ header agrees with the Python packer (compiled and run)
# ---------------------------------------------------------------------------------------------


def _cpp_probe() -> tuple:
    """A C++ program printing the header's view of every layout, and the lines Python expects."""
    body, want = [], []

    def emit(expr, value):
        body.append(f'  std::printf("%s %llu\\n", "{expr}", (unsigned long long)({expr}));')
        want.append(f"{expr} {value}")

    for record in (layout.HEADER, layout.TENSOR, layout.QPARAMS):
        emit(f"sizeof(stream::{record.name})", record.size)
        for name, at in record.offsets.items():
            emit(f"offsetof(stream::{record.name}, {name})", at)
    emit("sizeof(NPUConfig)", layout.CONFIG.size)
    for name, at in layout.CONFIG.offsets.items():
        emit(f"offsetof(NPUConfig, {name})", at)
    for preset in spec.PRESETS:
        for name, value in preset["values"].items():
            emit(f"NPUConfig::{preset['c']}().{name}", value)
    for op in spec.OPCODES:
        emit(f"stream::{op['c']}", op["code"])
        if "c_struct" in op:
            emit(f"stream::k{op['c_struct'][: -len('Operands')]}OperandWords", len(op["operands"]))
    for enum in spec.ENUMS.values():
        for v in enum["values"]:
            emit(f"stream::{v['c']}", v["code"])
    for v in spec.ENUMS["dtype"]["values"]:
        emit(f"stream::DTypeBytes(stream::{v['c']})", v["bytes"])
    for e in spec.ERRORS:
        emit(f"static_cast<uint32_t>(NPUStatus::{e['c']})", e["value"])
    for c in spec.CONSTANTS:
        emit(f"stream::{c['c']}", c["value"])
    emit("stream::kVersionMinor", layout.VERSION_MINOR)
    emit("stream::kCommandBytes", layout.COMMAND_BYTES)
    source = "\n".join(
        [
            "#include <tvm_npu/npu_config.h>",
            "#include <tvm_npu/stream_format.h>",
            "#include <cstddef>",
            "#include <cstdio>",
            "using namespace tvm_npu;",
            "int main() {",
            *body,
            "  return 0;",
            "}",
        ]
    )
    return source, want


def test_cpp_header_agrees_with_the_python_layout(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    source, want = _cpp_probe()
    (tmp_path / "probe.cc").write_text(source)
    subprocess.run(
        [cxx, "-std=c++17", "-I", str(ROOT / "include"), "probe.cc", "-o", "probe"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    got = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout.split("\n")
    assert got[:-1] == want
    for line in ("sizeof(stream::Header) 64", "stream::kSoftmax 36", "stream::DTypeBytes(stream::kInt16) 2"):
        assert line in want
