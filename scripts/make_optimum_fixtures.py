"""Make the optimum fixtures of tests/llm_import/test_optimum_fixtures.py.

optimum's ONNX exporter (the package optimum-onnx) is how many users get a decoder ONNX file. It needs
transformers < 4.58, which cannot share the project's environment (transformers 5), so this script runs in
its own and the tests read what it made. It builds tiny seeded Hugging Face models (GPT-2, Llama, Qwen2,
Mistral, Phi-3, Gemma: 2 layers, d 64, 4 heads, 2 KV heads where the family has grouped-query attention,
vocab 256, 128 positions), saves each with save_pretrained to a local folder, exports it offline with
`optimum.exporters.onnx.main_export(task="text-generation-with-past")` and keeps the single-file
model.onnx in tests/fixtures/optimum/<family>/. Beside it, reference.json holds onnxruntime's greedy
tokens for a fixed prompt, run in this environment with the export's own interface (input_ids,
attention_mask, position_ids where the export has it, the past growing); the tests' main reference is
onnxruntime in the project's environment on the same file.

    python3 -m venv /work/venv-optimum
    /work/venv-optimum/bin/pip install "optimum-onnx==0.1.*" "torch==2.13.0" onnx onnxruntime
    /work/venv-optimum/bin/python scripts/make_optimum_fixtures.py [--out tests/fixtures/optimum] [families...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "phi3", "gemma")
PROMPT = [3, 17, 200, 45, 9]  # token ids: the fixed prompt of every reference (tests/llm_import's)
DECODES = 16  # greedy tokens after the prompt
SEEDS = range(4)  # each family takes the seed whose greedy path has the widest top-2 margin (see _pick)
SIZES = dict(d_model=64, layers=2, heads=4, kv_heads=2, vocab=256, positions=128, intermediate=64)


def _config(family: str):
    import transformers

    s = SIZES
    if family == "gpt2":
        return transformers.GPT2Config(
            vocab_size=s["vocab"],
            n_positions=s["positions"],
            n_embd=s["d_model"],
            n_layer=s["layers"],
            n_head=s["heads"],
            n_inner=s["intermediate"],
            tie_word_embeddings=False,  # tied, a tiny random GPT-2 repeats one token (as Gemma below)
        )
    cls = {
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "mistral": transformers.MistralConfig,  # its default sliding window 4096: beyond any max_context here
        "phi3": transformers.Phi3Config,
        "gemma": transformers.GemmaConfig,
    }[family]
    # untied heads: a tied tiny random Gemma repeats its prompt's last token forever; head_dim d / heads
    # (Gemma's default 256 would dwarf the model); Phi-3 needs a pad id below the vocabulary
    extra = {"gemma": dict(tie_word_embeddings=False), "phi3": dict(pad_token_id=0)}
    return cls(
        vocab_size=s["vocab"],
        hidden_size=s["d_model"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        head_dim=s["d_model"] // s["heads"],
        max_position_embeddings=s["positions"],
        **extra.get(family, {}),
    )


def _hf_folder(family: str, seed: int, folder: str) -> None:
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(_config(family)).eval()
    # Random init is small around zero; scale the weights up a little so the logits spread and greedy
    # decoding picks tokens by clear margins (as tvm_npu.models.hf_export.build_model does).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(2.5)
    model.save_pretrained(folder)


def _export(hf: str, out: str) -> str:
    from optimum.exporters.onnx import main_export

    main_export(
        model_name_or_path=hf,
        output=out,
        task="text-generation-with-past",
        local_files_only=True,
        library_name="transformers",
        do_validation=True,  # optimum's own check of the export against the torch model
    )
    path = os.path.join(out, "model.onnx")
    extra = [n for n in os.listdir(out) if n.startswith("model.onnx") and n != "model.onnx"]
    if extra:  # external data: inline it, the fixture is one file
        import onnx

        onnx.save(onnx.load(path), path, save_as_external_data=False)
    return path


def _greedy(path: str) -> tuple[list[int], float]:
    """onnxruntime's greedy tokens after PROMPT (DECODES of them) with the export's interface, and the
    smallest top-2 logit margin along the path."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(path)
    inputs = {i.name: i for i in sess.get_inputs()}
    pasts = [n for n in inputs if n.startswith("past_key_values.")]
    shape = inputs[pasts[0]].shape
    past = {n: np.zeros((1, shape[1], 0, shape[3]), np.float32) for n in pasts}
    ids, pos, tokens, margin = list(PROMPT), 0, [], np.inf
    for _ in range(DECODES):
        s = len(ids)
        feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, pos + s), np.int64)}
        if "position_ids" in inputs:
            feed["position_ids"] = np.arange(pos, pos + s, dtype=np.int64)[None]
        outs = sess.run(None, {**feed, **past})
        names = [o.name for o in sess.get_outputs()]
        logits = outs[names.index("logits")][0, -1]
        past = {n: outs[names.index(n.replace("past_key_values.", "present."))] for n in pasts}
        top = np.sort(logits)[-2:]
        margin = min(margin, float(top[1] - top[0]))
        tokens.append(int(logits.argmax()))
        ids, pos = [tokens[-1]], pos + s
    return tokens, margin


def _pick(family: str, tmp: str) -> tuple[int, str, list[int], float]:
    """The seed of SEEDS whose greedy path moves (more than 2 distinct tokens) with the widest top-2
    margin: a near-tie would make the fp16 NPU's token comparison fragile."""
    best = None
    for seed in SEEDS:
        hf, out = (os.path.join(tmp, f"{family}-{seed}-{k}") for k in ("hf", "onnx"))
        _hf_folder(family, seed, hf)
        path = _export(hf, out)
        tokens, margin = _greedy(path)
        print(f"{family} seed {seed}: margin {margin:.3f}, {len(set(tokens))} distinct tokens")
        if len(set(tokens)) > 2 and (best is None or margin > best[3]):
            best = (seed, path, tokens, margin)
    if best is None:
        raise SystemExit(f"{family}: no seed of {list(SEEDS)} gives a greedy path that moves")
    return best


def main() -> None:
    import onnxruntime
    import optimum.version
    import torch
    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "optimum"))
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    from importlib.metadata import version

    versions = {"optimum-onnx": version("optimum-onnx"), "optimum": optimum.version.__version__}
    versions.update(transformers=transformers.__version__, torch=torch.__version__)
    versions["onnxruntime"] = onnxruntime.__version__
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            seed, path, tokens, margin = _pick(family, tmp)
            out = os.path.abspath(os.path.join(args.out, family))
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            shutil.copy(path, os.path.join(out, "model.onnx"))
            ref = dict(family=family, seed=seed, prompt=PROMPT, tokens=tokens, min_top2_margin=round(margin, 4))
            ref.update(sizes=SIZES, versions=versions)
            with open(os.path.join(out, "reference.json"), "w") as f:
                json.dump(ref, f)
                f.write("\n")
            print(f"{out}: seed {seed}, {os.path.getsize(os.path.join(out, 'model.onnx')) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
