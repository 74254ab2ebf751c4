"""Evaluation-set decontamination, after Megatron-LM's tools/openwebtext/filter_ngrams.py.

Words are `\\w+` runs, lower-cased. The evaluation n-grams are every 13-gram of each evaluation text; a
text of 8 to 12 words is one n-gram as a whole; shorter texts are ignored. Pass 1 (`count_matches`)
counts how often each evaluation n-gram occurs in the training corpus; only those seen fewer than
`key_threshold` times are used, so phrases common everywhere do not shred ordinary documents. Pass 2
(`decontaminate_shard`) cuts each match out of a document together with `cut_chars` characters either
side, widened to the sentence end on the left and the next sentence end on the right; fragments of
`min_fragment_chars` or fewer are dropped, and a document cut into more than `max_pieces` fragments is
dropped whole. Fragments become their own records, with ids `<id>-<k>`.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator


from textmill.errors import TextmillError
from textmill.io.files import JSON_LINE_REASONS, iter_json_lines, read_json_record, write_json
from textmill.pipeline.config import DecontaminateConfig
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.stage import Verdict, filter_documents

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?]")


@dataclass
class EvalNgrams:
    """The evaluation n-grams, as tuples of words, by length; `firsts` indexes the first two words so
    that most positions of a training document are ruled out without building an n-gram."""

    grams: set[tuple[str, ...]]
    lengths: list[int]
    firsts: set[tuple[str, str]]

    @classmethod
    def build(cls, grams: Iterable[tuple[str, ...]]) -> "EvalNgrams":
        grams = set(grams)
        return cls(grams, sorted({len(g) for g in grams}), {g[:2] for g in grams})


def words_with_spans(text: str) -> list[tuple[str, int, int]]:
    return [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]


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
    grams: set[tuple[str, ...]] = set()
    for path in paths:
        for text in read_eval_texts(path):
            words = [w for w, _, _ in words_with_spans(text)]
            if len(words) >= cfg.max_ngram:
                grams.update(tuple(words[i : i + cfg.max_ngram]) for i in range(len(words) - cfg.max_ngram + 1))
            elif len(words) >= cfg.min_ngram:
                grams.add(tuple(words))
    if not grams:
        raise TextmillError("the evaluation set(s) gave no n-grams (no text of 8 words or more)")
    return EvalNgrams.build(grams)


def find_matches(words: list[tuple[str, int, int]], ngrams: EvalNgrams) -> list[tuple[tuple[str, ...], int, int]]:
    """(n-gram, start char, end char) of every occurrence of an evaluation n-gram, in text order."""
    tokens = [w for w, _, _ in words]
    found = []
    for i in range(len(tokens) - 1):
        if (tokens[i], tokens[i + 1]) not in ngrams.firsts:
            continue
        for n in ngrams.lengths:
            gram = tuple(tokens[i : i + n])
            if len(gram) == n and gram in ngrams.grams:
                found.append((gram, words[i][1], words[i + n - 1][2]))
    return found


def count_matches(shard: Path, ngrams: EvalNgrams) -> Counter:
    """Pass 1 on one shard: how often each evaluation n-gram occurs in its documents."""
    counts: Counter = Counter()
    for row, bad in iter_documents(shard):
        if not bad:
            counts.update(g for g, _, _ in find_matches(words_with_spans(row["text"] or ""), ngrams))
    return counts


def write_counts(counts: Counter, path: Path) -> None:
    """One shard's pass-1 counts, for the step that adds them up (n-grams as space-joined words)."""
    write_json({"counts": {" ".join(g): c for g, c in sorted(counts.items())}}, path)


def add_counts(paths: Iterable[Path]) -> Counter:
    total: Counter = Counter()
    for path in paths:
        record = read_json_record(path, "count that shard again")
        if record is None:
            raise TextmillError(f"{path} is missing or damaged; count that shard again")
        # words interned: overlapping n-grams share them (LAMBADA's 253,175 n-grams: 44 MiB, not 230)
        total.update({tuple(map(sys.intern, g.split(" "))): c for g, c in record["counts"].items()})
    return total


def cut_matches(text: str, spans: list[tuple[int, int]], cfg: DecontaminateConfig) -> list[str]:
    """The fragments of `text` left after cutting out every span with its surroundings."""
    pieces = []
    cursor = 0
    for start, end in spans:
        if start < cursor:
            continue  # inside the part already cut away
        left_end = max(start - cfg.cut_chars, cursor)
        last_stop = max((m.end() for m in _SENTENCE_END.finditer(text, cursor, left_end)), default=cursor)
        pieces.append(text[cursor:last_stop])
        stop = _SENTENCE_END.search(text, min(end + cfg.cut_chars, len(text)))
        cursor = stop.end() if stop else len(text)
    pieces.append(text[cursor:])
    return [p.strip() for p in pieces if len(p.strip()) > cfg.min_fragment_chars]


def decontaminate_shard(shard: Path, output: Path, ngrams: EvalNgrams, cfg: DecontaminateConfig) -> dict:
    """Pass 2 on one shard; `ngrams` holds only the n-grams selected by pass 1."""
    stats = {"documents_touched": 0, "characters_removed": 0}

    def decide(row: dict) -> Verdict:
        text = row["text"] or ""
        spans = [(s, e) for _, s, e in find_matches(words_with_spans(text), ngrams)]
        if not spans:
            return row, None
        pieces = cut_matches(text, spans, cfg)
        stats["documents_touched"] += 1
        if not pieces or len(pieces) > cfg.max_pieces:
            stats["characters_removed"] += len(text)
            return row, "contaminated_no_clean_fragment" if not pieces else "contaminated_too_many_pieces"
        stats["characters_removed"] += len(text) - sum(len(p) for p in pieces)
        return [{**row, "id": f"{row['id']}-{k}", "text": p} for k, p in enumerate(pieces)], None

    return filter_documents("decontaminate", shard, output, cfg.params(), decide, [shard, *cfg.eval_files], stats)


def summary(selected: dict, manifests: list[dict]) -> dict:
    """What the decontamination did: n-grams of the evaluation sets, seen in training, used; documents
    touched and characters removed by the cuts."""
    return {**{k: selected[k] for k in ("eval_ngrams", "seen_in_training", "used")},
            "documents_touched": sum(m["documents_touched"] for m in manifests),
            "characters_removed": sum(m["characters_removed"] for m in manifests)}


def select_from_counts(count_files: list[Path], cfg: DecontaminateConfig, path: Path) -> dict:
    """Add up the shards' pass-1 counts and write the n-grams pass 2 cuts (with how many there were of
    each kind) to `path`; returns that record."""
    ngrams = eval_ngrams(cfg.eval_files, cfg)
    counts = add_counts(count_files)
    chosen = EvalNgrams.build(g for g, c in counts.items() if c < cfg.key_threshold)
    record = {"eval_ngrams": len(ngrams.grams), "seen_in_training": len(counts),
              "used": len(chosen.grams), "ngrams": sorted(" ".join(g) for g in chosen.grams)}
    write_json(record, path)
    return record


def read_selected(path: Path) -> EvalNgrams:
    record = read_json_record(path, "select the n-grams again")
    if record is None:
        raise TextmillError(f"{path} is missing or damaged; select the n-grams again")
    return EvalNgrams.build(tuple(g.split(" ")) for g in record["ngrams"])
