"""Train the small causal LMs that ship with tvm_npu (`tvm_npu.models.pretrained("tiny-llama")`).

Issue 33: every other language model in the project has random weights, so nobody could tell whether an
int8 or int4 build still writes text. This script trains a Llama-architecture model (RMSNorm, RoPE,
grouped-query attention, SiLU-gated MLP) -- and, with ``--arch gpt2``, a GPT-2 one (LayerNorm, GELU,
learned positions) -- on English text that every CPython has offline: the Python documentation's topics
shipped as ``pydoc_data.topics``. One topic in ten (every tenth name in sorted order) is held out; the
held-out text is written next to the model (``heldout.txt``) so that an evaluation on another machine
reads the same text even where another Python ships other documentation.

Reproducible: the tokenizer (byte-level BPE, the `tokenizers` library) is trained on the training split
only; torch is seeded, deterministic algorithms are enforced and the thread count is fixed, so one machine
gives the same weights on every run (another CPU may round a reduction differently: the weights'
SHA-256 in ``train_log.json`` says which file a result was measured with).

    pip install ".[llm]" tokenizers safetensors
    python scripts/train_tiny_lm.py --arch llama --out python/tvm_npu/models/pretrained/tiny-llama

About 25 minutes on 2 CPU cores for the default 600 steps (a loaded machine takes longer; the step count,
not the time, is fixed, so the result does not depend on the load).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np

EOS = "<|endoftext|>"


def split_text() -> tuple[list[str], list[str], list[str]]:
    """(training documents, held-out documents, held-out topic names) of pydoc_data.topics."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    held = names[5::10]
    train = [topics[n] for n in names if n not in held]
    return train, [topics[n] for n in held], held


def train_tokenizer(docs: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def encode(tok, docs: list[str]) -> np.ndarray:
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for d in docs:
        ids += tok.encode(d).ids + [eos]
    return np.asarray(ids, np.int64)


def make_config(arch: str, vocab: int, eos: int):
    import transformers

    if arch == "llama":
        return transformers.LlamaConfig(
            vocab_size=vocab,
            hidden_size=256,
            intermediate_size=640,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=eos,
            eos_token_id=eos,
        )
    return transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=512,
        n_embd=256,
        n_layer=4,
        n_head=4,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
    )


def evaluate(model, ids: np.ndarray, seq: int) -> float:
    """Mean next-token negative log-likelihood (nats) over non-overlapping windows of `seq` tokens."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, seq):
            chunk = torch.from_numpy(ids[start : start + seq + 1][None])
            if chunk.shape[1] < 2:
                break
            out = model(input_ids=chunk[:, :-1])
            logp = torch.log_softmax(out.logits.float(), -1)
            nll = -logp.gather(-1, chunk[:, 1:, None])[..., 0]
            total += float(nll.sum())
            count += nll.numel()
    return total / count


def unigram_nll(train: np.ndarray, held: np.ndarray, vocab: int) -> float:
    """The held-out NLL of the training split's unigram distribution (add-one smoothed): the baseline."""
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    p = counts / counts.sum()
    return float(-np.log(p[held[1:]]).mean())


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=("llama", "gpt2"), default="llama")
    ap.add_argument("--out", required=True, help="the folder to write (HF layout)")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch
    import transformers
    from tqdm import tqdm

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    rng = np.random.default_rng(args.seed)

    train_docs, held_docs, held_names = split_text()
    tok = train_tokenizer(train_docs, args.vocab)
    vocab = tok.get_vocab_size()
    train_ids, held_ids = encode(tok, train_docs), encode(tok, held_docs)
    eos = tok.token_to_id(EOS)

    config = make_config(args.arch, vocab, eos)
    cls = transformers.LlamaForCausalLM if args.arch == "llama" else transformers.GPT2LMHeadModel
    model = cls(config)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    log = {"arch": args.arch, "args": vars(args), "python": sys.version.split()[0], "torch": torch.__version__}
    log["transformers"] = transformers.__version__
    log["text"] = {
        "source": "pydoc_data.topics",
        "train_topics": len(train_docs),
        "heldout_topics": held_names,
        "train_tokens": int(train_ids.size),
        "heldout_tokens": int(held_ids.size),
        "train_sha256": hashlib.sha256("".join(train_docs).encode()).hexdigest(),
    }
    log["parameters"] = int(params)
    log["curve"] = []
    start = time.time()
    model.train()
    bar = tqdm(range(args.steps), desc=f"train {args.arch}", unit="step")
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = rng.integers(0, train_ids.size - args.seq - 1, args.batch)
        batch = torch.from_numpy(np.stack([train_ids[s : s + args.seq + 1] for s in starts]))
        # the model shifts the labels by one itself: the inputs are the labels
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone()).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.set_postfix(loss=f"{float(loss):.3f}")
        if step % 50 == 0 or step == args.steps - 1:
            log["curve"].append({"step": step, "loss": round(float(loss), 4), "s": round(time.time() - start, 1)})
    model.eval()
    held_nll = evaluate(model, held_ids, args.seq)
    uni = unigram_nll(train_ids, held_ids, vocab)
    log["seconds"] = round(time.time() - start, 1)
    log["heldout"] = {
        "nll": round(held_nll, 4),
        "perplexity": round(math.exp(held_nll), 2),
        "unigram_perplexity": round(math.exp(uni), 2),
    }

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS, "pad_token": EOS},
            f,
            indent=1,
        )
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write("\n".join(held_docs))
    log["sha256"] = {
        name: sha256(os.path.join(args.out, name))
        for name in ("model.safetensors", "tokenizer.json", "config.json", "heldout.txt")
    }
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(json.dumps(log["heldout"]), f"{log['seconds']} s", f"{params} parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
