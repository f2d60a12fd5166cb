"""The `tvm-npu` subcommands compile, quantize, run, profile, report, sweep, generate, disasm and asm (argument
parsing: cli.py).

Each command takes the parsed argparse namespace and returns the exit code. A user mistake raises
`CLIError` or `NPUError`; cli.main turns either into one line on stderr.
"""

from __future__ import annotations

import errno
import json
import sys
import warnings
from pathlib import Path

import numpy as np

from ..contract.errors import NPUError, SRAMFragmentationWarning
from ..runtime.files import check_distinct, replacing, writable_folder, write_bytes, write_error, write_text
from . import inputs as model_inputs

MAX_JOBS = 64  # sweep's worker processes (dse/sweeper.py refuses more too)


class CLIError(Exception):
    """A user mistake found by the command line (a missing file, an unreadable input, ...)."""


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise CLIError(f"{what} {str(p)!r} does not exist")
    return p


def outputs_apart(outputs: dict, inputs: list) -> None:
    """Before any work: every output given (flag -> path or None) is none of the `inputs` and none of the
    other outputs, and its folder takes new files (runtime/files.py: NPUError ERR_INVALID_CONFIG)."""
    given = [(flag, path) for flag, path in outputs.items() if path is not None]
    for flag, path in given:
        if not str(path).strip():
            raise CLIError(f"{flag} '{path}': give a file path")
    for i, (flag, path) in enumerate(given):
        check_distinct(path, inputs, flag)
        for other, was in given[:i]:
            check_distinct(path, [was], f"{flag} (also {other})")
        if Path(path).is_dir():  # found now, not by the rename after the work
            raise write_error(path, IsADirectoryError(errno.EISDIR, "a folder where the file would go", str(path)))
        writable_folder(Path(path).parent, path)


def _report_paths(output, stem) -> list:
    if not str(output).strip():  # before the report's name is made from it
        raise CLIError(f"--output '{output}': give a file path")
    stem = Path(stem) if stem else Path(output).with_name(Path(output).stem + ".report")
    return [stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".txt")]


def write_report(report, paths) -> list:
    """The partition report as JSON and as its table, at `paths` (two), each written whole or not at all."""
    js, txt = paths
    write_text(js, json.dumps(report.to_dict(), indent=2) + "\n")
    write_text(txt, report.table() + "\n")
    return [Path(js), Path(txt)]


def _import(model: str):
    from ..frontend.onnx import from_onnx

    return from_onnx(str(_existing(model, "model file")))


def _build(mod, config: str):
    from ..build import build
    from ..partition.report import BuildReport

    report = BuildReport()
    return build(mod, target="npu", config=config, report=report), report


def cmd_compile(args) -> int:
    """Import an ONNX model, build it for the NPU, export the library and the partition report."""
    reports = _report_paths(args.output, args.report)
    outputs_apart(
        {"--output": args.output, "--report (.json)": reports[0], "--report (.txt)": reports[1]}, [args.model]
    )
    ex, report = _build(_import(args.model), args.config)
    return _export(ex, report, args.output, reports)


def _export(ex, report, output: str, reports: list) -> int:
    """Write the library and its partition report (<output stem>.report.json / .txt by default)."""
    from ..runtime import export_library

    out = export_library(ex, output)
    js, txt = write_report(report, reports)
    print(f"{out}: {report.summary()}")
    print(f"partition report: {js}, {txt}")
    return 0


def _outputs(result) -> list:
    import tvm

    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    if isinstance(result, (list, tuple)) or hasattr(result, "__len__"):
        return [o for r in result for o in _outputs(r)]
    return [np.asarray(result)]


