"""`tvm-npu asm`: a listing (disasm.py's, maybe edited by hand) back into command stream bytes.

A listing `disasm` wrote assembles to the very bytes it was read from. An edited one is read line by
line: an unknown opcode, operand or field, a missing or repeated one, a value that is not a number, a
name of its enum or region + offset, or that does not fit its field's width is an NPUError
(ERR_BAD_STREAM) naming the line. The stream it makes is then checked as the compiler checks its own
(backend/verify.py: addresses, ranges, hazards from the waits) and as the runtime checks one at load
(its C++ validation), so an edit the NPU could not run is refused with that check's code
(ERR_INVALID_ADDR, ERR_BAD_STREAM, ...). `patch_library` writes the assembled regions into a copy of
a library in place of its own.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ..contract import layout, spec
from ..contract.errors import NPUError
from . import listing
from .listing import ListingError, Region

_TOKEN = re.compile(r"(\w+)=(\S+)$")
_LABEL = re.compile(r"\d+:$")  # a command's index, written for the reader; asm counts for itself
_NO_WAIT = layout.NO_WAIT


def _pairs(tokens: list, line: int) -> dict:
    out: dict = {}
    for tok in tokens:
        m = _TOKEN.match(tok)
        if m is None:
            raise ListingError(line, f"expected name=value, got {tok!r}")
        if m.group(1) in out:
            raise ListingError(line, f"{m.group(1)} given twice")
        out[m.group(1)] = m.group(2)
    return out


def _check_names(given: dict, allowed: tuple, what: str, line: int, optional: tuple = ()) -> None:
    unknown = [k for k in given if k not in allowed and k not in optional]
    if unknown:
        kind = "field" if what[0] == "." else "operand"
        raise ListingError(line, f"{what} has no {kind} {unknown[0]!r} (it has {', '.join(allowed + optional)})")
    missing = [k for k in allowed if k not in given]
    if missing:
        raise ListingError(line, f"{what} misses {', '.join(missing)}")


def _record(rec: layout.Record, given: dict, what: str, line: int, regions: listing.Regions) -> dict:
    """A spec record's fields (every one required) from name=value text."""
    _check_names(given, rec.names, what, line)
    out = {}
    for f in rec.fields:
        name, text, bits = f["name"], given[f["name"]], listing.field_bits(f)
        if "count" in f:
            items = text.split("x")
            if len(items) > f["count"]:
                raise ListingError(line, f"{name}={text} has {len(items)} entries, the field holds {f['count']}")
            out[name] = tuple(listing.parse_value(t, None, name, regions, line, bits) for t in items)
        elif f.get("type") == "f32":
            out[name] = listing.parse_f32(text, name, line)
        else:
            value = listing.parse_value(text, None, name, regions, line, bits, f.get("enum"))
            signed = f.get("type") == "i32" and value >= 1 << 31
            out[name] = value - (1 << 32) if signed else value
    return out


def _command(tokens: list, line: int, regions: listing.Regions) -> list:
    """A command's 32 words from `OP name=value ... [wait=engine:k,...]`, or `.raw w0 ... w31`."""
    op = tokens[0]
    if op == ".raw":
        if len(tokens) != 1 + layout.COMMAND_WORDS:
            raise ListingError(line, f".raw takes {layout.COMMAND_WORDS} words, got {len(tokens) - 1}")
        return [listing.parse_value(t, None, "word", regions, line) for t in tokens[1:]]
    if op not in layout.OPCODES:
        raise ListingError(line, f"unknown opcode {op!r} (the opcodes are {', '.join(layout.OPCODES)})")
    given = _pairs(tokens[1:], line)
    waits = _waits(given.pop("wait", ""), line)
    _check_names(given, layout.OPERANDS[op], op, line, ("wait",))
    args = {k: listing.parse_value(v, op, k, regions, line) for k, v in given.items()}
    return layout.command_words(op, args, waits)


