"""An on-device LLM on the NPU: prefill a prompt, then decode token by token against a static KV cache.

Two Hugging Face `transformers` models built from small configs with seeded random weights (nothing is
downloaded; a real checkpoint's export works the same way): a GPT-2 (LayerNorm, GELU, learned positions,
fused QKV) and a Llama (RMSNorm, SiLU-gated MLP, RoPE, grouped-query attention). Each is exported to ONNX
as the standard decoder-with-past model, compiled for the NPU with `tvm_npu.llm.compile`, and asked for
greedy tokens, which the tutorial checks against onnxruntime's greedy tokens on the same export.

Needs the optional extras: pip install ".[llm,test]"   (torch, transformers; onnxruntime)
Run: python tutorials/llm_decode.py [--quick] [--out DIR]
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

import tvm_npu
from tvm_npu.models import hf_export

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true", help="smaller models (the test's run)")
parser.add_argument("--out", default="llm_out", help="folder for the exports and summary.json")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)

# Step 1: the models. `sizes` are transformers config fields (layers, d_model, heads, vocab).
sizes = (
    dict(layers=2, d_model=64, heads=4, vocab=256) if args.quick else dict(layers=4, d_model=128, heads=4, vocab=512)
)
max_context, prefill_len = 64, 16
prompt = np.array([5, 17, 101, 42, 7, 230, 64, 3, 88, 19], np.int64)
new_tokens = 32  # the issue: greedy tokens identical to onnxruntime's for 32 tokens


def onnxruntime_greedy(path: str, ids: np.ndarray, n: int) -> list:
    """The reference: onnxruntime on the export itself, its past growing by each call's present."""
    import onnxruntime as ort

    sess = ort.InferenceSession(path)
    past_names = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    shape = {i.name: i.shape for i in sess.get_inputs()}
    past = {n_: np.zeros((1, shape[n_][1], 0, shape[n_][3]), np.float32) for n_ in past_names}
    tokens, feed_ids, pos = [], ids[None], 0
    for _ in range(n):
        s = feed_ids.shape[1]
        feed = {"input_ids": feed_ids, "attention_mask": np.ones((1, pos + s), np.int64)}
        feed["position_ids"] = np.arange(pos, pos + s, dtype=np.int64)[None]
        logits, *present = sess.run(None, {**feed, **past})
        past, pos = dict(zip(past_names, present)), pos + s
        tokens.append(int(logits[0, -1].argmax()))
        feed_ids = np.array([[tokens[-1]]], np.int64)
    return tokens


summary = {}
for arch in ("gpt2", "llama"):
    # Step 2: export to ONNX, as torch exports Hugging Face models (inputs input_ids, attention_mask,
    # position_ids, past_key_values.{i}.key/value; lengths symbolic).
    path = hf_export.export(arch, str(out / f"{arch}.onnx"), seed=0, **sizes)

    # Step 3: compile. The compiler specializes the export to a prefill step (16 tokens per call) and a
    # decode step (1 token), with a KV cache of max_context positions reserved at compile time.
    t0 = time.perf_counter()
    lm = tvm_npu.llm.compile(path, max_context=max_context, prefill_len=prefill_len, config="npu-ref")
    compile_s = time.perf_counter() - t0

    # Step 4: generate. Sampling runs on the CPU (greedy here; tvm_npu.llm.top_k / top_p for sampling).
    tokens = lm.generate(prompt, max_new_tokens=new_tokens).tolist()
    reference = onnxruntime_greedy(path, prompt, new_tokens)
    same = tokens == reference
    pad = " " * len(arch)
    print(f"{arch}: {tokens}")
    verdict = "identical" if same else "DIFFER: " + str(reference)
    print(f"{pad}  the {len(tokens)} tokens against onnxruntime's greedy tokens on the export: {verdict}")
    # The KV cache: "npu" when every layer's cache stays in the NPU's state region between calls (a decode
    # call then passes only the token and the position), "host" otherwise (lm.reports[step].kv_cache says why).
    print(f"{pad}  KV cache: {lm.meta['kv_cache']} ({lm.max_context} positions reserved at compile time)")

    # Step 5: what did the NPU spend? Cycles and DDR bytes from the reference NPU's cycle model: the
    # prefill of the prompt, and all decode steps together (one token each).
    p = lm.profile()
    for step in ("prefill", "decode"):
        s = p[step]
        print(
            f"{pad}  {step:7s}: {s['tokens']:>3} tokens, {s['cycles']:>10,} cycles, {s['ddr_bytes']:>10,} DDR bytes, "
            f"MAC utilization {100 * s['mac_util']:.1f}%, {s['tokens_per_s'] or 0:,.0f} tokens/s at the NPU clock"
        )
    # Where each op ran (the decode step; lm.placements["prefill"] likewise) and why not elsewhere.
    ops = lm.placements["decode"]
    on_npu = sum(op["device"] == "npu" for op in ops)
    print(f"{pad}  decode step: {on_npu} of {len(ops)} ops on the NPU")
    summary[arch] = {
        "tokens": tokens,
        "reference": reference,
        "identical": same,
        "kv_cache": lm.meta["kv_cache"],
        "compile_s": round(compile_s, 1),
        "profile": {k: {f: p[k][f] for f in ("tokens", "cycles", "ddr_bytes", "mac_util", "tokens_per_s")} for k in p},
        "decode_ops": {"npu": on_npu, "all": len(ops)},
    }

(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(f"summary: {out / 'summary.json'}")
