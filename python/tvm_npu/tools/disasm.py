"""`tvm-npu disasm`: every command of every NPU region of a compiled library, as text (docs/disasm.md).

The listing shows each region's header, configuration block and tensor descriptors, and one line per
command: its opcode, every operand by its name in the contract (addresses as region + offset, enums by
name), the waits it issues with, and in a comment the layer it came from (the library's source map,
backend/source_map.py), the earlier commands those waits hold it for and a DMA's bytes. `tvm-npu asm`
(asm.py) reads the listing back into the same bytes. Fields, operands and widths all come from
contract/spec.py; listing.py says how a value is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..backend.source_map import FUNCTION as SOURCE_MAP
from ..contract import layout
from ..contract.config import PRESETS
from ..contract.errors import NPUError
from ..contract.stream import Command
from . import listing
from .listing import Region

_LLM_META = "llm_meta"  # an LLM artifact's metadata (llm/one_library.py): its regions' command_layers
_DATA_BYTES = 32  # weight bytes per `.data` line


@dataclass
class Library:
    """The NPU regions of a library: (symbol, stream blob) in library order, each command's source
    (symbol -> one string per command, "" unknown), and the file they came from (None: in memory)."""

    regions: list
    sources: dict = field(default_factory=dict)
    path: Path | None = None


def _source_map(lib) -> dict:
    """symbol -> each command's layer, from the library's source map, or from an LLM artifact's metadata;
    {} for a library without either (compiled before the source map existed)."""
    import tvm
    from tvm import relax

    try:
        vm = lib if isinstance(lib, relax.VirtualMachine) else relax.VirtualMachine(lib, tvm.cpu())
    except Exception:  # noqa: BLE001  (a module that is no Relax executable: no metadata to read)
        return {}
    for name in (SOURCE_MAP, _LLM_META):
        try:
            text = str(vm[name]())
        except (AttributeError, KeyError, RuntimeError):  # no such function in this library
            continue
        regions = json.loads(text)["regions"]
        if name == _LLM_META:  # {step: {symbol: region}}
            regions = {sym: r for step in regions.values() for sym, r in step.items()}
        return {sym: _command_sources(sym, r) for sym, r in regions.items()}
    return {}


def _command_sources(symbol: str, region: dict) -> list:
    """One comment per command: its layer (`layer N` for the region's N-th, the planner's name for the
    rest) and, when known, the pattern it came from."""
    layers = {lay["name"]: lay for lay in region.get("layers", [])}
    out = []
    for name in region.get("command_layers", []):
        lay = layers.get(name, {})
        owner, _, rest = name.partition(".")  # "<symbol>.7" (a layer), "<symbol>.72.copy0" (the planner's)
        short = f"layer {rest}" if rest and symbol.endswith(owner) else name
        out.append(" ".join(p for p in (short if name else "", lay.get("composite", "")) if p))
    return out


def read_library(lib_or_path, verify: bool = True) -> Library:
    """The NPU regions of `lib_or_path`: a library file (checked and loaded as `tvm_npu.load_module` does;
    `verify=False` skips its integrity trailer), a loaded module, an Executable or VirtualMachine, or one
    stream blob (bytes; its region is named "stream")."""
    from .. import runtime

    if isinstance(lib_or_path, (bytes, bytearray, memoryview)):
        return Library([("stream", bytes(lib_or_path))])
    path = None
    if isinstance(lib_or_path, (str, os.PathLike)):
        path = Path(lib_or_path)
        lib_or_path = runtime.load_module(path, verify=verify)
    inner = getattr(lib_or_path, "module", None) or getattr(lib_or_path, "mod", None) or lib_or_path
    if not hasattr(inner, "kind"):  # as runtime.npu_modules looks for the module
        raise NPUError(
            "ERR_INVALID_CONFIG",
            f"cannot read NPU regions from {type(lib_or_path).__name__} {lib_or_path!r:.60}: pass a library path, "
            "a loaded library, tvm_npu.build's executable, a VirtualMachine, or one stream's bytes",
        )
    regions = [(str(m["get_symbol"]()), bytes(m["get_stream"]())) for m in runtime.npu_modules(lib_or_path)]
    return Library(regions, _source_map(lib_or_path), path)


def _fields(rec: layout.Record, values: dict, regions: listing.Regions) -> str:
    """A record's fields as name=value, every field of the spec in order."""
    out = []
    for f in rec.fields:
        v = values[f["name"]]
        if "count" in f:
            items = list(v)
            while len(items) > 1 and items[-1] == 0:  # trailing zeros: the packer pads them back
                items.pop()
            text = "x".join(str(i) for i in items)
        elif f.get("type") == "f32":
            text = listing.format_f32(v)
        elif f.get("type") == "i32":
            text = str(v)
        elif "enum" in f:
            text = layout.names(f["enum"]).get(v, str(v))
        else:
            text = listing.format_value(None, f["name"], v, regions)
        out.append(f"{f['name']}={text}")
    return " ".join(out)


