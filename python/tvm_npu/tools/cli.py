"""`tvm-npu`: the command line: demo, compile, quantize, run, profile, report, sweep, generate (commands.py).

Every failure is one line on stderr: `tvm-npu: error: CODE: what to change` with exit code 2 for a coded
error (NPUError, a user mistake), 3 for an unexpected one (`--traceback` shows its trace). A closed stdout
(`tvm-npu report m.onnx | head`) ends the command quietly with 141, as SIGPIPE ends a Unix tool.
"""

from __future__ import annotations

import argparse
import logging
import sys

# Only the standard library and the contract's data at import: `tvm-npu --help` never loads TVM or tvm-ffi
# (6 s with torch installed). The commands import what they need when they run.
from ..contract.spec import PRESETS as _PRESET_SPECS

PRESETS = [p["name"] for p in _PRESET_SPECS]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tvm-npu", description="tvm_npu: TVM's NPU backend")
    parser.add_argument("--verbose", "-v", action="store_true", help="log every compiler stage")
    parser.add_argument(
        "--traceback", action="store_true", help="on an unexpected error, print Python's traceback instead of one line"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def config(p):
        p.add_argument("--config", default="npu-ref", choices=sorted(PRESETS), help="NPU configuration")

    demo = sub.add_parser("demo", help="compile MobileNetV2 for the NPU, run it, compare with TVM's CPU")
    config(demo)
    demo.add_argument("--out", default="npu_demo", help="folder for report.json")

    comp = sub.add_parser("compile", help="import an ONNX model, build it for the NPU, export a library")
    comp.add_argument("model", help="the ONNX model file")
    comp.add_argument("-o", "--output", required=True, help="the library to write, e.g. model.so")
    config(comp)
    comp.add_argument(
        "--report", help="path stem of the partition report (default: <output>.report.json / .txt next to the library)"
    )

    quant = sub.add_parser(
        "quantize", help="calibrate on a folder of .npy inputs, quantize to int8, build for the NPU, export a library"
    )
    quant.add_argument("model", help="the float ONNX model file")
    quant.add_argument(
        "--calib",
        required=True,
        help="folder of calibration batches: .npy files (one input array each) or .npz files (the inputs by name)",
    )
    quant.add_argument("-o", "--output", required=True, help="the library to write, e.g. model_int8.so")
    quant.add_argument(
        "--method", default="minmax", choices=["minmax", "percentile", "entropy"], help="activation range calibration"
    )
    quant.add_argument("--sqnr", action="store_true", help="print each quantized tensor's SQNR vs float")
    config(quant)

    run = sub.add_parser("run", help="run an exported library on .npy inputs (reference NPU)")
    run.add_argument("library", help="a library written by `tvm-npu compile`")
    run.add_argument("inputs", nargs="+", help="one .npy file per input of main, in order, or one .npz file")
    run.add_argument("-o", "--output", help="save the output to this .npy file")
    run.add_argument(
        "--no-verify",
        action="store_true",
        help="load a library exported without tvm_npu's integrity trailer (plain ex.export_library) you trust",
    )

    prof = sub.add_parser("profile", help="build, run once, print cycles / MACs / DDR bytes per layer")
    prof.add_argument("model", help="the ONNX model file")
    prof.add_argument(
        "--input",
        action="append",
        help=".npy input (repeat per input, in order) or one .npz of all inputs by name (default: seeded random)",
    )
    config(prof)
    prof.add_argument("--csv", help="write one row per layer to this CSV file")
    prof.add_argument("--json", help="write the whole profile to this JSON file")
    prof.add_argument("--trace", help="write a Chrome / Perfetto trace to this JSON file")
    prof.add_argument("--html", help="write an HTML report (+ PNG figures next to it) to this file")

    graph = sub.add_parser(
        "export-graph", help="write a compiled library as an ONNX graph for Netron (NPU regions as npu nodes)"
    )
    graph.add_argument("library", help="the compiled library (.so from `tvm-npu compile` / tvm_npu.export_library)")
    graph.add_argument("-o", "--output", help="the .onnx file to write (default: LIBRARY with .npu.onnx)")
    graph.add_argument("--no-run", action="store_true", help="leave out the cycles (no timing call on zeros)")
    graph.add_argument("--serve", action="store_true", help="open the graph in Netron (the `netron` package)")
    graph.add_argument("--port", type=int, default=8080, help="Netron's port with --serve (default: %(default)s)")
    graph.add_argument("--no-verify", action="store_true", help="load a library without tvm_npu's integrity trailer")

    rep = sub.add_parser("report", help="print where each op runs and why the rest does not")
    rep.add_argument("model", help="the ONNX model file")
    config(rep)

    sw = sub.add_parser(
        "sweep",
        help="estimate a model on a grid of MAC arrays, SRAM sizes and DDR "
        "bandwidths (cost model, nothing runs); table, plots, Pareto front",
    )
    sw.add_argument("model", help="the ONNX model file")
    sw.add_argument(
        "--mac", default="16x16,32x32,64x64", help="MAC arrays, ROWSxCOLS, comma-separated (default: %(default)s)"
    )
    sw.add_argument(
        "--sram", default="512KiB,1MiB,2MiB,4MiB", help="SRAM sizes: B, KiB, MiB, GiB (default: %(default)s)"
    )
    sw.add_argument("--ddr-bw", default="8,16,32", help="DDR bandwidths in bytes per cycle (default: %(default)s)")
    sw.add_argument(
        "--base", default="npu-ref", choices=sorted(PRESETS), help="configuration whose other fields every point keeps"
    )
    sw.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: all cores)")
    sw.add_argument("--out", default="npu_sweep", help="folder for results.jsonl (resumable), CSV, plots")
    sw.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    sus = sub.add_parser(
        "sustain",
        help="stream frames through the CPU -> NPU pipeline for a while: fps, latency, energy, temperature, "
        "throttling under a power and thermal model (docs/sustained.md)",
    )
    sus.add_argument("model", help="a library (tvm-npu compile) or an ONNX model (built for --config)")
    sus.add_argument("--fps", type=float, default=30.0, help="the source's frame rate; 0: as fast as it runs")
    sus.add_argument("--seconds", type=float, default=120.0, help="length of the run (default: %(default)s)")
    sus.add_argument("--policy", default="throttle", choices=["fixed", "throttle", "target"], help="governor")
    sus.add_argument("--thermal", default="phone", choices=["phone", "laptop", "large"], help="the cooler")
    sus.add_argument("--ambient", type=float, help="ambient temperature in C (default: the cooler's, 25)")
    sus.add_argument("--input", action="append", help=".npy input (repeat per input) or one .npz, to time the CPU part")
    sus.add_argument("--cpu-ms", type=float, help="the CPU part of a frame in ms, instead of measuring it")
    sus.add_argument("--cpu-w", type=float, default=1.0, help="CPU power while its part runs, W (shared cooler)")
    sus.add_argument("--other-w", type=float, default=0.0, help="the rest of the platform's power on the cooler, W")
    sus.add_argument("--back-to-back", action="store_true", help="run CPU and NPU parts one after the other")
    config(sus)
    sus.add_argument("--html", help="write an HTML report with the temperature / clock / fps figure")
    sus.add_argument("--trace", help="write the run as Perfetto counter tracks (JSON)")
    sus.add_argument("--json", help="write the summary and timeline as JSON")
    gen = sub.add_parser(
        "generate", help="compile a decoder's prefill and decode steps, generate tokens, print tokens/s (docs/llm.md)"
    )
    gen.add_argument(
        "model",
        help="a Hugging Face checkpoint folder, an ONNX decoder-with-past export or step model (seq_len 1; with "
        "--prefill-model the decode one), an artifact of LLM.export_library, or gpt2 / llama "
        "(tvm_npu.models.decoder's seeded builders)",
    )
    prompt = gen.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt-ids", help="the prompt's token ids, comma-separated, e.g. 1,2,3")
    prompt.add_argument("--prompt", help="the prompt as text (the tokenizer.json beside the model, or --tokenizer)")
    gen.add_argument("--tokenizer", help="the tokenizer.json for --prompt (default: the one in the model's folder)")
    gen.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate (default: %(default)s)")
    gen.add_argument("--max-context", type=int, help="the static cache's rows (default: the model's; 64 for a builder)")
    gen.add_argument("--prefill-len", type=int, help="the prefill bucket (a builder's; default 32)")
    gen.add_argument("--prefill-model", help="the prefill step model (ONNX) to go with MODEL as the decode step")
    gen.add_argument("--top-k", type=int, help="sample from the k most likely tokens (default: greedy)")
    gen.add_argument("--top-p", type=float, help="sample from the smallest set of tokens reaching probability p")
    gen.add_argument("--seed", type=int, default=0, help="the sampler's (and a builder's weights') seed")
    gen.add_argument("--weights", choices=("fp16", "int8", "int4"), default="fp16", help="dense weights' dtype")
    gen.add_argument("--group-size", type=int, default=128, help="int4 weights' group along K (32, 64 or 128)")
    gen.add_argument("--kv-dtype", choices=("float16", "int8"), default="float16", help="the KV cache's dtype")
    gen.add_argument(
        "--kv-placement",
        choices=("auto", "sram", "ddr"),
        default="auto",
        help="where the KV cache lives: SRAM when it fits (auto), or forced (default: %(default)s)",
    )
    config(gen)

    ev = sub.add_parser(
        "eval", help="perplexity of a compiled LLM on a text, on the NPU, against the float model (docs/llm.md)"
    )
    ev.add_argument("model", help="a Hugging Face checkpoint folder or an ONNX decoder-with-past export")
    ev.add_argument("--text", required=True, help="the UTF-8 text file to score")
    ev.add_argument("--tokenizer", help="the tokenizer.json (default: the one in the model's folder)")
    ev.add_argument("--max-context", type=int, default=128, help="the compiled context (default: %(default)s)")
    ev.add_argument("--prefill-len", type=int, default=32, help="the prefill bucket (default: %(default)s)")
    ev.add_argument("--stride", type=int, help="window step for a text longer than max-context (default: half)")
    ev.add_argument("--step", choices=("prefill", "decode"), default="prefill", help="which compiled step scores")
    ev.add_argument("--max-tokens", type=int, help="score only the first N tokens of the text")
    ev.add_argument("--weights", choices=("fp16", "int8", "int4"), default="fp16", help="dense weights' dtype")
    ev.add_argument("--group-size", type=int, default=128, help="int4 weights' group along K (32, 64 or 128)")
    ev.add_argument("--kv-dtype", choices=("float16", "int8"), default="float16", help="the KV cache's dtype")
    ev.add_argument("--no-reference", action="store_true", help="skip the float model (perplexity only)")
    config(ev)

    from .diffuse import add_parser as diffuse_parser  # the standard library only at import

    diffuse_parser(sub, config)

    # disasm / asm (tools/disasm.py, tools/asm.py; docs/disasm.md)
    dis = sub.add_parser("disasm", help="print every command of every NPU region of a compiled library")
    dis.add_argument("library", help="a library written by `tvm-npu compile` / tvm_npu.export_library")
    dis.add_argument("-o", "--output", help="write the listing to this file (default: print it)")
    dis.add_argument("--inline-weights", action="store_true", help="put the weight bytes into the listing (hex)")
    dis.add_argument("--no-verify", action="store_true", help="skip the library's integrity trailer check")
    asm = sub.add_parser("asm", help="assemble a listing of `tvm-npu disasm` (edited or not) back into bytes")
    asm.add_argument("listing", help="the listing file")
    asm.add_argument("-o", "--output", required=True, help="the stream file to write (with --into: the library)")
    asm.add_argument("--region", help="the region to write when the listing has several (without --into)")
    asm.add_argument("--weights-from", help="the library whose regions' weights a listing without .data lines takes")
    asm.add_argument("--into", help="write a copy of this library with the listing's regions in place of its own")
    asm.add_argument("--no-check", action="store_true", help="skip the compiler's and the runtime's stream checks")
    return parser


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _closed_pipe() -> int:
    """The reader of stdout went away (`tvm-npu report m.onnx | head`): stop quietly, as Unix tools do
    (they die of SIGPIPE: exit status 128 + 13). stdout goes to /dev/null first, so that Python's own
    flush at exit does not fail on the closed pipe again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    from ..contract.errors import NPUError
    from .commands import COMMANDS, CLIError

    try:
        if args.command == "demo":
            from .demo import run_demo

            return 0 if run_demo(args.config, args.out)["ok"] else 1
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        return _closed_pipe()
    except (NPUError, CLIError) as err:
        print(f"tvm-npu: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001  (a bug of ours or TVM's: still one line, the trace on request)
        if args.traceback:
            raise
        print(
            f"tvm-npu: error: {type(err).__name__}: {_one_line(err)} (an unexpected error: run with "
            f"--traceback for the trace, and please report it)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
