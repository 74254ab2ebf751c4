"""Train a byte-level BPE on a corpus and save it as GPT-2's two files (vocab.json + merges.txt).

Hugging Face `tokenizers` does the counting and merging (it streams the texts and keeps only word counts,
so memory grows with the vocabulary of the corpus, not its size). We then write the files ourselves in
GPT-2's layout: the 256 byte symbols first in GPT-2's order, one id per merge in merge order, and
`<|endoftext|>` last, so Megatron-LM, transformers and our tiktoken engine all load them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from textmill.errors import TextmillError
from textmill.io.files import atomic_path
from textmill.tokenizers.gpt2 import EOD_TOKEN, GPT2Tokenizer, bytes_to_unicode


def vocab_files(output_prefix: str | Path) -> tuple[Path, Path]:
    """Where a trained tokenizer goes: `<prefix>-vocab.json`, `<prefix>-merges.txt` (GPT-2's names)."""
    return Path(f"{output_prefix}-vocab.json"), Path(f"{output_prefix}-merges.txt")


def train_bpe(texts: Iterable[str], vocab_size: int, output_prefix: str | Path, min_frequency: int = 2) -> GPT2Tokenizer:
    """Learn up to `vocab_size - 257` merges from `texts` and save the GPT-2 files; returns the tokenizer.
    A corpus too small to reach `vocab_size` gives a smaller vocabulary (the returned `vocab_size`)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise TextmillError(f"--vocab-size must be at least 257 (256 bytes + {EOD_TOKEN}), got {vocab_size}")
    byte_symbols = list(bytes_to_unicode().values())
    bpe = Tokenizer(models.BPE())
    # The same pre-tokenisation as GPT-2 (its regex over bytes mapped to printable symbols).
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1, min_frequency=min_frequency, initial_alphabet=byte_symbols, show_progress=False
    )
    bpe.train_from_iterator(texts, trainer)
    merges = json.loads(bpe.to_str())["model"]["merges"]

    vocab = {symbol: i for i, symbol in enumerate(byte_symbols)}
    kept = []
    for a, b in merges:
        # Two merges can produce the same string; GPT-2's format has one id per merge, so keep the first.
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            kept.append(f"{a} {b}\n")
    vocab[EOD_TOKEN] = len(vocab)

    vocab_path, merges_path = vocab_files(output_prefix)
    vocab_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(vocab_path) as tmp:
        tmp.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    with atomic_path(merges_path) as tmp:
        # Megatron and HF drop the header and whatever follows the last newline: end with one.
        tmp.write_text("#version: 0.2\n" + "".join(kept), encoding="utf-8")
    return GPT2Tokenizer(vocab_path, merges_path)


def train_bpe_on_files(inputs: list[Path], keys: tuple[str, ...], vocab_size: int, output_prefix: str | Path,
                       min_frequency: int = 2) -> GPT2Tokenizer:
    """`train_bpe` on the texts of `keys` in document files (the records `textmill tokenize` reads)."""
    from textmill.tokenizers.preprocess import iter_records

    texts = (t for rec in iter_records(inputs, keys) if rec.texts for t in rec.texts)
    return train_bpe(texts, vocab_size, output_prefix, min_frequency)
