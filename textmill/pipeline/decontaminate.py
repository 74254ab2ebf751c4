"""Evaluation-set decontamination: Megatron-LM's tools/openwebtext/filter_ngrams.py, step for step.

Words are `\\w+` runs of the lower-cased text. The evaluation n-grams are every 13-gram of each evaluation
text; a text of 8 to 12 words is one n-gram as a whole; shorter texts are ignored.

Pass 1 (`count_matches`) scans each training document from the left for the first evaluation n-gram,
notes it and scans on just past it, and counts in how many documents each n-gram was noted. Every
evaluation n-gram noted in fewer than `key_threshold` documents is used in pass 2, so phrases common
everywhere do not shred ordinary documents. Because each scan goes on past its match, the overlapping
n-grams of a passage copied into many documents are mostly never noted: such a passage is still cut out.

Pass 2 (`decontaminate_shard`) cuts the first match out of a document with `cut_chars` characters either
side, widened to the sentence end on the left and the next sentence end on the right; the part before
is a piece, the part after is scanned again. Pieces of `min_fragment_chars` or fewer are dropped, and a
document cut into more than `max_pieces` pieces is dropped whole. Pieces become their own records, with
ids `<id>-<k>`. One difference from the reference, on purpose: each piece is stripped of the whitespace
at its cuts (the reference's pieces after the first begin with the space after a sentence end).
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from textmill.errors import TextmillError
from textmill.io.files import JSON_LINE_REASONS, iter_json_lines, read_json_record, write_json
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.stage import Verdict, filter_documents
from textmill.pipeline.stage_configs import DecontaminateConfig
from textmill.pipeline.word_ngrams import WORD_RUN, spans, word_runs


@dataclass(frozen=True)
class EvalNgrams:
    """The evaluation n-grams, as tuples of words, and their lengths. Every evaluation word has an id in
    `vocabulary` (from 1; 0 is a word no evaluation text has); an n-gram's head is its first words of the
    shortest length, `head_keys` holds the hashes of the heads as ids and `head_bits` their top HEAD_BITS bits
    as a table: a training document's windows are hashed all at once (numpy), looked up in the table, the few
    it lets through in the sorted keys, and only where a hash is a head's are the words looked up in `grams`.
    `excluded` n-grams are not matched (pass 2 leaves out the frequent ones without rebuilding)."""

    grams: set[tuple[str, ...]]
    lengths: list[int]
    vocabulary: dict[str, int]
    head_keys: np.ndarray  # sorted
    head_bits: np.ndarray
    excluded: frozenset[tuple[str, ...]] = frozenset()

    def without(self, excluded: Iterable[tuple[str, ...]]) -> "EvalNgrams":
        return replace(self, excluded=frozenset(excluded))

    def holds(self, gram: tuple[str, ...]) -> bool:
        return gram in self.grams and gram not in self.excluded


def word_ids(words: list[str] | tuple[str, ...], vocabulary: dict[str, int]) -> np.ndarray:
    """Each word's evaluation id, 0 for a word no evaluation text has (the loop runs in C)."""
    return np.fromiter(map(vocabulary.get, words, itertools.repeat(0)), np.uint64, len(words))


_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd: the window hash is a polynomial in it, mod 2 ** 64
HEAD_BITS = 22  # a table of 4 MB: with LAMBADA's 253,175 heads it lets 6% of other windows through