def _waits(text: str, line: int) -> dict:
    waits = {}
    bits = spec.WAITS["bits"]
    for item in filter(None, text.split(",")):
        engine, _, k = item.partition(":")
        if engine not in layout.ENGINES:
            raise ListingError(line, f"wait on {engine!r}: the engines are {', '.join(layout.ENGINES)}")
        if not k.isdigit() or int(k) >= 1 << bits:
            raise ListingError(line, f"wait {item!r}: give engine:k with k in 0..{(1 << bits) - 1} ({bits}-bit field)")
        waits[engine] = int(k)
    return {e: k for e, k in waits.items() if k != _NO_WAIT}


class _RegionText:
    """What one `region ... end` block of a listing states, collected line by line."""

    def __init__(self, symbol: str, line: int):
        self.symbol, self.line = symbol, line
        self.header: dict | None = None
        self.config: dict | None = None
        self.tensors: list = []  # (line, {name: text})
        self.weights: tuple | None = None  # (line, size, sha256 or None)
        self.data = bytearray()
        self.has_data = False
        self.commands: list = []  # (line, tokens)

    def directive(self, name: str, tokens: list, line: int) -> None:
        if name == ".header":
            self.header = self._once(self.header, name, line) or _pairs(tokens, line)
            self.header["line"] = line
        elif name == ".config":
            self.config = self._once(self.config, name, line) or {"line": line, **_pairs(tokens, line)}
        elif name == ".tensor":
            self.tensors.append((line, _pairs(tokens, line)))
        elif name == ".weights":
            given = _pairs(tokens, line)
            _check_names(given, ("bytes",), ".weights", line, ("sha256",))
            self._once(self.weights, name, line)
            self.weights = (
                line,
                listing.parse_value(given["bytes"], None, "bytes", _NOWHERE, line),
                given.get("sha256"),
            )
        elif name == ".data":
            try:
                self.data += bytes.fromhex("".join(tokens))
            except ValueError:
                raise ListingError(line, ".data takes hex bytes") from None
            self.has_data = True
        elif name == ".raw":
            self.commands.append((line, [name, *tokens]))
        else:
            raise ListingError(line, f"unknown directive {name!r} (.header, .config, .tensor, .weights, .data, .raw)")

    @staticmethod
    def _once(seen, name: str, line: int):
        if seen is not None:
            raise ListingError(line, f"a second {name} in one region")
        return None


_NOWHERE = listing.Regions(0, 0, 0)


def parse(text: str) -> tuple[list[_RegionText], str | None]:
    """The region blocks of a listing, each line checked for its shape (values are read by assemble),
    and the library its `library PATH` line names (None without one)."""
    regions: list[_RegionText] = []
    current: _RegionText | None = None
    library = None
    for n, raw in enumerate(text.splitlines(), start=1):
        tokens = raw.split(";", 1)[0].split()
        if not tokens:
            continue
        if tokens[0] == "library" and current is None:
            library = raw.split(";", 1)[0].strip()[len("library") :].strip()
            continue
        if tokens[0] == "region":
            if current is not None:
                raise ListingError(n, f"region {current.symbol} (line {current.line}) has no `end` before this one")
            if len(tokens) != 2:
                raise ListingError(n, "give `region SYMBOL`")
            current = _RegionText(tokens[1], n)
            continue
        if current is None:
            raise ListingError(n, f"{tokens[0]!r} outside a `region SYMBOL` ... `end` block")
        if tokens == ["end"]:
            regions.append(current)
            current = None
        elif tokens[0].startswith("."):
            current.directive(tokens[0], tokens[1:], n)
        else:
            command = tokens[1:] if _LABEL.match(tokens[0]) else tokens
            if not command:
                raise ListingError(n, f"{tokens[0]} without an opcode (give OPCODE name=value ...)")
            current.commands.append((n, command))
    if current is not None:
        raise ListingError(current.line, f"region {current.symbol} has no `end`")
    if not regions:
        raise ListingError(1, "no `region SYMBOL` block: not a tvm-npu disasm listing")
    return regions, library


WeightSource = Mapping | Callable | None


