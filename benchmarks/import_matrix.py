"""The import matrix of issue 31 (item 5): producer x family x weights, each compiled by
`tvm_npu.llm.compile(..., max_context=32, prefill_len=8)` on npu-ref and measured against onnxruntime on
the same file (tests/llm_import/ort_reference.py, quantized weights run as the file means them).

Producers: torch.onnx's TorchScript and dynamo exporters (tvm_npu.models.hf_export; dynamo at its default
opset 18 and at opset 23, where sdpa is ONNX's Attention op), `onnx.helper`
(tests/llm_import/helper_decoders.py; GPT-2 and Llama layouts), onnxruntime-genai folders (fp32, int4;
tests/fixtures/genai), optimum (tests/fixtures/optimum/<family>/model.onnx, when that folder exists), and
onnxruntime's MatMulNBitsQuantizer on the TorchScript export (MatMulNBits symmetric / asymmetric, and QDQ:
blocked int4 DequantizeLinear). A float file is built with weights fp16, int8 and int4 (the compiler's
own round-to-nearest, group 32 as the quantizer's blocks); a quantized file keeps its codes (built with
weights="int4").

Per cell: greedy tokens equal to onnxruntime's along its path (prefill, then a decode per token), the max
logits error / max(1, max|ref|), where the KV cache lives (lm.meta["kv_cache"] and the placement), the
weight formats (lm.meta["weight_formats"], counted), decode DDR bytes and cycles a token, the decode
against its DDR roofline as benchmarks/llm_decode.py defines it (moved: the DDR bytes the step moved /
ddr_bytes_per_cycle; ideal: the weights + the KV rows read from DDR, none for an SRAM cache), and for
int4 the DDR bytes against the same model's int8 build. A refusal is a cell with its coded error.

The tiny models' decode moves ~5 KB of activations a step next to ~30-60 KB of weights, so their
roofline and int4/int8 columns are activation-bound; a larger Llama (4 layers, d 256, vocab 2048,
TorchScript) is measured for those columns too.

    python benchmarks/import_matrix.py [--families llama,gpt2] [--producers torchscript,genai-int4]
        [--quick] [--no-doc]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import logging
import os
import platform
import re
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import tvm_npu  # noqa: E402
from llm_import import helper_decoders  # noqa: E402
from llm_import.ort_reference import OrtDecoder, quantize_nbits  # noqa: E402
from tvm_npu import NPUError  # noqa: E402

FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "phi3", "gemma", "gemma2")
PRODUCERS = ("torchscript", "ort-sym", "ort-asym", "ort-qdq", "genai-fp32", "genai-int4", "onnx.helper",
             "optimum", "large", "dynamo", "dynamo-23", "window")  # fmt: skip
GENAI = {"llama": "llama", "qwen2": "qwen2", "mistral": "mistral", "phi3": "phi3"}
HELPER_SEEDS = {"gpt2": 1, "llama": 0}  # as tests/llm_import/test_import_forms.py
TORCH_SEEDS = {"gemma": 1, "gemma2": 0}
# The "window" producer: TorchScript exports of transformers' sliding-window families with a window of 8 rows
# < max_context 32 (as tests/llm_import/test_sliding_window.py): Qwen2's from layer 1 on, Gemma2's local layer 0.
WINDOWS = {
    "mistral": {"sliding_window": 8},
    "qwen2": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
    "gemma2": {"sliding_window": 8},
}
NBITS = {"ort-sym": (True, False), "ort-asym": (False, False), "ort-qdq": (True, True)}
LARGE = dict(layers=4, d_model=256, vocab=2048)
PROMPT = [3, 17, 200, 45, 9]
T, S = 32, 8
BEGIN, END = "<!-- import-matrix:begin -->", "<!-- import-matrix:end -->"
DOC = os.path.join(ROOT, "docs", "llm_import.md")


class Files:
    """The input files, made once: exports in a temporary folder, fixtures from tests/fixtures."""

    def __init__(self, tmp: str, optimum: str):
        self.tmp, self.optimum, self.made = tmp, optimum, {}

    def export(self, family: str, exporter: str, opset=None, **sizes) -> str:
        key = ("export", family, exporter, opset, tuple(sorted(sizes.items())))
        if key not in self.made:
            from tvm_npu.models import hf_export

            attn = "eager" if family == "gemma2" else "sdpa"  # Gemma2 has no sdpa form in transformers 5.24
            path = os.path.join(self.tmp, f"{exporter}_{family}_{len(self.made)}.onnx")
            seed = TORCH_SEEDS.get(family, 0)
            self.made[key] = hf_export.export(family, path, seed, attn, exporter, opset, **sizes)
        return self.made[key]

    def window(self, family: str) -> str:
        """The TorchScript export of `family` with WINDOWS' sliding window (DynamicCache(config=...))."""
        if ("window", family) not in self.made:
            from tvm_npu.models import hf_export

            attn = "eager" if family == "gemma2" else "sdpa"
            model = hf_export.build_model(family, TORCH_SEEDS.get(family, 0), attn, config=WINDOWS[family])
            path = os.path.join(self.tmp, f"window_{family}.onnx")
            self.made["window", family] = hf_export.export_model(model, path, "torchscript")
        return self.made["window", family]

    def nbits(self, family: str, producer: str, **sizes) -> str:
        key = ("nbits", family, producer, tuple(sorted(sizes.items())))
        if key not in self.made:
            out = os.path.join(self.tmp, f"{producer}_{family}_{len(self.made)}.onnx")
            self.made[key] = quantize_nbits(self.export(family, "torchscript", **sizes), out, *NBITS[producer])
        return self.made[key]

    def path(self, producer: str, family: str) -> str | None:
        """The file (or folder) `producer` makes of `family`; None where it makes none."""
        if producer in ("torchscript", "dynamo"):
            return self.export(family, producer)
        if producer == "dynamo-23":  # opset 23: sdpa as ONNX's Attention op, RoPE as RotaryEmbedding
            return self.export(family, "dynamo", opset=23)
        if producer == "window":
            return self.window(family) if family in WINDOWS else None
        if producer in NBITS:
            return self.nbits(family, producer)
        if producer.startswith("genai-"):
            folder = os.path.join(ROOT, "tests", "fixtures", "genai", f"{GENAI.get(family)}-{producer[6:]}")
            return folder if family in GENAI and os.path.isdir(folder) else None
        if producer == "onnx.helper":
            if family not in HELPER_SEEDS:
                return None
            path = os.path.join(self.tmp, f"helper_{family}.onnx")
            return self.made.setdefault(("helper", family), helper_decoders.save(family, path, HELPER_SEEDS[family]))
        if producer == "optimum":
            path = os.path.join(self.optimum, family, "model.onnx")
            return path if os.path.isfile(path) else None
        raise ValueError(producer)