def cmd_run(args) -> int:
    """Load an exported library and run `main` on .npy inputs through the checked boundary
    (runtime.Model): a wrong number, shape or dtype of inputs is a coded NPUError naming the input."""
    from .. import runtime

    lib_path = _existing(args.library, "library")
    outputs_apart({"--output": args.output}, [lib_path, *args.inputs])
    try:
        lib = runtime.load_module(lib_path, verify=not args.no_verify)
    except NPUError:
        raise
    except Exception as err:  # noqa: BLE001  (not a shared library, wrong ABI, ...)
        raise CLIError(f"cannot load {str(lib_path)!r}: {err}") from None
    model = runtime.Model(lib)
    params = model.signature("main")  # a .npz is matched to main's inputs by name
    names = [p.name for p in params] if params is not None else None
    inputs = model_inputs.as_arguments(args.inputs[0] if len(args.inputs) == 1 else args.inputs, names=names)
    try:
        result = model.call("main", *inputs)
    except NPUError:
        raise
    except (TypeError, ValueError, RuntimeError) as err:  # a library without a signature: TVM's own checks
        raise CLIError(f"cannot run main on {len(inputs)} input(s): {err}") from None
    outs = _outputs(result)
    for i, o in enumerate(outs):
        head = ", ".join(f"{v:.6g}" for v in o.reshape(-1)[:8].tolist())
        print(f"output {i}: shape {tuple(o.shape)} {o.dtype}: [{head}{', ...' if o.size > 8 else ''}]")
    if args.output:
        out = Path(args.output)
        paths = (
            [out]
            if len(outs) == 1
            else [out.with_name(f"{out.stem}_{i}{out.suffix or '.npy'}") for i in range(len(outs))]
        )
        for p, o in zip(paths, outs):
            p = p if p.name.endswith(".npy") else p.with_name(p.name + ".npy")  # np.save's naming
            check_distinct(p, [lib_path, *args.inputs])
            with replacing(p) as tmp:
                np.save(tmp, o)
            print(f"saved {p}")
    return 0


def layer_table(prof: dict) -> str:
    """Per-layer table of a profile (name, kind, dtype, cycles, MACs, utilization, DDR bytes, SRAM peak and
    time-weighted utilization, tools/sram_profile.py) + totals."""
    from .sram_profile import sram_line

    def pct(sram, key):
        return "-" if sram is None else f"{100 * sram[key]:.1f}%"

    head = ("layer", "pattern", "kind", "dtype", "cycles", "MACs", "util", "DDR bytes", "SRAM peak", "SRAM avg")
    rows = [
        (
            lay["name"].replace(lay["symbol"], lay["region"]),
            lay["composite"],
            lay["kind"],
            lay["dtype"],
            str(lay["cycles"]["total"]),
            str(lay["macs"]),
            f"{100 * lay['mac_utilization']:.1f}%",
            str(lay["ddr_read_bytes"] + lay["ddr_write_bytes"]),
            pct(lay.get("sram"), "peak_utilization"),
            pct(lay.get("sram"), "time_weighted_utilization"),
        )
        for lay in prof["layers"]
    ]
    rows.append(
        (
            "total",
            f"{len(prof['layers'])} layers",
            "",
            "",
            str(prof["total_cycles"]),
            str(sum(lay["macs"] for lay in prof["layers"])),
            f"{100 * prof['mac_utilization']:.1f}%",
            str(prof["ddr_bytes"]),
            pct(prof.get("sram"), "peak_utilization"),
            pct(prof.get("sram"), "time_weighted_utilization"),
        )
    )
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r):
        return "  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows[:-1]] + ["  ".join("-" * w for w in widths), fmt(rows[-1])]
    conf = prof["config"]
    lines.append(
        f"compulsory DDR bytes {prof['compulsory_ddr_bytes']}, SRAM peak {prof['sram_peak_bytes']} B, "
        f"{prof['total_cycles'] / conf['clock_mhz']:.1f} us at {conf['clock_mhz']} MHz"
    )
    if prof["layers"]:
        lines.append(sram_line(prof.get("sram")))
    if prof["saturated_inputs"]:
        lines.append(
            f"{prof['saturated_inputs']} float32 input value(s) beyond the fp16 range ran saturated to +-65504 "
            "(docs/npu.md section 2)"
        )
    if prof["clamped_inputs"]:
        lines.append(
            f"{prof['clamped_inputs']} float32 input value(s) beyond an int8 / int16 input's range were clamped "
            "by its quantized staging (docs/npu.md section 2)"
        )
    if not prof["layers"]:
        lines.append("nothing ran on the NPU: every op stayed on the CPU (`tvm-npu report` says why)")
    return "\n".join(lines)