def _weights(r: _RegionText, weights_from: WeightSource) -> bytes:
    if r.weights is None:
        raise ListingError(r.line, f"region {r.symbol} has no `.weights bytes=N` line")
    line, size, digest = r.weights
    if r.has_data or size == 0:
        data = bytes(r.data)
    elif weights_from is None:
        raise ListingError(
            line,
            f"region {r.symbol}'s weight bytes are not in the listing: give the library they came from "
            f"(asm --weights-from LIB), or disassemble with --inline-weights",
        )
    else:
        data = weights_from(r.symbol) if callable(weights_from) else weights_from.get(r.symbol)
        if data is None:
            raise ListingError(line, f"the weights given hold no region {r.symbol}")
    if len(data) != size:
        raise ListingError(line, f"region {r.symbol}: .weights says {size} bytes, the weights are {len(data)}")
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise ListingError(line, f"region {r.symbol}: the weights' SHA-256 differs from the listing's (other weights?)")
    return bytes(data)


def _region(r: _RegionText, weights_from: WeightSource) -> Region:
    if r.header is None or r.config is None:
        raise ListingError(r.line, f"region {r.symbol} needs a .header and a .config line")
    hline = r.header.pop("line")
    version = r.header.pop("version", None)
    _check_names(r.header, tuple(k for k in Region.SETTABLE if not k.startswith("version")), ".header", hline)
    if version is None or not re.fullmatch(r"\d+\.\d+", version):
        raise ListingError(hline, "give the stream format as version=MAJOR.MINOR, e.g. version=1.4")
    fields = {f["name"]: f for f in spec.HEADER["fields"]}
    header = {
        k: listing.parse_value(v, None, k, _NOWHERE, hline, listing.field_bits(fields[k])) for k, v in r.header.items()
    }
    for k, v in zip(("version_major", "version_minor"), version.split(".")):
        header[k] = listing.parse_value(v, None, k, _NOWHERE, hline, listing.field_bits(fields[k]))
    weights = _weights(r, weights_from)
    regions = listing.Regions(len(weights), header["ddr_bytes"], header["state_bytes"])
    cline = r.config.pop("line")
    config = _record(layout.CONFIG, r.config, ".config", cline, regions)
    tensors, qparams = [], []
    quant_names = layout.QPARAMS.names
    for line, given in r.tensors:
        q = {k: given.pop(k) for k in quant_names if k in given}
        tensors.append(_record(layout.TENSOR, given, ".tensor", line, regions))
        qparams.append((line, q))
    table = None
    if any(q for _, q in qparams):
        zero = {"scale": "0", "zero_point": "0"}
        table = [_record(layout.QPARAMS, {**zero, **q}, ".tensor", line, regions) for line, q in qparams]
    commands = [_command(tokens, line, regions) for line, tokens in r.commands]
    return Region(r.symbol, header, config, tensors, table, commands, weights)


def check_stream(blob: bytes) -> None:
    """The checks a compiled stream passes, on an assembled one: the runtime's validation at load (every
    opcode, operand and address), then the compiler's verifier (hazards from the waits). Raises NPUError
    with the failing check's code."""
    from .. import runtime
    from ..backend.verify import verify
    from ..contract.stream import decode

    runtime.validate_stream(blob)
    verify(decode(blob))


def _at_line(err: NPUError, r: _RegionText) -> str:
    """A check's message without its code, its "command i" placed at its listing line."""
    what = str(err).split(":", 1)[-1].strip()
    m = re.search(r"command (\d+)", what)
    if m and int(m.group(1)) < len(r.commands):
        return f"listing line {r.commands[int(m.group(1))][0]}: {what}"
    return f"listing line {r.line}: {what}"


def _weights_source(weights_from) -> WeightSource:
    """A callable symbol -> weight bytes from a library (path or loaded), a stream blob, or a mapping."""
    if weights_from is None or isinstance(weights_from, Mapping) or callable(weights_from):
        return weights_from
    from .disasm import read_library

    lib = read_library(weights_from)
    return {sym: Region.from_bytes(sym, blob).weights for sym, blob in lib.regions}