def _formats(lm) -> str:
    """lm.meta["weight_formats"] counted: "15 int4 g32 sym, from MatMulNBits"."""
    counted = collections.Counter(re.sub(r"\s*\(.*\)$", "", f) for f in lm.meta["weight_formats"].values())
    return "; ".join(f"{n} {f}" for f, n in counted.most_common())


def measure(path: str, weights: str, tokens: int, faithful: bool = False) -> dict:
    """One cell: compile `path` with `weights`, walk onnxruntime's greedy path for `tokens` tokens.
    `faithful`: a build held to onnxruntime's numbers (fp16, or a file's own codes), whose misses are
    counted as near ties where they are (not for int8 / int4 the compiler quantized: another model)."""
    t0 = time.perf_counter()
    try:
        lm = tvm_npu.llm.compile(path, max_context=T, prefill_len=S, weights=weights, group_size=32)
    except NPUError as err:
        return {"refused": f"{err.code}: {str(err).splitlines()[0][:160]}"}
    except Exception as err:  # noqa: BLE001 - a bug is a cell too, not the end of the run
        return {"refused": f"not coded, {type(err).__name__}: {str(err).splitlines()[0][:160]}"}
    step = lm.meta["step"]
    ref = OrtDecoder(path, step["layers"], step["kv_heads"], step["head_dim"])
    prompt = [t % step["vocab"] for t in PROMPT]
    logits, want = lm.prefill(np.array(prompt, np.int64)), ref(prompt)
    same, ties, err, positions = 0, 0, 0.0, []
    for i in range(tokens):
        err = max(err, float(np.abs(logits - want).max()) / max(1.0, float(np.abs(want).max())))
        same += int(logits.argmax() == want.argmax())
        ties += int(faithful and _near_tie(logits, want))
        token = int(want.argmax())
        if i + 1 < tokens:
            positions.append(len(prompt) + i)
            logits, want = lm.decode(token), ref([token])
    decode = lm.profile()["decode"]
    n = decode["tokens"]
    bpc = lm.meta["config"]["ddr_bytes_per_cycle"]
    regions = lm.reports["decode"].regions.values()
    weight_bytes = sum(layer["weight_bytes"] for r in regions for layer in r.get("layers", []))
    el = 1 if lm.meta.get("kv_dtype") == "int8" else 2
    rows = sum(p + 1 for p in positions) / max(1, len(positions))  # the rows each decode reads, averaged
    kv_read = 2 * step["layers"] * step["kv_heads"] * rows * step["head_dim"] * el
    kv_ddr = kv_read if decode["kv_placement"] == "ddr" else 0  # an SRAM cache's rows never cross DDR
    ddr, cycles = decode["ddr_bytes"] / n, decode["cycles"] / n
    return {
        "tokens": f"{same}/{tokens}" + (f" ({ties} near tie{'s' * (ties > 1)})" if ties else ""),
        "err": err,
        "kv": f"{lm.meta['kv_cache']}, {decode['kv_placement']}",
        "formats": _formats(lm),
        "ddr": ddr,
        "cycles": cycles,
        "moved": ddr / bpc / cycles,
        "ideal": (weight_bytes + kv_ddr) / bpc / cycles,
        "compile_s": time.perf_counter() - t0,
    }