def cmd_profile(args) -> int:
    """Build, run once on the reference NPU and print / write the per-layer profile."""
    from ..partition.report import BuildReport
    from .html_report import write_html
    from .profiler import profile, saturation_warnings, to_csv
    from .sram_profile import fragmentation_warnings
    from .trace import write_chrome_trace

    outputs_apart(
        {"--csv": args.csv, "--json": args.json, "--trace": args.trace, "--html": args.html},
        [args.model, *(args.input or [])],
    )
    mod = _import(args.model)
    inputs = None
    if args.input:
        inputs = model_inputs.as_arguments(
            args.input[0] if len(args.input) == 1 else args.input, model_inputs.signature(mod)
        )
    report = BuildReport()
    with warnings.catch_warnings():  # printed below, in the CLI's own words, after the table
        warnings.simplefilter("ignore", SRAMFragmentationWarning)
        prof = profile(mod, inputs=inputs, config=args.config, report=report)
    print(layer_table(prof))
    for line in saturation_warnings(prof) + fragmentation_warnings(prof):  # docs/npu.md section 5, docs/usage.md
        print(f"tvm-npu: {line}", file=sys.stderr)
    for path, write in (
        (args.csv, lambda p: to_csv(prof, p)),
        (args.json, lambda p: write_text(p, json.dumps(prof, indent=2) + "\n")),
        (args.trace, lambda p: write_chrome_trace(prof, p)),
        (args.html, lambda p: write_html(prof, report, p)),
    ):
        if path:
            write(path)
            print(f"wrote {path}")
    return 0


def cmd_export_graph(args) -> int:
    """Write the library as an ONNX graph for Netron; with --serve, open it there until interrupted."""
    from ..runtime import load_module
    from .export_graph import export_graph, serve

    lib_path = Path(args.library)
    out = Path(args.output) if args.output else lib_path.with_suffix(".npu.onnx")
    outputs_apart({"--output": out}, [lib_path])
    if args.serve and not 0 <= args.port <= 65535:
        raise NPUError("ERR_INVALID_CONFIG", f"--port {args.port}: give a TCP port, 0 to 65535")
    lib = load_module(lib_path, verify=not args.no_verify)
    export_graph(lib, out, run=not args.no_run)
    print(f"wrote {out}")
    if args.serve:
        try:
            address = serve(out, port=args.port)
        except ImportError as err:
            raise CLIError(str(err)) from err
        print(f"netron serves {out} at http://{address[0]}:{address[1]} (Ctrl-C stops it)")
        import time

        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


def cmd_report(args) -> int:
    """Partition the model and print where each op runs and why the rest does not (nothing runs)."""
    _, report = _build(_import(args.model), args.config)
    print(report.table())
    return 0


def cmd_quantize(args) -> int:
    """Calibrate a float ONNX model on a folder of .npy inputs, quantize it to int8, build it for the
    NPU and export the library; print what was quantized and, per tensor, the SQNR against float."""
    from ..quantization.ptq import quantize
    from .accuracy import format_sqnr_table, layer_sqnr

    folder = Path(args.calib)
    files = sorted([*folder.glob("*.npy"), *folder.glob("*.npz")]) if folder.is_dir() else []
    reports = _report_paths(args.output, None)
    outputs_apart(
        {"--output": args.output, "report (.json)": reports[0], "report (.txt)": reports[1]}, [args.model, *files]
    )
    mod = _import(args.model)
    if not files:
        raise CLIError(
            f"calibration folder {str(folder)!r} has no .npy / .npz files (one batch each: an "
            f"array, or the model's inputs by name)"
        )
    params = model_inputs.signature(mod)
    batches = [model_inputs.as_arguments(f, params) for f in files]
    batches = [b[0] if len(b) == 1 else b for b in batches]  # quantize's calibration batch forms
    qmod, qreport = quantize(mod, batches, method=args.method)
    print(qreport.summary())
    if args.sqnr:
        print(format_sqnr_table(layer_sqnr(mod, qmod, qreport, batches[0])))
    ex, report = _build(qmod, args.config)
    return _export(ex, report, args.output, reports)


def cmd_sweep(args) -> int:
    """Estimate the model on every configuration of the grid; print the table and where files went."""
    from ..dse.sweeper import sweep

    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:  # each worker imports TVM: ~0.3 GB
        raise NPUError("ERR_INVALID_CONFIG", f"--jobs {args.jobs}: give 1 to {MAX_JOBS} worker processes")
    grid = {"mac": args.mac, "sram": args.sram, "ddr_bw": args.ddr_bw}
    model = str(_existing(args.model, "model file"))
    check_distinct(args.out, [model], "--out")
    writable_folder(args.out)
    res = sweep(model, **grid, out=args.out, base=args.base, jobs=args.jobs, plots=not args.no_plots)
    print(res.table())
    feasible = sum(bool(r.get("feasible")) for r in res.rows)
    print(
        f"{len(res.rows)} configurations ({feasible} feasible, {len(res.pareto)} on the Pareto front, "
        f"* above), {res.estimated} estimated now, in {res.seconds:.1f} s wall"
    )
    held = [r["name"] for r in res.rows if r.get("holds_fps") and not r.get("throttled_s")]
    front = [r["name"] for r in res.rows if r.get("pareto_sustained")]
    print(
        f"sustained (30 fps for 60 s, throttle governor, phone cooler; docs/sustained.md): "
        f"{len(held)} hold the rate without throttling; front of frame time and energy: {', '.join(front) or '-'}"
    )
    print("wrote " + ", ".join(str(f) for f in res.files))
    return 0


