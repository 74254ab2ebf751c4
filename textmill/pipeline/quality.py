"""Quality filters of the corpora built after OpenWebText, which relied on Reddit karma for quality:
Gopher's quality and repetition rules (Rae et al. 2021, appendix A), C4's line and page rules (Raffel et
al. 2020, section 2.2) and FineWeb's additions (Penedo et al. 2024, section 3.3). Thresholds are the
papers'; each rule is a reject reason of its own. The rules read as datatrove implements them (the
reference FineWeb was built with), so that a document gets the same verdict here and there: words are
split as pipeline/words.py says, and a threshold of 0 turns its rule off.

C4's line rules change a document: lines without terminal punctuation, with fewer than three words, with a
word over 1,000 characters, or about javascript, cookies and policies are dropped (counted per rule in
the manifest), citation marks are removed, and the page is rejected when fewer than five sentences are
left, or when it holds "lorem ipsum" or a curly bracket.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache
from itertools import count, islice
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import regex

from textmill.pipeline.stage import Verdict, filter_documents
from textmill.pipeline.stage_configs import QualityConfig
from textmill.pipeline.word_ngrams import WordIds
from textmill.pipeline.words import count_sentences, split_words

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))  # Gopher's
_SENTENCE_END = regex.compile(r"\p{Sentence_Terminal}$")
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
_LINE_BREAKS = re.compile(r"\n+")
_NEWLINE = re.compile(r"\n")
_LINE_END = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines() cuts
_WORD = re.compile(r"\S+")  # a word as str.split() cuts it
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
C4_LINE_ENDS = (".", "?", "!", '"', "'")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")

# The rules read a document's lines and paragraphs one at a time, keeping counts and the distinct ones (to
# find repeats), and C4's rules count a line's words without listing them: a 30 MB line cost 700 MB as a list.


@lru_cache(maxsize=1 << 16)
def is_symbol(word: str) -> bool:
    """Whether a word is punctuation and symbols only (Gopher counts only the other words)."""
    return all(unicodedata.category(c)[0] in "PS" or unicodedata.category(c) == "Cc" for c in word)


@lru_cache(maxsize=1 << 16)
def has_letter(word: str) -> bool:
    return any(c.isalpha() for c in word)


def pieces(pattern: re.Pattern, text: str) -> Iterator[str]:
    """pattern.split(text), a piece at a time."""
    start = 0
    for cut in pattern.finditer(text):
        yield text[start : cut.start()]
        start = cut.end()
    yield text[start:]


def text_lines(text: str) -> Iterator[str]:
    """text.splitlines(), a line at a time."""
    start = 0
    for cut in _LINE_END.finditer(text):
        yield text[start : cut.start()]
        start = cut.end()
    if start < len(text):
        yield text[start:]


def gopher_quality(text: str, words: WordIds, cfg: QualityConfig) -> str | None:
    """Gopher's quality rules: the reason the document fails, or None. Words are counted by their distinct
    forms (each form's symbol test and letter test made once)."""
    distinct, counts = words.distinct_counts()
    content = ~np.fromiter(map(is_symbol, distinct), bool, len(distinct))
    content_words = int(counts[content].sum())
    if cfg.min_words and content_words < cfg.min_words:
        return "too_few_words"
    if cfg.max_words and content_words > cfg.max_words:
        return "too_many_words"
    if not content_words:
        return "no_words"
    mean_length = int((np.fromiter(map(len, distinct), np.int64, len(distinct)) * counts)[content].sum()) / content_words
    if cfg.min_mean_word_length and mean_length < cfg.min_mean_word_length:
        return "short_words"
    if cfg.max_mean_word_length and mean_length > cfg.max_mean_word_length:
        return "long_words"
    total = len(words.words)
    if cfg.max_symbol_word_ratio and text.count("#") / total > cfg.max_symbol_word_ratio:
        return "hash_symbols"
    if cfg.max_symbol_word_ratio and (text.count("...") + text.count("…")) / total > cfg.max_symbol_word_ratio:
        return "ellipses"
    lines = bullets = ellipses = 0
    for line in text_lines(text):
        lines += 1
        bullets += line.lstrip().startswith(("•", "-"))
        ellipses += line.rstrip().endswith(("...", "…"))
    if cfg.max_bullet_lines and bullets / lines > cfg.max_bullet_lines:
        return "bullet_lines"
    if cfg.max_ellipsis_lines and ellipses / lines > cfg.max_ellipsis_lines:
        return "ellipsis_lines"
    lettered = int(counts[np.fromiter(map(has_letter, distinct), bool, len(distinct))].sum())
    if cfg.min_alphabetic_words and lettered / total < cfg.min_alphabetic_words:
        return "few_alphabetic_words"
    if cfg.min_stop_words and len(STOP_WORDS.intersection(words.first)) < cfg.min_stop_words:
        return "few_stop_words"
    return None


def repeated(items: Iterable[str]) -> tuple[int, int, int]:
    """(how many items there are, how many repeat an earlier one, the characters of those)."""
    seen, total, number, chars = set(), 0, 0, 0
    for item in items:
        total += 1
        if item in seen:
            number, chars = number + 1, chars + len(item)
        else:
            seen.add(item)
    return total, number, chars


def gopher_repetition(text: str, words: WordIds, cfg: QualityConfig) -> str | None:
    """Gopher's repetition rules: the reason the document fails, or None."""
    paragraphs, number, chars = repeated(pieces(_PARAGRAPH_BREAK, text.strip()))
    if cfg.max_duplicate_paragraphs and number / paragraphs > cfg.max_duplicate_paragraphs:
        return "duplicate_paragraphs"
    if cfg.max_duplicate_paragraph_chars and chars / len(text) > cfg.max_duplicate_paragraph_chars:
        return "duplicate_paragraph_chars"
    lines, number, chars = repeated(pieces(_LINE_BREAKS, text))
    if cfg.max_duplicate_lines and number / lines > cfg.max_duplicate_lines:
        return "duplicate_lines"
    if cfg.max_duplicate_line_chars and chars / len(text) > cfg.max_duplicate_line_chars:
        return "duplicate_line_chars"
    for n, most in zip(count(2), cfg.max_top_ngram_chars):
        if most and words.top_gram_chars(n) / len(text) > most:
            return f"top_{n}gram_chars"
    for n, most in zip(count(5), cfg.max_duplicate_ngram_chars):
        if most and words.duplicate_spelled_chars(n, most * len(text)) / len(text) > most:
            return f"duplicate_{n}gram_chars"
    return None


def c4_lines(text: str, cfg: QualityConfig, terminal_punctuation: bool, dropped: Counter) -> tuple[str, str | None]:
    """C4's rules: (the text with its kept lines, the reason the page fails or None). Dropped lines are
    counted in `dropped` by rule."""
    kept, sentences = [], 0
    too_long = re.compile(rf"\S{{{cfg.c4_max_word_length + 1}}}")
    for line in text_lines(text):
        line = line.strip()
        if cfg.c4_max_word_length and too_long.search(line):
            dropped["too_long_word"] += 1
            continue
        few_words = sum(1 for _ in islice(_WORD.finditer(line), cfg.c4_min_words_per_line)) < cfg.c4_min_words_per_line
        if cfg.c4_remove_citations:
            line = CITATION.sub("", line)
        if terminal_punctuation and (not line.endswith(C4_LINE_ENDS) or line.endswith("...")):
            dropped["no_terminal_punctuation"] += 1
            continue
        if few_words:
            dropped["too_few_words"] += 1
            continue
        lower = line.lower()
        if cfg.c4_lorem_ipsum and "lorem ipsum" in lower:
            return text, "lorem_ipsum"
        if cfg.c4_javascript_lines and "javascript" in lower:
            dropped["javascript"] += 1
            continue
        if cfg.c4_curly_bracket and "{" in line:
            return text, "curly_bracket"
        if cfg.c4_policy_lines and any(phrase in lower for phrase in POLICY_PHRASES):
            dropped["policy"] += 1
            continue
        if cfg.c4_min_sentences:
            sentences += count_sentences(line)
        kept.append(line)
    if sentences < cfg.c4_min_sentences:
        return text, "too_few_sentences"
    return "\n".join(kept).strip(), None


def fineweb(text: str, words: WordIds, cfg: QualityConfig) -> str | None:
    """FineWeb's rules: the reason the document fails, or None."""
    punctuated = short = 0

    def nonblank_lines() -> Iterator[str]:  # counted on the way through repeated(), one pass over the text
        nonlocal punctuated, short
        for line in pieces(_NEWLINE, text):
            if line.strip():
                punctuated += bool(_SENTENCE_END.search(line))
                short += len(line) <= cfg.short_line_chars
                yield line

    lines, _, chars = repeated(nonblank_lines())
    if not lines:
        return "empty"
    if punctuated / lines < cfg.min_line_punctuation:
        return "line_punctuation"
    if cfg.max_short_lines and short / lines > cfg.max_short_lines:
        return "short_lines"
    most = cfg.max_duplicate_line_chars_fineweb
    if most and chars / (len(text) - text.count("\n")) > most:
        return "repeated_line_chars"
    if cfg.max_newlines_per_word and text.count("\n") / len(words.words) > cfg.max_newlines_per_word:
        return "list_like"
    return None


WORD_RULES = {"gopher_quality": gopher_quality, "gopher_repetition": gopher_repetition, "fineweb": fineweb}


def judge(text: str, cfg: QualityConfig, dropped: Counter) -> tuple[str, str | None]:
    """(the document's text after the rules, the reason it fails or None), by the preset's rules in order."""
    words: WordIds | None = None  # of the current text
    for rule in cfg.rules:
        if not text.strip():
            return text, "empty"
        if rule == "c4":
            kept, reason = c4_lines(text, cfg, cfg.c4_terminal_punctuation and cfg.preset != "fineweb", dropped)
            if reason is None and kept != text:
                text, words = kept, None
        else:
            words = WordIds(split_words(text)) if words is None else words
            reason = WORD_RULES[rule](text, words, cfg)
        if reason is not None:
            return text, reason
    return text, None


def quality_shard(shard: Path, output: Path, cfg: QualityConfig, max_document_bytes: int = 0) -> dict:
    """Apply the preset's rules to one document shard into `output`; returns its manifest."""
    stats = {"shortened": 0, "lines_dropped": Counter()}  # the manifest is written with sorted keys

    def decide(row: dict) -> Verdict:
        text, reason = judge(row["text"] or "", cfg, stats["lines_dropped"])
        if reason is None and text != row["text"]:
            stats["shortened"] += 1
            return {**row, "text": text}, None
        return row, reason

    return filter_documents("quality", shard, output, cfg.params(), decide, stats=stats,
                            max_document_bytes=max_document_bytes)