def window_keys(ids: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit hash of the n ids from each position 0 .. len - n (equal windows, equal hashes)."""
    positions = len(ids) - n + 1
    keys = ids[:positions].copy()
    for k in range(1, n):
        keys = keys * _MIX + ids[k : k + positions]
    return keys


def words_of(text: str) -> list[str]:
    return word_runs(text.lower())


def read_eval_texts(path: Path, key: str = "text") -> Iterator[str]:
    """Texts of an evaluation set in loose JSON (LAMBADA's format); a bad line is an error."""
    try:
        for lineno, _, obj, reason in iter_json_lines(path):
            if reason:
                raise TextmillError(f"{path}:{lineno}: {JSON_LINE_REASONS[reason]}")
            if not isinstance(obj, dict) or not isinstance(obj.get(key), str):
                raise TextmillError(f"{path}:{lineno}: no string field {key!r}")
            yield obj[key]
    except OSError as exc:
        raise TextmillError(f"cannot read evaluation set {path}: {exc.strerror}") from None


def eval_ngrams(paths: Iterable[Path], cfg: DecontaminateConfig) -> EvalNgrams:
    """The evaluation sets' n-grams, built once per process for the same files (by size and time) and
    lengths: every unit of a run that a worker process takes reuses them."""
    paths = tuple(Path(p) for p in paths)
    try:
        stamps = tuple((p.stat().st_size, p.stat().st_mtime_ns) for p in paths)
    except OSError as exc:
        raise TextmillError(f"cannot read evaluation set {exc.filename}: {exc.strerror}") from None
    return build_eval_ngrams(paths, stamps, cfg.max_ngram, cfg.min_ngram)


@lru_cache(maxsize=4)
def build_eval_ngrams(paths: tuple[Path, ...], stamps: tuple, max_ngram: int, min_ngram: int) -> EvalNgrams:
    texts = [words_of(text) for path in paths for text in read_eval_texts(path)]
    texts = [words for words in texts if len(words) >= min_ngram]
    grams: set[tuple[str, ...]] = set()
    for words in texts:  # zip makes the n-gram tuples in C
        grams.update(zip(*(words[k:] for k in range(max_ngram)), strict=False) if len(words) >= max_ngram else [tuple(words)])
    if not grams:
        raise TextmillError(f"the evaluation set(s) gave no n-grams (no text of {min_ngram} words or more)")
    lengths = sorted({min(len(words), max_ngram) for words in texts})  # the n-grams' lengths
    shortest = lengths[0]
    vocabulary = {word: i for i, word in enumerate(dict.fromkeys(itertools.chain.from_iterable(texts)), 1)}
    # The heads' hashes from every text's windows at once: a text's n-grams start at 0 .. len - max_ngram, or
    # at 0 for a text shorter than max_ngram words (so no head's window runs into the next text).
    keys = window_keys(word_ids(list(itertools.chain.from_iterable(texts)), vocabulary), shortest)
    sizes = np.fromiter(map(len, texts), np.int64, len(texts))
    head_keys = np.unique(keys[spans(np.cumsum(sizes) - sizes, np.maximum(sizes - max_ngram + 1, 1))])
    head_bits = np.zeros(1 << HEAD_BITS, bool)
    head_bits[head_keys >> np.uint64(64 - HEAD_BITS)] = True
    return EvalNgrams(grams, lengths, vocabulary, head_keys, head_bits)


def first_match(text: str, ngrams: EvalNgrams, max_ngram: int) -> tuple[int, str] | None:
    """(start, n-gram as space-joined words) of the first evaluation n-gram in `text`, as filter_ngrams.py
    finds it: at each word from the left, the max_ngram-gram, then every length in the set shortest first;
    past the last full max_ngram-gram, only the shorter lengths inside it. Positions are those of the
    lower-cased text, as there. Only the positions whose window of the shortest length hashes as a head
    can start an n-gram; they are found at once, and read in order as that scan reads them."""
    lower = text.lower()
    words = word_runs(lower)
    shortest = ngrams.lengths[0]
    if len(words) < shortest:
        return None
    keys = window_keys(word_ids(words, ngrams.vocabulary), shortest)
    maybe = np.flatnonzero(ngrams.head_bits[keys >> np.uint64(64 - HEAD_BITS)])
    candidates = keys[maybe]
    found = ngrams.head_keys[np.minimum(np.searchsorted(ngrams.head_keys, candidates), len(ngrams.head_keys) - 1)]
    hits = maybe[found == candidates]
    if not len(hits):  # most documents: no n-gram can start anywhere
        return None
    last = len(words) - max_ngram

    def at(i: int, n: int) -> tuple[int, str] | None:
        gram = tuple(words[i : i + n])
        if len(gram) != n or not ngrams.holds(gram):
            return None
        start = next(itertools.islice(WORD_RUN.finditer(lower), i, None)).start()  # only for a match
        return start, " ".join(gram)

    # The scan's first part reads the positions of zip(words[:last + 1], words[1:last + 2]), as the reference's.
    positions = range(len(words))
    scanned = min(len(positions[: last + 1]), len(positions[1 : last + 2]))
    for i in hits.tolist():
        if i >= scanned:
            break
        for n in (max_ngram, *ngrams.lengths):  # a hash hit that is no head matches no n-gram here
            if found := at(i, n):
                return found
    if last > 0:
        for n in ngrams.lengths:
            if n != max_ngram:
                for i in hits[(hits >= last) & (hits <= len(words) - n)].tolist():
                    if found := at(i, n):
                        return found
    return None


def found_in(text: str, ngrams: EvalNgrams, max_ngram: int) -> set[str]:
    """Pass 1 on one document: the evaluation n-grams found scanning it from the left, each scan going on
    just past the previous match (filter_ngrams.py's count, so the overlapping n-grams of a copied
    passage are not all found)."""
    found: set[str] = set()
    while match := first_match(text, ngrams, max_ngram):
        start, gram = match
        found.add(gram)
        text = text[start + len(gram) + 1 :]
    return found


@dataclass
class ShardCounts:
    """Pass 1 on one shard: in how many of its documents each evaluation n-gram is found, and the ids of the
    documents where any is (pass 2 cuts a subset of those n-grams, so it reads only these)."""

    counts: Counter
    matched: set[str]


def count_matches(shard: Path, ngrams: EvalNgrams, max_ngram: int, max_document_bytes: int = 0) -> ShardCounts:
    """Pass 1 on one shard."""
    counts: Counter = Counter()
    matched: set[str] = set()
    for row, bad in iter_documents(shard, max_document_bytes):
        if not bad and (found := found_in(row["text"] or "", ngrams, max_ngram)):
            counts.update(found)
            matched.add(row["id"])
    return ShardCounts(counts, matched)


def write_counts(counts: ShardCounts, path: Path) -> None:
    """One shard's pass-1 counts, for the step that adds them up (n-grams as space-joined words)."""
    write_json({"counts": dict(sorted(counts.counts.items())), "matched": sorted(counts.matched)}, path)


def read_counts(path: Path) -> dict:
    """One shard's pass-1 record (write_counts); a missing or damaged one is an error."""
    record = read_json_record(path, "count that shard again")
    if record is None:
        raise TextmillError(f"{path} is missing or damaged; count that shard again")
    return record


def read_matched(path: Path) -> set[str] | None:
    """The ids of the documents pass 1 found an n-gram in (None from a record that does not say)."""
    record = read_counts(path)
    return set(record["matched"]) if "matched" in record else None


def add_counts(paths: Iterable[Path]) -> Counter:
    total: Counter = Counter()
    for path in paths:
        total.update({sys.intern(g): c for g, c in read_counts(path)["counts"].items()})
    return total


def cut(text: str, start: int, gram: str, cfg: DecontaminateConfig) -> tuple[str, str]:
    """The text before a match and the text after it, as filter_ngrams.py splits: `cut_chars` before the
    match back to a sentence end (kept with it), and `cut_chars` past the match on to a sentence end (the
    rest begins after it)."""
    pos = start - cfg.cut_chars
    while pos > 0 and text[pos] not in ".!?":
        pos -= 1
    before = text[: pos + 1] if pos > 0 else ""
    pos = start + len(gram) + cfg.cut_chars
    while pos < len(text) and text[pos] not in ".!?":
        pos += 1
    return before, text[pos + 1 :] if pos + 1 < len(text) else ""


def clean_pieces(text: str, ngrams: EvalNgrams, cfg: DecontaminateConfig) -> list[str] | None:
    """Pass 2 on one document: None when no selected n-gram is in it, else the pieces left once every match
    is cut out (filter_ngrams.py's, but each stripped of the whitespace at its cuts); a piece of
    `min_fragment_chars` or fewer (whitespace included) is dropped."""
    pieces: list[str] = []
    rest: str | None = text
    touched = False
    while rest is not None:
        match = first_match(rest, ngrams, cfg.max_ngram)
        if match is None:
            pieces.append(rest)
            break
        touched = True
        before, after = cut(rest, *match, cfg)
        if len(before) > cfg.min_fragment_chars:
            pieces.append(before)
        rest = after if len(after) > cfg.min_fragment_chars else None
    return [p.strip() for p in pieces] if touched else None


TOUCHED_LISTED = 20  # documents a shard's manifest names among those the cuts touched


def decontaminate_shard(shard: Path, output: Path, ngrams: EvalNgrams, cfg: DecontaminateConfig,
                        max_document_bytes: int = 0, matched: set[str] | None = None) -> dict:
    """Pass 2 on one shard; `ngrams` holds only the n-grams selected by pass 1, `matched` the ids of the
    documents pass 1 found any n-gram in (the others are kept unread; None reads all)."""
    stats = {"documents_touched": 0, "characters_removed": 0, "touched": []}

    def decide(row: dict) -> Verdict:
        if matched is not None and row["id"] not in matched:
            return row, None
        text = row["text"] or ""
        pieces = clean_pieces(text, ngrams, cfg)
        if pieces is None:
            return row, None
        stats["documents_touched"] += 1
        removed = len(text) - sum(len(p) for p in pieces or [])
        if not pieces or len(pieces) > cfg.max_pieces:
            removed = len(text)
        stats["characters_removed"] += removed
        if len(stats["touched"]) < TOUCHED_LISTED:  # which documents were cut, for the report
            stats["touched"].append({"id": row["id"], "url": row.get("url"), "pieces": len(pieces or []),
                                     "characters_removed": removed})
        if not pieces or len(pieces) > cfg.max_pieces:
            return row, "contaminated_no_clean_fragment" if not pieces else "contaminated_too_many_pieces"
        return [{**row, "id": f"{row['id']}-{k}", "text": p} for k, p in enumerate(pieces)], None

    return filter_documents("decontaminate", shard, output, cfg.params(), decide, [shard, *cfg.eval_files], stats,
                            max_document_bytes)


def summary(selected: dict, manifests: list[dict]) -> dict:
    """What the decontamination did: n-grams of the evaluation sets, seen in training, used; documents
    touched and characters removed by the cuts."""
    return {**{k: selected[k] for k in ("eval_ngrams", "seen_in_training", "used")},
            "documents_touched": sum(m["documents_touched"] for m in manifests),
            "characters_removed": sum(m["characters_removed"] for m in manifests)}


def select_from_counts(count_files: list[Path], cfg: DecontaminateConfig, path: Path) -> dict:
    """Add up the shards' pass-1 counts and write what pass 2 needs to `path`: the n-grams it leaves out,
    those found in `key_threshold` or more documents (every other evaluation n-gram is used, found in
    pass 1 or not, as in filter_ngrams.py), with how many there were of each kind; returns that record."""
    ngrams = eval_ngrams(cfg.eval_files, cfg)
    counts = add_counts(count_files)
    frequent = sorted(g for g, c in counts.items() if c >= cfg.key_threshold)
    record = {"eval_ngrams": len(ngrams.grams), "seen_in_training": len(counts),
              "used": len(ngrams.grams) - len(frequent), "frequent": frequent}
    write_json(record, path)
    return record


def read_selected(path: Path, cfg: DecontaminateConfig) -> EvalNgrams:
    """The n-grams pass 2 cuts: the evaluation n-grams but those `path` (select_from_counts) leaves out."""
    record = read_json_record(path, "select the n-grams again")
    if record is None or "frequent" not in record:
        raise TextmillError(f"{path} is missing or damaged; select the n-grams again")
    return eval_ngrams(cfg.eval_files, cfg).without(tuple(g.split(" ")) for g in record["frequent"])
