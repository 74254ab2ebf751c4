"""Shingles and word hashes of a document for dedup, made a piece of the text at a time: a document of
tens of MB costs a piece, not every shingle at once (the pieces give exactly the shingles and hash of the
whole text, tests/unit/pipeline/test_dedup.py)."""

from __future__ import annotations

import hashlib
import re
from typing import Iterator

from textmill.pipeline.word_ngrams import word_runs

_HASH_CHUNK = 8192  # shingles hashed at once: bounds the (shingles x num_perm) matrix
_SEEN_SHINGLES = 1 << 18  # distinct shingles a document's repeats are skipped against (about 25 MB at most)
_TEXT_PIECE = 1 << 16  # characters of normalised text cut into character shingles at a time
_SPACE = re.compile(r"\s")
_NON_WORD = re.compile(r"\W")


def shingles(text: str, size: int, unit: str) -> set[bytes]:
    """The set of shingles of a text: lower-cased word n-grams or character n-grams, as UTF-8 bytes.
    A text shorter than one shingle is its own single shingle, so it still gets a signature."""
    return {gram for chunk in shingle_chunks(text, size, unit) for gram in chunk}


def shingle_chunks(text: str, size: int, unit: str) -> Iterator[list[bytes]]:
    """The shingles of a text (as `shingles` defines them) in lists of at most _HASH_CHUNK, made a piece of
    the text at a time, so that a document of tens of MB costs a piece, not every shingle at once. A shingle
    comes once while the document has fewer than _SEEN_SHINGLES distinct ones, and may come again after
    (MinHash keeps a minimum: a repeat changes nothing but the time)."""
    earlier: list[set[bytes]] = []  # the distinct shingles of earlier pieces, up to _SEEN_SHINGLES
    held = 0
    for fresh in (_word_grams if unit == "word" else _char_grams)(text.lower(), size):
        if earlier:
            fresh.difference_update(*earlier)
        if held < _SEEN_SHINGLES:
            earlier.append(fresh)
            held += len(fresh)
        batch = list(fresh)
        for start in range(0, len(batch), _HASH_CHUNK):
            yield batch[start : start + _HASH_CHUNK]


def _pieces(text: str, boundary: re.Pattern) -> Iterator[str]:
    """The text in pieces of about _TEXT_PIECE characters, each cut where `boundary` matches (so that no
    word, or no run of non-space, is cut in two)."""
    start = 0
    while start < len(text):
        cut = boundary.search(text, start + _TEXT_PIECE)
        end = cut.start() if cut else len(text)
        yield text[start:end]
        start = end


def _word_grams(text: str, size: int) -> Iterator[set[bytes]]:
    """Word n-grams, a piece's at a time: the last size - 1 words of a piece start the next one's."""
    carried: list[str] = []
    made = False
    for piece in _pieces(text, _NON_WORD):
        words = carried + word_runs(piece)
        if len(words) >= size:
            made = True
            yield {" ".join(words[i : i + size]).encode() for i in range(len(words) - size + 1)}
        carried = words[max(len(words) - size + 1, 0) :] if size > 1 else []
    if not made:
        yield {" ".join(carried).encode()}


def _char_grams(text: str, size: int) -> Iterator[set[bytes]]:
    """Character n-grams of " ".join(text.split()), a piece's at a time (pieces are cut at whitespace, so
    each piece's split is the text's)."""
    tail, made = "", False
    for piece in _pieces(text, _SPACE):
        spaced = " ".join(piece.split())
        if not spaced:
            continue
        held = f"{tail} {spaced}" if made or tail else spaced
        if len(held) >= size:
            made = True
            yield {held[i : i + size].encode() for i in range(len(held) - size + 1)}
        tail = held[max(len(held) - size + 1, 0) :] if size > 1 else ""
    if not made:
        yield {tail.encode()}


def words_hash(text: str) -> bytes:
    """128 bits of blake2b over a text's lower-cased words, space-joined (the words its word shingles are
    made of): the same for texts that differ only in case, punctuation or whitespace."""
    digest = hashlib.blake2b(digest_size=16)
    separator = ""  # a piece of the text at a time: the memory of a piece, whatever the text's length
    for piece in _pieces(text.lower(), _NON_WORD):
        words = word_runs(piece)
        if words:
            digest.update((separator + " ".join(words)).encode())
            separator = " "
    return digest.digest()