def _llm(args):
    """The LLM `tvm-npu generate` runs: a model folder (Hugging Face or onnxruntime-genai), an artifact of
    LLM.export_library, an ONNX step model (with --prefill-model, the pair), or a seeded builder of
    tvm_npu.models.decoder by name."""
    import functools
    import tarfile

    from .. import llm
    from ..models import decoder

    builders = {"gpt2": decoder.gpt2_step, "llama": decoder.llama_step}
    path = Path(args.model)
    if path.is_dir():  # a model folder (frontend/hf_folder.py, frontend/genai.py)
        max_context = 128 if args.max_context is None else args.max_context
        return llm.compile(str(path), max_context=max_context, **_llm_options(args))
    if not path.is_file() and args.model in builders:
        build = functools.partial(builders[args.model], seed=args.seed)
        # 64 only when not given: --max-context 0 is refused by compile (ERR_INVALID_CONFIG), not made 64
        max_context = 64 if args.max_context is None else args.max_context
        return llm.compile(build, max_context=max_context, **_llm_options(args))
    _existing(args.model, "model file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF" or tarfile.is_tarfile(path):  # a library, or the old tar format (ERR_BAD_ARTIFACT)
        options = {"--max-context": args.max_context, "--prefill-len": args.prefill_len}
        given = [flag for flag, v in {**options, "--prefill-model": args.prefill_model}.items() if v is not None]
        defaults = {"--weights": "fp16", "--group-size": 128, "--kv-dtype": "float16", "--kv-placement": "auto"}
        defaults["--config"] = "npu-ref"
        given += [flag for flag, v in defaults.items() if getattr(args, flag[2:].replace("-", "_")) != v]
        if given:  # not silently ignored
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"{', '.join(given)}: {path} is a compiled artifact with its own; compile the step models again "
                "to change it",
            )
        return llm.load(path)
    model = str(path) if args.prefill_model is None else (str(_existing(args.prefill_model, "model file")), str(path))
    return llm.compile(model, max_context=args.max_context, **_llm_options(args))


def _llm_options(args) -> dict:
    """The `tvm_npu.llm.compile` options `tvm-npu generate` passes through (an artifact has its own)."""
    keys = ("config", "prefill_len", "weights", "group_size", "kv_dtype", "kv_placement")
    return {k: getattr(args, k) for k in keys}


def _speed(name: str, p: dict, clock_mhz: int) -> str:
    if not p["tokens"]:
        return f"{name}: no tokens"
    npu = f"{p['tokens_per_s']:.1f} tokens/s" if p["tokens_per_s"] else "nothing on the NPU"
    return (
        f"{name}: {p['tokens']} tokens, {p['cycles']} NPU cycles, {p['ddr_bytes']} DDR bytes, MAC util "
        f"{100 * p['mac_util']:.1f}%: cycle model {npu} at {clock_mhz} MHz (NPU regions only); "
        f"host wall {p['host_tokens_per_s']:.1f} tokens/s (emulator + CPU ops)"
    )