def _near_tie(logits: np.ndarray, want: np.ndarray) -> bool:
    """A greedy token that differs where onnxruntime's own two candidates lie within the step's error:
    its logit of the token picked here is within 2 x max|logits - want| of its best, so any faithful
    rounding could pick either (the fp16 build's misses are of this kind)."""
    got, best = int(logits.argmax()), int(want.argmax())
    return got != best and want[best] - want[got] <= 2 * float(np.abs(logits - want).max())


def _cells(files: Files, producer: str, family: str) -> list[tuple[str, str, str | None]]:
    """(weights label, weights argument, the int8 cell's key this one's bytes are compared with)."""
    if producer in NBITS or producer == "genai-int4":
        base = ("torchscript" if producer in NBITS else "genai-fp32", family, "int8")
        return [("int4 (its codes)", "fp16", base)]  # fp16: a layer the file left float stays float
    return [("fp16", "fp16", None), ("int8", "int8", None), ("int4 (RTN g32)", "int4", (producer, family, "int8"))]


def _base(files: Files, key: tuple, tokens: int, results: dict) -> dict:
    """The int8 cell `key` (producer, family, "int8") an int4 cell is compared with, measured if this run
    did not (a subset run)."""
    if key not in results:
        results[key] = measure(files.path(key[0], key[1]), "int8", tokens)
    return results[key]


def run(families, producers, tokens: int, optimum: str, doc: bool, command: str, subset: bool = False) -> str:
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        files = Files(tmp, optimum)
        for producer in producers:
            if producer == "large":
                rows += _large(files, tokens, results)
            else:
                for family in families:
                    try:
                        path = files.path(producer, family)
                    except Exception as err:  # noqa: BLE001 - the producer failed: a cell saying so
                        why = f"export failed, {type(err).__name__}: {str(err).splitlines()[0][:120]}"
                        rows.append(_row(producer, family, "", {"refused": why}, None))
                        continue
                    if path is None:
                        continue
                    for label, weights, base in _cells(files, producer, family):
                        faithful = label in ("fp16", "int4 (its codes)")
                        got = results[producer, family, label] = measure(path, weights, tokens, faithful)
                        results.setdefault((producer, family, weights), got)
                        ref = _base(files, base, tokens, results) if base else None
                        rows.append(_row(producer, family, label, got, ref))
                        print(rows[-1], flush=True)
            if doc:
                write_doc(rows, command, subset)
    return _table(rows)


