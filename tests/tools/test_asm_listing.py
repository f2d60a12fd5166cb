"""`asm` on listings: any stream the spec can pack reads back byte for byte (hypothesis), as do the tests'
hand-packed int4 and KV-cache streams; a wrong line in an edited listing is ERR_BAD_STREAM naming that
line; an edit the NPU could not run is refused by the verifier or the runtime's validation."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tvm_npu
from int4_streams import Dense, w4_stream
from kv_streams import kv_stream
from tvm_npu.contract import layout, spec
from tvm_npu.contract.errors import NPUError
from tvm_npu.models import small_cnn
from tvm_npu.tools import asm, disasm
from tvm_npu.tools.cli import main

U32 = st.integers(0, 0xFFFFFFFF)
WORDS = st.one_of(st.integers(0, 300), st.integers(0xFFFFFF00, 0xFFFFFFFF), U32)


def _enum(name):
    return st.sampled_from(sorted(layout.codes(name).values()))


@st.composite
def _command(draw):
    if draw(st.integers(0, 15)) == 0:  # an unknown opcode, or bits outside every field: `.raw`
        return [draw(st.integers(0x31, 0xFF)) | draw(U32) & ~0xFF, *draw(st.lists(U32, min_size=31, max_size=31))]
    op = draw(st.sampled_from(spec.OPCODES))
    enums = {k: _enum(v) for k, v in op.get("enums", {}).items()}
    args = {name: draw(enums.get(name, _enum("dtype") if name.endswith("dtype") else WORDS)) for name in op["operands"]}
    waits = draw(st.dictionaries(st.sampled_from(layout.ENGINES), st.integers(0, 14)))
    return layout.command_words(op["name"], args, waits)


@st.composite
def _stream(draw):
    """A blob as layout.assemble packs one: any configuration, tensor fields with valid enum codes, any
    operand words, an optional quantization table, any weight bytes."""

    def tensor():
        rank = draw(st.integers(0, 4))
        return layout.TENSOR.pack(
            role=draw(_enum("role")),
            io_index=draw(WORDS),
            dtype=draw(_enum("dtype")),
            host_dtype=draw(_enum("dtype")),
            host_layout=draw(_enum("layout")),
            host_rank=rank,
            host_shape=draw(st.lists(st.integers(1, 4096), min_size=rank, max_size=rank)),
            view=draw(st.lists(st.integers(0, 4096), min_size=4, max_size=4)),
            ddr_addr=draw(U32),
            row_stride=draw(WORDS),
        )

    n = draw(st.integers(0, 5))
    quant = draw(st.booleans())
    f32 = st.floats(width=32, allow_nan=False)
    return layout.assemble(
        draw(st.lists(WORDS, min_size=len(layout.CONFIG.names), max_size=len(layout.CONFIG.names))),
        [tensor() for _ in range(n)],
        [struct_words(w) for w in draw(st.lists(_command(), max_size=12))] + [layout.pack_command("END")],
        draw(st.binary(max_size=300)),
        ddr_bytes=draw(U32),
        sram_bytes_used=draw(U32),
        num_inputs=draw(st.integers(0, 64)),
        num_outputs=draw(st.integers(0, 64)),
        version=(1, draw(st.integers(0, layout.VERSION_MINOR))),
        qparams=[(draw(f32), draw(st.integers(-(1 << 31), (1 << 31) - 1))) for _ in range(n)] if quant and n else None,
        state_bytes=draw(U32),
        state_space=draw(WORDS),
    )


def struct_words(words):
    return np.asarray(words, "<u4").tobytes()


# derandomize: CI runs the same examples each time (3,000 edits and 1,500 streams passed when written).
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_stream())
def test_any_packed_stream_round_trips(blob):
    """Round trip of the text form itself, on streams the verifier would refuse (verify=False)."""
    text = disasm(blob, inline_weights=True)
    assert asm(text, verify=False) == {"stream": blob}


def test_hand_packed_int4_and_kv_streams_round_trip():
    rng = np.random.default_rng(0)
    blobs = [w4_stream(Dense(rng, 3, 64, 8, 32, signed)) for signed in (True, False)]
    blobs.append(kv_stream(S=2, T_=8, D=16, H=4, H_kv=2, scale=0.25, space=3))
    for blob in blobs:
        for inline in (True, False):
            text = disasm(blob, inline_weights=inline)
            weights = None if inline else {"stream": blob[layout.HEADER.unpack(blob)["weights_offset"] :]}
            assert asm(text, weights_from=weights) == {"stream": blob}
    assert "w_dtype=int4|0x2000" in disasm(blobs[0]) and "w_dtype=uint4|0x2000" in disasm(blobs[1])
    kv = disasm(blobs[2])
    assert "role=state" in kv and "ddr_addr=state+0x" in kv and "pos_mode=1" in kv


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("asm") / "cnn.so"
    tvm_npu.export_library(tvm_npu.build(tvm_npu.from_onnx(small_cnn(seed=0, image=16))), path)
    return path, disasm(path)


def _line_of(text, needle):
    return next(i for i, ln in enumerate(text.splitlines(), start=1) if needle in ln)


@pytest.mark.parametrize(
    "old, new, what",
    [
        ("CONV2D", "CONV3D", r"unknown opcode 'CONV3D'"),
        (" kh=3 ", " kh=3 kz=1 ", r"CONV2D has no operand 'kz'"),
        (" in_h=8 ", " ", r"CONV2D misses in_h"),
        (" oc=16 ", " oc=0x100000000 ", r"oc=0x100000000 is out of range for its 32-bit field"),
        (" act=relu ", " act=gelu ", r"'gelu' is not a value of activation"),
        (" in_addr=sram+0x800 ", " in_addr=weights+0x800 ", r"'weights' is not its address space"),
        (" in_c=3 ", " in_c=three ", r"in_c='three' is not a number"),
        ("wait=dma0:0,dma1:0", "wait=dma2:0", r"wait on 'dma2'"),
        ("wait=dma0:0,dma1:0", "wait=dma0:16", r"k in 0..15 \(4-bit field\)"),
        (" dtype=float16 in_addr", " dtype=float16 dtype=int8 in_addr", r"dtype given twice"),
    ],
)
def test_a_wrong_line_names_its_number(cnn, old, new, what):
    path, text = cnn
    line = _line_of(text, "CONV2D")
    edited = text.replace(old, new, 1)
    changed = [i for i, (a, b) in enumerate(zip(text.splitlines(), edited.splitlines()), start=1) if a != b]
    assert changed == [line]  # the edit is on the first CONV2D's line
    with pytest.raises(NPUError, match=rf"ERR_BAD_STREAM: listing line {line}: .*{what}"):
        asm(edited, weights_from=path)


def test_record_and_structure_errors(cnn):
    path, text = cnn
    cases = {
        text.replace("row_stride=128", "row_stride=128 colour=red", 1): r"\.tensor has no field 'colour'",
        text.replace(" sram_banks=16", "", 1): r"\.config misses sram_banks",
        text.replace("version=1.3", "version=one", 1): r"version=MAJOR\.MINOR",
        text.replace("\nend", "", 1): r"has no `end`",
        "DMA_LOAD channel=0\n": r"outside a `region SYMBOL`",
        text.replace(".weights", ".wieghts", 1): r"unknown directive '\.wieghts'",
        re.sub(r"\n 0: [^\n]*", "\n 0: ; emptied", text, count=1): r"0: without an opcode",
    }
    for edited, what in cases.items():
        with pytest.raises(NPUError, match=rf"ERR_BAD_STREAM: listing line \d+: .*{what}"):
            asm(edited, weights_from=path)
    assert asm(text) == asm(text, weights_from=path)  # the weights of the library its `library` line names
    with pytest.raises(NPUError, match=r"weight bytes are not in the listing: .*--weights-from"):
        asm(text.replace("\nlibrary ", "\n; library ", 1))
    other = {s: b"\x01" * len(w) for s, w in _weights(path).items()}
    with pytest.raises(NPUError, match=r"SHA-256"):
        asm(text, weights_from=other)


def _weights(path):
    from tvm_npu.tools.disasm import read_library
    from tvm_npu.tools.listing import Region

    return {s: Region.from_bytes(s, b).weights for s, b in read_library(path).regions}


def test_an_edit_the_npu_cannot_run_is_refused(cnn):
    """Well-formed edits the checks refuse: an SRAM address past SRAM (the verifier), a dropped wait (a
    hazard: the verifier), an unsupported stride (the runtime's validation)."""
    path, text = cnn
    conv = _line_of(text, "CONV2D")
    edits = [
        (" in_addr=sram+0x800 ", " in_addr=sram+0x1ff000 ", "ERR_BAD_STREAM"),
        (" wait=dma0:0,dma1:0", "", "ERR_BAD_STREAM"),
        (" stride_h=2 ", " stride_h=3 ", "ERR_OP_NOT_SUPPORTED"),
    ]
    for old, new, code in edits:
        with pytest.raises(NPUError) as err:
            asm(text.replace(old, new, 1), weights_from=path)
        assert err.value.code == code, str(err.value)
        assert re.search(rf"listing line {conv}\b", str(err.value)), str(err.value)
        assert asm(text.replace(old, new, 1), weights_from=path, verify=False)  # well-formed all the same


def test_cli_disasm_asm_into(cnn, tmp_path, capsys):
    path, text = cnn
    listing = tmp_path / "cnn.txt"
    assert main(["disasm", str(path), "-o", str(listing)]) == 0
    assert listing.read_text() == text
    assert main(["asm", str(listing), "-o", str(tmp_path / "cnn.bin")]) == 0  # weights: the `library` line's
    ((symbol, blob),) = asm(text, weights_from=path).items()
    assert (tmp_path / "cnn.bin").read_bytes() == blob
    assert main(["asm", str(listing), "--into", str(path), "-o", str(tmp_path / "same.so")]) == 0
    assert (tmp_path / "same.so").read_bytes() == path.read_bytes()
    capsys.readouterr()
    listing.write_text(text.replace("CONV2D", "CONV3D", 1))
    assert main(["asm", str(listing), "-o", str(tmp_path / "x.bin"), "--weights-from", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tvm-npu: error: ERR_BAD_STREAM: listing line {_line_of(text, 'CONV2D')}: unknown opcode")
    assert main(["disasm", str(tmp_path / "missing.so")]) == 2


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_any_edit_assembles_or_is_a_coded_error(cnn, data):
    """A token of the listing replaced by anything: asm gives bytes or an NPUError, never another exception."""
    path, text = cnn
    lines = text.splitlines()
    n = data.draw(st.integers(0, len(lines) - 1))
    tokens = lines[n].split(" ")
    k = data.draw(st.integers(0, len(tokens) - 1))
    tokens[k] = data.draw(st.text(alphabet="abcx0123456789+-=:,.|;_ ", max_size=12))
    lines[n] = " ".join(tokens)
    try:
        asm("\n".join(lines), weights_from=path)
    except NPUError as err:
        assert "listing line " in str(err), err  # and it says where