def asm(text: str, weights_from=None, verify: bool = True) -> dict[str, bytes]:
    """Assemble a listing (`disasm`'s text, edited or not) into stream blobs.

    Parameters
    ----------
    text : str
        The listing.
    weights_from : str, os.PathLike, module, Mapping or callable, optional
        Where regions whose listing does not hold their weights (no `.data` lines) take them from: the
        library the listing was made of (a path or a loaded one), {symbol: weight bytes}, or a function
        of the symbol. The listing's SHA-256 of each region's weights is checked against them. Default:
        the library its `library PATH` line names (disasm writes it), when that file exists.
    verify : bool
        Check every stream as the compiler and the runtime check theirs (see `check_stream`).

    Returns
    -------
    dict
        symbol -> the region's stream bytes, in listing order.
    """
    if not isinstance(text, str):
        raise NPUError(
            "ERR_INVALID_CONFIG", f"asm takes the listing's text (Path(listing).read_text()), not {type(text).__name__}"
        )
    out = {}
    regions, library = parse(text)
    needs = any(not r.has_data and r.weights is not None and r.weights[1] for r in regions)
    if weights_from is None and needs and library is not None and Path(library).is_file():
        weights_from = library  # the listing's own library; the weights' SHA-256 is still checked
    source = _weights_source(weights_from)
    for r in regions:
        if r.symbol in out:
            raise ListingError(r.line, f"region {r.symbol} appears twice")
        blob = _region(r, source).to_bytes()
        if verify:
            try:
                check_stream(blob)
            except NPUError as err:
                raise NPUError(err.code, f"region {r.symbol}: {_at_line(err, r)}") from None
        out[r.symbol] = blob
    return out


def patch_library(library: str | os.PathLike, streams: Mapping, output: str | os.PathLike) -> Path:
    """A copy of `library` (a `tvm_npu.export_library` file) at `output` whose NPU regions named in
    `streams` (symbol -> stream bytes, e.g. `asm`'s) run those streams instead, sealed with a new
    integrity trailer. A stream must keep its region's size (an edit of operands, waits, fields or
    weights; not one that adds commands or tensors: recompile for that): ERR_BAD_STREAM otherwise."""
    from ..runtime.artifact import trailer, verified_payload
    from ..runtime.files import check_distinct, write_bytes
    from .disasm import read_library

    check_distinct(output, [library], "output")
    library = Path(library)
    payload = bytearray(verified_payload(library, library.read_bytes()))
    old = dict(read_library(library).regions)
    for symbol, new in streams.items():
        if symbol not in old:
            raise NPUError("ERR_BAD_STREAM", f"{library} has no NPU region {symbol} (it has {', '.join(old)})")
        was = old[symbol]
        if len(new) != len(was):
            raise NPUError(
                "ERR_BAD_STREAM",
                f"region {symbol}: the edited stream is {len(new)} bytes, the library's {len(was)}; only an "
                f"edit that keeps the size (operands, waits, fields, weights) patches in place: recompile for more",
            )
        at, stored = _stored(bytes(payload), was, new, symbol)
        payload[at : at + len(stored)] = stored
    # Renamed into place (runtime/files.py): `library` is loaded (dlopen maps the file), and writing the
    # mapped file in place, as output == library did, crashed the process when the loader next read it.
    return write_bytes(output, bytes(payload) + trailer(bytes(payload)))


def _stored(payload: bytes, was: bytes, new: bytes, symbol: str) -> tuple:
    """(offset, new bytes) of a region's stream as the library stores it: whole, or, for a region whose
    weights another region holds (an LLM's decode after prefill), its tables before the weights."""
    head = layout.HEADER.unpack(was)["weights_offset"]
    for part, repl in ((was, new), (was[:head], new[:head])):
        if payload.count(part) == 1:
            if len(repl) < len(new) and new[head:] != was[head:]:
                what = "shares its weights with another region: edit its commands only"
                raise NPUError("ERR_BAD_STREAM", f"region {symbol} {what}")
            return payload.index(part), repl
    raise NPUError("ERR_BAD_ARTIFACT", f"region {symbol}'s stream is not stored once, as is, in the library")