def _large(files: Files, tokens: int, results: dict) -> list[str]:
    rows = []
    name = f"llama {LARGE['layers']}L d{LARGE['d_model']} V{LARGE['vocab']}"
    path = files.export("llama", "torchscript", **LARGE)
    cells = [
        ("fp16", "torchscript", "fp16"),
        ("int8", "torchscript", "int8"),
        ("int4 (RTN g32)", "torchscript", "int4"),
    ]
    cells += [("int4 (its codes)", producer, "fp16") for producer in NBITS]
    for label, producer, weights in cells:
        src = path if producer == "torchscript" else files.nbits("llama", producer, **LARGE)
        faithful = label in ("fp16", "int4 (its codes)")
        got = results["large", producer, weights] = measure(src, weights, tokens, faithful)
        base = results["large", "torchscript", "int8"] if label.startswith("int4") else None
        rows.append(_row(f"{producer} (large)", name, label, got, base))
        print(rows[-1], flush=True)
    return rows


HEAD = ("| producer | family | weights | greedy tokens | logits err | KV cache | weight formats | "
        "decode DDR B/token | decode cycles/token | % of roofline (moved) | % of roofline (ideal) | "
        "int4 / int8 DDR bytes |\n|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def _row(producer: str, family: str, label: str, got: dict, base: dict | None) -> str:
    if "refused" in got:
        return f"| {producer} | {family} | {label} | refused: `{got['refused']}` | | | | | | | | |"
    ratio = f"{got['ddr'] / base['ddr']:.3f}x" if base and "ddr" in base else ""
    return (
        f"| {producer} | {family} | {label} | {got['tokens']} | {got['err']:.1e} | {got['kv']} | {got['formats']} "
        f"| {got['ddr']:,.0f} | {got['cycles']:,.0f} | {100 * got['moved']:.1f}% | {100 * got['ideal']:.1f}% "
        f"| {ratio} |"
    )


def _table(rows: list[str]) -> str:
    return "\n".join([HEAD, *rows])


def _key(row: str) -> tuple:
    return tuple(c.strip() for c in row.split("|")[1:4])


def _merged(old: list[str], new: list[str]) -> list[str]:
    """`old` rows with those of `new` replacing the ones of the same producer, family and weights; a new
    row goes after the last one of its producer, else at the end."""
    rows, at = list(old), {_key(r): i for i, r in enumerate(old)}
    for row in new:
        if _key(row) in at:
            rows[at[_key(row)]] = row
            continue
        same = [i for i, r in enumerate(rows) if _key(r)[0] == _key(row)[0]]
        rows.insert(same[-1] + 1 if same else len(rows), row)
        at = {_key(r): i for i, r in enumerate(rows)}
    return rows


def write_doc(rows: list[str], command: str, subset: bool = False) -> None:
    """The table between the markers of docs/llm_import.md (the section appended when they are missing).
    A `subset` run replaces its own rows in the table there and adds a line naming its command."""
    with open(DOC) as f:
        text = f.read()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.node()}, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    said = f"`{command}` on {when} ({machine})"
    lines = [f"Generated by {said}; do not edit by hand, run it again."]
    if subset and BEGIN in text and END in text:
        old = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip().splitlines()
        lines = [line for line in old if line.startswith(("Generated by", "Rows updated by"))]
        lines.append(f"Rows updated by {said}.")
        rows = _merged([line for line in old if line.startswith("| ") and line not in HEAD], rows)
    body = "\n".join([BEGIN, *lines, "", _table(rows), END])
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + body + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n## The import matrix\n\n" + body + "\n"
    with open(DOC, "w") as f:
        f.write(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated, of " + ", ".join(FAMILIES))
    ap.add_argument("--producers", default=",".join(PRODUCERS), help="comma-separated, of " + ", ".join(PRODUCERS))
    ap.add_argument("--quick", action="store_true", help="4 tokens a cell instead of 16; prints only")
    ap.add_argument("--optimum", default=os.path.join(ROOT, "tests", "fixtures", "optimum"))
    ap.add_argument("--no-doc", action="store_true", help="print the table only")
    args = ap.parse_args(argv)
    families, producers = args.families.split(","), args.producers.split(",")
    for name, given, known in (("family", families, FAMILIES), ("producer", producers, PRODUCERS)):
        if set(given) - set(known):
            ap.error(f"unknown {name} {sorted(set(given) - set(known))}: one of {', '.join(known)}")
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs; the formats are in the table
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)
    command = "python benchmarks/import_matrix.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:]))
    subset = set(families) != set(FAMILIES) or set(producers) != set(PRODUCERS)
    tokens = 4 if args.quick else 16
    table = run(families, producers, tokens, args.optimum, not (args.no_doc or args.quick), command.strip(), subset)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
