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
from operator import methodcaller
from pathlib import Path

import numpy as np
import regex

from textmill.pipeline.stage import Verdict, filter_documents
from textmill.pipeline.stage_configs import QualityConfig
from textmill.pipeline.word_ngrams import WordIds
from textmill.pipeline.words import count_sentences, split_words

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))  # Gopher's
_SENTENCE_END = regex.compile(r"\p{Sentence_Terminal}$")
_WORD = re.compile(r"\S+")  # a word as str.split() cuts it
_IS_BULLET = methodcaller("startswith", ("•", "-"))
_IS_ELLIPSIS = methodcaller("endswith", ("...", "…"))
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
C4_LINE_ENDS = (".", "?", "!", '"', "'")
POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")

# The rules hold a document's lines or paragraphs as a list (as many characters as the text, and the distinct
# ones to find repeats) and count over them in C (map, set); C4's rules count a line's words without listing
# them: a 30 MB line cost 700 MB as a list of words.


@lru_cache(maxsize=1 << 16)
def is_symbol(word: str) -> bool:
    """Whether a word is punctuation and symbols only (Gopher counts only the other words)."""
    return all(unicodedata.category(c)[0] in "PS" or unicodedata.category(c) == "Cc" for c in word)


@lru_cache(maxsize=1 << 16)
def has_letter(word: str) -> bool:
    return any(c.isalpha() for c in word)


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
    lines = text.splitlines()
    if cfg.max_bullet_lines and sum(map(_IS_BULLET, map(str.lstrip, lines))) / len(lines) > cfg.max_bullet_lines:
        return "bullet_lines"
    if cfg.max_ellipsis_lines and sum(map(_IS_ELLIPSIS, map(str.rstrip, lines))) / len(lines) > cfg.max_ellipsis_lines:
        return "ellipsis_lines"
    lettered = int(counts[np.fromiter(map(has_letter, distinct), bool, len(distinct))].sum())
    if cfg.min_alphabetic_words and lettered / total < cfg.min_alphabetic_words:
        return "few_alphabetic_words"
    if cfg.min_stop_words and len(STOP_WORDS.intersection(words.first)) < cfg.min_stop_words:
        return "few_stop_words"
    return None


def repeated(items: list[str]) -> tuple[int, int, int]:
    """(how many items there are, how many repeat an earlier one, the characters of those)."""
    distinct = set(items)
    return len(items), len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


def paragraphs_of(text: str) -> list[str]:
    """The paragraphs Gopher's rules count: the stripped text cut at every run of two or more newlines (a regular
    expression's split, which the test compares), by str.split, 5x faster: a run of k newlines leaves k // 2 cuts,
    k % 2 newlines at the start of the next paragraph, and k // 2 - 1 empty pieces, which no paragraph is."""
    stripped = text.strip()
    return [piece.lstrip("\n") for piece in stripped.split("\n\n") if piece] if stripped else [stripped]


def lines_of(text: str) -> list[str]:
    """The lines Gopher's rules count: the text cut at every run of newlines, by str.split: the empty pieces between
    newlines dropped, the first and last kept."""
    pieces = text.split("\n")
    return [pieces[0], *filter(None, pieces[1:-1]), pieces[-1]] if len(pieces) > 1 else pieces


def gopher_repetition(text: str, words: WordIds, cfg: QualityConfig) -> str | None:
    """Gopher's repetition rules: the reason the document fails, or None."""
    paragraphs, number, chars = repeated(paragraphs_of(text))
    if cfg.max_duplicate_paragraphs and number / paragraphs > cfg.max_duplicate_paragraphs:
        return "duplicate_paragraphs"
    if cfg.max_duplicate_paragraph_chars and chars / len(text) > cfg.max_duplicate_paragraph_chars:
        return "duplicate_paragraph_chars"
    lines, number, chars = repeated(lines_of(text))
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
    for line in text.splitlines():
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
    nonblank = list(filter(str.strip, text.split("\n")))
    lines, _, chars = repeated(nonblank)
    if not lines:
        return "empty"
    if sum(map(bool, map(_SENTENCE_END.search, nonblank))) / lines < cfg.min_line_punctuation:
        return "line_punctuation"
    if cfg.max_short_lines and sum(map(cfg.short_line_chars.__ge__, map(len, nonblank))) / lines > cfg.max_short_lines:
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