def _command(words: list, regions: listing.Regions) -> tuple:
    """(the command as listing text, a comment on its size, the decoded Command or None); a command the
    spec cannot name, or whose words its operands do not cover, as `.raw` words so that it still reads
    back the same."""
    code = words[0] & 0xFF
    raw = f".raw {' '.join(f'{w:#x}' for w in words)}"
    if code not in layout.OPNAMES:
        return raw, f"unknown opcode {code:#04x}", None
    op, args, waits = layout.unpack_command(struct.pack(f"<{layout.COMMAND_WORDS}I", *words))
    if layout.command_words(op, args, waits) != list(words):
        return raw, f"{op} with bits outside its fields", None
    text = " ".join([op] + [f"{k}={listing.format_value(op, k, v, regions, args)}" for k, v in args.items()])
    if waits:
        text += " wait=" + ",".join(f"{e}:{k}" for e, k in waits.items())
    size = f"{args['rows'] * args['row_bytes']} B" if op in ("DMA_LOAD", "DMA_STORE") else ""
    return text, size, Command(op, args, waits)


def _after(issued: dict, cmd: Command | None) -> str:
    """The earlier commands `cmd`'s waits hold it for: a wait k on an engine lets k of its commands be
    outstanding, so the one issued k + 1 commands back there has ended (docs/npu.md section 5)."""
    if cmd is None:
        return ""
    done = sorted({issued[e][-(k + 1)] for e, k in cmd.waits.items() if len(issued.get(e, ())) > k})
    return "after " + ", ".join(f"#{i}" for i in done) if done else ""


def _preset(config: dict) -> str:
    for name, preset in PRESETS.items():
        if preset.block() == [config[f["name"]] for f in layout.CONFIG.fields]:
            return name
    return "not a preset"


def format_region(
    region: Region, sources: list | None = None, inline_weights: bool = False, blob: bytes | None = None
) -> str:
    """One region's listing (see the module docstring); `blob`, the stream it was read from, adds a note
    when asm would not write those very bytes back (a stream laid out unlike the compiler's)."""
    regions, h = region.ddr_regions(), region.header
    lines = [f"region {region.symbol}"]
    settable = " ".join(f"{k}={h[k]}" for k in Region.SETTABLE if not k.startswith("version"))
    lines.append(f".header version={h['version_major']}.{h['version_minor']} {settable}")
    lines.append(
        f"; DDR: weights [0, {len(region.weights):#x}), act [{len(region.weights):#x}, {h['ddr_bytes']:#x}), "
        f"state [{h['ddr_bytes']:#x}, {h['ddr_bytes'] + h['state_bytes']:#x}); {len(region.tensors)} tensors, "
        f"{len(region.commands)} commands"
    )
    lines.append(f".config {_fields(layout.CONFIG, region.config, regions)}  ; {_preset(region.config)}")
    for i, t in enumerate(region.tensors):
        q = "" if region.qparams is None else " " + _fields(layout.QPARAMS, region.qparams[i], regions)
        lines.append(f".tensor {_fields(layout.TENSOR, t, regions)}{q}  ; tensor {i}")
    digest = hashlib.sha256(region.weights).hexdigest()
    lines.append(f".weights bytes={len(region.weights)} sha256={digest}")
    if inline_weights:
        for at in range(0, len(region.weights), _DATA_BYTES):
            lines.append(f".data {region.weights[at : at + _DATA_BYTES].hex()}")
    width = len(str(len(region.commands)))
    issued: dict = {}  # engine -> the indices of the commands issued on it so far
    for i, words in enumerate(region.commands):
        text, size, cmd = _command(words, regions)
        source = (sources or [])[i] if i < len(sources or []) else ""
        note = "; ".join(p for p in (source, _after(issued, cmd), size) if p)
        lines.append(f"{i:>{width}}: {text}" + (f"  ; {note}" if note else ""))
        if cmd is not None and cmd.engine is not None and cmd.engine in layout.ENGINES:
            issued.setdefault(cmd.engine, []).append(i)
    if blob is not None and region.to_bytes() != blob:
        lines.append("; note: this stream is not laid out as the compiler lays out streams; asm writes it so")
    lines.append("end")
    return "\n".join(lines)


def disasm(lib_or_path, inline_weights: bool = False, verify: bool = True) -> str:
    """The listing of every NPU region of a compiled library (see `read_library` for what it takes).

    Parameters
    ----------
    lib_or_path : str, os.PathLike, module, Executable, VirtualMachine or bytes
        The library file (`tvm_npu.export_library`'s), a loaded one, or one stream blob.
    inline_weights : bool
        Write each region's weight bytes into the listing (`.data` lines, 32 bytes each), so that
        `asm` needs nothing else; by default the listing states only their size and SHA-256 and
        `asm` takes them from the library (`weights_from`).
    verify : bool
        Check the library file's integrity trailer first (as `tvm_npu.load_module`).

    Returns
    -------
    str
        The listing: one `region` block per NPU region, in library order.
    """
    lib = read_library(lib_or_path, verify)
    where = str(lib.path) if lib.path else "a library in memory"
    out = [f"; tvm-npu disasm of {where}: {len(lib.regions)} NPU region(s); `tvm-npu asm` reads it back"]
    if lib.path is not None:  # where asm takes the weights from when the listing does not hold them
        out.append(f"library {lib.path.resolve()}")
    for symbol, blob in lib.regions:
        out.append(format_region(Region.from_bytes(symbol, blob), lib.sources.get(symbol), inline_weights, blob))
    return "\n".join(out) + "\n"