def cmd_generate(args) -> int:
    """Compile (or load) a decoder, prefill the prompt ids, decode --max-new-tokens tokens with a progress
    bar; print the tokens and the tokens/s of the cycle model and of the host."""
    from tqdm import tqdm

    from .. import llm
    from .llm_text import encode, find_tokenizer

    tok = find_tokenizer(args.model, args.tokenizer) if args.prompt is not None or args.tokenizer else None
    if args.prompt is not None:
        if tok is None:
            raise CLIError(f"--prompt: no tokenizer.json beside {args.model}; give --tokenizer or --prompt-ids")
        ids = encode(tok, args.prompt, "--prompt").tolist()
    else:
        try:
            ids = [int(t) for t in args.prompt_ids.split(",")]
        except ValueError:
            raise CLIError(
                f"--prompt-ids {args.prompt_ids!r}: give token ids as integers separated by commas"
            ) from None
    sampler = None
    if args.top_k is not None:
        sampler = llm.top_k(args.top_k, seed=args.seed)
    elif args.top_p is not None:
        sampler = llm.top_p(args.top_p, seed=args.seed)
    lm = _llm(args)
    if tok is None:
        with tqdm(total=args.max_new_tokens, desc="generate", unit="tok") as bar:
            new = lm.generate(
                ids, max_new_tokens=args.max_new_tokens, sampler=sampler, on_token=lambda _: bar.update(1)
            )
    else:  # stream the text as it is written
        prompt = args.prompt if args.prompt is not None else tok.decode(ids)
        shown: list[int] = []

        def show(token: int) -> None:
            # The prompt goes out with the first new token, so that a request generate refuses before
            # it runs (a context too small, a bad sampler) prints its error alone, not after the prompt.
            before = tok.decode(shown) if shown else None
            shown.append(token)
            text = tok.decode(shown)
            print(prompt + text if before is None else text[len(before) :], end="", flush=True)

        try:
            new = lm.generate(ids, max_new_tokens=args.max_new_tokens, sampler=sampler, on_token=show)
        except BaseException:
            if shown:  # end the streamed line before the error
                print()
            raise
        print(prompt if not shown else "")
    print("new tokens: " + ",".join(str(t) for t in new.tolist()))
    prof, clock = lm.profile(), lm.meta["config"]["clock_mhz"]
    print(_speed("prefill", prof["prefill"], clock))
    print(_speed("decode", prof["decode"], clock))
    kv = prof["decode"]
    if kv["tokens"]:
        print(f"KV cache: {kv['kv_bytes']} bytes read by the decode steps, in {kv['kv_placement'].upper()}")
    else:  # kv_bytes counts what the decode steps read: none ran
        print(f"KV cache: in {kv['kv_placement'].upper()} (no decode step ran)")
    return 0


def cmd_sustain(args) -> int:
    from .sustain import cmd_sustain as run

    return run(args)


def cmd_disasm(args) -> int:
    """Print (or write) the listing of every NPU region of a library."""
    from .disasm import disasm

    library = _existing(args.library, "library")
    outputs_apart({"--output": args.output}, [library])
    text = disasm(library, inline_weights=args.inline_weights, verify=not args.no_verify)
    if args.output:
        write_text(args.output, text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0


def cmd_asm(args) -> int:
    """Assemble a listing into a stream file, or (--into) into a copy of a library."""
    from .asm import asm, patch_library

    outputs_apart({"--output": args.output}, [args.listing, args.weights_from, args.into])
    try:
        text = _existing(args.listing, "listing").read_text()
    except UnicodeDecodeError:
        raise CLIError(f"{args.listing!r} is not a text listing: give the output of `tvm-npu disasm`") from None
    weights = args.weights_from or args.into
    streams = asm(text, weights_from=str(_existing(weights, "library")) if weights else None, verify=not args.no_check)
    if args.into:
        out = patch_library(args.into, streams, args.output)
        print(f"wrote {out}: {len(streams)} region(s) of {args.into} replaced")
        return 0
    if args.region is None and len(streams) > 1:
        raise CLIError(f"the listing has {len(streams)} regions: choose one with --region ({', '.join(streams)})")
    symbol = args.region or next(iter(streams))
    if symbol not in streams:
        raise CLIError(f"--region {symbol}: the listing has {', '.join(streams)}")
    write_bytes(args.output, streams[symbol])
    print(f"wrote {args.output}: {len(streams[symbol])} bytes of region {symbol}")
    return 0


def cmd_eval(args) -> int:
    from .llm_text import cmd_eval as run

    return run(args)


def cmd_diffuse(args) -> int:
    from .diffuse import cmd_diffuse as run

    return run(args)


COMMANDS = {
    "generate": cmd_generate,
    "diffuse": cmd_diffuse,
    "eval": cmd_eval,
    "sustain": cmd_sustain,
    "compile": cmd_compile,
    "quantize": cmd_quantize,
    "run": cmd_run,
    "profile": cmd_profile,
    "export-graph": cmd_export_graph,
    "report": cmd_report,
    "sweep": cmd_sweep,
    "disasm": cmd_disasm,
    "asm": cmd_asm,
}
