"""The CLIP tokenizer of a Stable Diffusion folder (`tokenizer/`: vocab.json, merges.txt,
tokenizer_config.json, special_tokens_map.json, as transformers' CLIPTokenizer saves it), built with the
`tokenizers` library: text prompts in, the text encoder's token ids out.

`tokenizers` is the optional extra `tokenizer`, imported when a tokenizer is built, never by the rest of
tvm_npu. The pipeline is CLIP's byte-level BPE as OpenAI's and transformers' tokenizers run it:
whitespace runs folded to one space, lower case, split into words (contractions, letter runs, single
digits, runs of other symbols), each word's bytes mapped to printable characters, merged by merges.txt
with "</w>" ending a word; then <|startoftext|> ... <|endoftext|> around the ids and the pad token to the
text encoder's positions (the `padding="max_length"` diffusers' pipeline asks for).

A prompt longer than the positions is refused (ERR_INVALID_CONFIG), where diffusers truncates it with a
warning: the image of a cut prompt is not the image of the prompt asked for.
"""

from __future__ import annotations

import os

from ..contract.errors import NPUError
from .config_json import read_json

FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
# CLIP's word split (its regex, less the special tokens, which are never in a prompt's text)
_WORDS = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def _token(value):
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


class CLIPTokenizer:
    """Text to the text encoder's ids: `encode(text)` -> list[int] of exactly `positions` ids."""

    def __init__(self, folder, positions: int):
        folder = os.fspath(folder)
        fast = os.path.join(folder, "tokenizer.json")  # what transformers 5 saves instead of vocab / merges
        missing = [f for f in FILES if not os.path.isfile(os.path.join(folder, f))]
        if os.path.isfile(fast):
            missing = [f for f in missing if f == "tokenizer_config.json"]
        if missing:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"tokenizer folder {folder}: missing {missing}; a CLIP tokenizer needs {list(FILES)} "
                "(CLIPTokenizer.save_pretrained writes them)",
            )
        try:
            from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
        except ImportError:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                "text prompts need the `tokenizers` library: pip install 'tvm_npu[tokenizer]', or pass token "
                "ids (prompt_ids=)",
            ) from None
        config = read_json(os.path.join(folder, "tokenizer_config.json"))
        special = os.path.join(folder, "special_tokens_map.json")
        if os.path.isfile(special):  # transformers writes both; the map wins where they differ, as it loads them
            config = {**config, **read_json(special)}
        loaded = None
        if os.path.isfile(fast):
            try:
                loaded = Tokenizer.from_file(fast)
            except Exception as err:  # noqa: BLE001 - tokenizers raises its own Exception type
                raise NPUError("ERR_INVALID_MODEL", f"{fast} is not a tokenizers file: {err}") from None
            vocab = loaded.get_vocab()
        else:
            vocab = read_json(os.path.join(folder, "vocab.json"))
        names = {k: _token(config.get(f"{k}_token")) for k in ("bos", "eos", "pad", "unk")}
        names = {k: v or {"bos": "<|startoftext|>", "eos": "<|endoftext|>", "unk": "<|endoftext|>"}.get(k)
                 for k, v in names.items()}  # fmt: skip
        names["pad"] = names["pad"] or names["eos"]  # CLIP 1.x pads with its end token
        absent = sorted({v for v in names.values() if v not in vocab})
        if absent:
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"tokenizer folder {folder}: special tokens {absent} are not in vocab.json: the vocabulary and "
                "tokenizer_config.json belong to different tokenizers",
            )
        limit = config.get("model_max_length")
        if isinstance(limit, int) and limit < 10**6 and limit != positions:  # 1e30: transformers' "no limit"
            raise NPUError(
                "ERR_INVALID_MODEL",
                f"tokenizer model_max_length {limit}, the text encoder takes {positions} positions: the tokenizer "
                "and the text encoder come from different models",
            )
        if loaded is not None:
            loaded.no_padding()
            loaded.no_truncation()
            self.ids = {k: vocab[v] for k, v in names.items()}
            self._tok, self.positions, self.folder = loaded, positions, folder
            return
        try:
            merges = []
            with open(os.path.join(folder, "merges.txt"), encoding="utf-8") as f:
                for line in f:
                    parts = line.split()
                    if line.startswith("#version") or len(parts) != 2:
                        continue
                    merges.append((parts[0], parts[1]))
            bpe = models.BPE(vocab, merges, unk_token=names["unk"], end_of_word_suffix="</w>", fuse_unk=False)
        except Exception as err:  # noqa: BLE001 - tokenizers raises its own Exception type
            raise NPUError("ERR_INVALID_MODEL", f"tokenizer folder {folder}: vocab.json / merges.txt: {err}") from None
        tok = Tokenizer(bpe)
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_WORDS), behavior="removed", invert=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        self.ids = {k: vocab[v] for k, v in names.items()}
        tok.post_processor = processors.TemplateProcessing(
            single=f"{names['bos']} $A {names['eos']}",
            special_tokens=[(names["bos"], self.ids["bos"]), (names["eos"], self.ids["eos"])],
        )
        self._tok, self.positions, self.folder = tok, positions, folder

    def encode(self, text: str, what: str = "prompt") -> list[int]:
        """`text`'s ids with the start and end tokens, padded to the positions; ERR_INVALID_CONFIG for text
        that does not fit (nothing is cut)."""
        if not isinstance(text, str):
            raise NPUError("ERR_INVALID_CONFIG", f"{what}: give a string, not {type(text).__name__}")
        ids = self._tok.encode(text.strip()).ids
        P = self.positions
        if len(ids) > P:
            raise NPUError(
                "ERR_INVALID_CONFIG",
                f"{what}: {len(ids)} tokens with the start and end tokens, the text encoder takes {P}: shorten "
                f"it by {len(ids) - P} tokens (nothing is truncated)",
            )
        return ids + [self.ids["pad"]] * (P - len(ids))
