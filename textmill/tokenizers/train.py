"""Train a byte-level BPE on a corpus and save it as GPT-2's two files (vocab.json + merges.txt).

Hugging Face `tokenizers` does the counting and merging (it streams the texts and keeps only word counts,
so memory grows with the vocabulary of the corpus, not its size). We then write the files ourselves in
GPT-2's layout: the 256 byte symbols first in GPT-2's order, one id per merge in merge order, and
`<|endoftext|>` last, so Megatron-LM, transformers and our tiktoken engine all load them. On a corpus of
more than `bpe_sample_documents` records it trains on a seeded sample of that many, so its time does not
grow with the corpus either.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, is_loose_json
from textmill.tokenizers.gpt2 import EOD_TOKEN, GPT2Tokenizer, bytes_to_unicode
from textmill.tokenizers.tokenize_config import TokenizeConfig


def vocab_files(output_prefix: str | Path) -> tuple[Path, Path]:
    """Where a trained tokenizer goes: `<prefix>-vocab.json`, `<prefix>-merges.txt` (GPT-2's names)."""
    return Path(f"{output_prefix}-vocab.json"), Path(f"{output_prefix}-merges.txt")


def train_bpe(texts: Iterable[str], vocab_size: int, output_prefix: str | Path, min_frequency: int = 2,
              endoftext: str = "text") -> GPT2Tokenizer:
    """Learn up to `vocab_size - 257` merges from `texts` and save the GPT-2 files; returns the tokenizer
    (`endoftext`: GPT2Tokenizer's). A corpus too small to reach `vocab_size` gives a smaller vocabulary (the
    returned `vocab_size`)."""
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
    return GPT2Tokenizer(vocab_path, merges_path, endoftext)


def train_bpe_on_files(inputs: list[Path], output_prefix: str | Path, config: TokenizeConfig) -> GPT2Tokenizer:
    """`train_bpe` on the texts of `config.json_keys` in document files (the records `textmill tokenize`
    reads), or on a seeded sample of about `config.bpe_sample_documents` records when there are more:
    the training's time and memory then stay the same however large the corpus grows."""
    texts = sampled_texts(inputs, config.json_keys, config.bpe_sample_documents, config.bpe_sample_seed)
    return train_bpe(texts, config.vocab_size, output_prefix, config.min_frequency, config.endoftext)


def sampled_texts(inputs: list[Path], keys: tuple[str, ...], documents: int, seed: int) -> Iterator[str]:
    """The texts of the records in the sample, in file order. A record is in it when a keyed hash of
    where it is ("file:line", "file:row N") falls under documents / records: the same sample on every
    run, chosen while streaming, nothing held."""
    from textmill.tokenizers.preprocess import iter_records

    total = sum(record_count(p) for p in inputs)
    fraction = min(1.0, documents / total) if total else 1.0
    key = seed.to_bytes(8, "little")
    for rec in iter_records(inputs, keys):
        if rec.texts and (fraction >= 1.0 or position_in_unit(rec.where, key) < fraction):
            yield from rec.texts


def position_in_unit(text: str, key: bytes) -> float:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "little") / 2**64


def record_count(path: Path) -> int:
    """Records of a document file: rows of a Parquet shard, lines of loose JSON (bad ones included)."""
    if is_loose_json(path):
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    return pq.ParquetFile(path).metadata.num_rows
