"""int4 weights (issue 21): GPTQ against round-to-nearest on the tutorial LLMs' logits.

The tutorial's Hugging Face GPT-2 and Llama (tutorials/llm_decode.py: 4 layers, d 128, 4 heads, vocab
512, seeded random weights), exported as torch exports them and specialized to a 16-token step
(`frontend.to_step_model`). Each is quantized to int4 weights (`tvm_npu.quantize(weight_bits=4)`) by
round-to-nearest and by GPTQ from calibration prompts (seeded random tokens), and the logits of held-out
prompts are compared with the float model's (TVM's llvm build of both): SQNR in dB, both methods side by
side, per group size. Needs the `llm` extra (torch, transformers) to export the models.

    python benchmarks/int4_weights.py [--calibration 48] [--groups 32 128]
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.frontend import to_step_model
from tvm_npu.models import hf_export
from tvm_npu.tools.accuracy import sqnr_db

SIZES = dict(layers=4, d_model=128, heads=4, vocab=512)  # the tutorial's (not --quick)
T, S = 64, 16


def _batch(model, seed: int) -> list:
    """One input set of the step model: random token ids, position 0, zero caches."""
    rng = np.random.default_rng(seed)
    out = []
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "input_ids":
            out.append(rng.integers(0, SIZES["vocab"], shape).astype(np.int64))
        elif i.type.tensor_type.elem_type == 7:  # int64: the position
            out.append(np.zeros(shape, np.int64))
        else:
            out.append(np.zeros(shape, np.float32))
    return out


def _logits(mod, batches) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    outs = []
    for b in batches:
        r = vm["main"](*[tvm.runtime.tensor(a) for a in b])
        outs.append((r if hasattr(r, "numpy") else r[0]).numpy())
    return np.concatenate(outs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=int, default=48, help="calibration prompts of 16 tokens")
    ap.add_argument("--groups", type=int, nargs="+", default=[32, 128])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # TVM's importer renames dotted inputs
    print("int4 weights, logits SQNR against the float model (dB), held-out prompts; issue 21: GPTQ >= RTN + 1")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("gpt2", "llama"):
            path = hf_export.export(arch, str(Path(tmp) / f"{arch}.onnx"), seed=0, **SIZES)
            model = to_step_model(path, T, S)
            mod = tvm_npu.from_onnx(model)
            cal = [_batch(model, s) for s in range(args.calibration)]
            held_out = [_batch(model, 1000 + s) for s in range(4)]
            ref = _logits(mod, held_out)
            for group in args.groups:
                got = {}
                for method in ("rtn", "gptq"):
                    qmod, _ = tvm_npu.quantize(
                        mod, cal, weight_bits=4, group_size=group, weight_method=method, progress=False
                    )
                    got[method] = sqnr_db(ref, _logits(qmod, held_out))
                gain = got["gptq"] - got["rtn"]
                print(
                    f"   {arch:6s} group {group:3d}: RTN {got['rtn']:6.2f} dB, GPTQ {got['gptq']:6.2f} dB "
                    f"({gain:+.2f} dB)"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
