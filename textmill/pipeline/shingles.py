"""Shingles and word hashes of a document for dedup, made a piece of the text at a time: a document of
tens of MB costs a piece, not every shingle at once (the pieces give exactly the shingles and hash of the
whole text, tests/unit/pipeline/test_dedup.py). Word shingles are hashed from their words' hashes, as
arrays: no shingle is spelled out as a string to be hashed."""

from __future__ import annotations

import hashlib
import re
import zlib
from typing import Iterator

import numpy as np

from textmill.pipeline.word_ngrams import word_runs

_HASH_CHUNK = 8192  # shingles hashed at once: bounds the (shingles x num_perm) matrix
_SEEN_SHINGLES = 1 << 18  # distinct shingles a document's repeats are skipped against (about 25 MB at most)
_TEXT_PIECE = 1 << 16  # characters of normalised text cut into character shingles at a time
_SPACE = re.compile(r"\s")
_NON_WORD = re.compile(r"\W")


def shingles(text: str, size: int, unit: str) -> set[bytes]:
    """The set of shingles of a text: lower-cased word n-grams (space-joined) or character n-grams, as UTF-8
    bytes. A text shorter than one shingle is its own single shingle, so it still gets a signature."""
    if unit == "word":
        return {" ".join(words[i : i + size]).encode() for words in _word_windows(text.lower(), size)
                for i in range(max(len(words) - size + 1, 1))}
    return {gram for grams in _char_grams(text.lower(), size) for gram in grams}


def shingle_hashes(text: str, size: int, unit: str) -> Iterator[np.ndarray]:
    """The 32-bit hashes of a text's shingles (as `shingles` defines them) in arrays of at most _HASH_CHUNK,
    made a piece of the text at a time, so that a document of tens of MB costs a piece, not every shingle at
    once: a word n-gram's is gram_hashes', from its words' hashes (no shingle is spelled out); a character
    n-gram's is the crc32 of its bytes. A hash comes once while the document has fewer than _SEEN_SHINGLES
    distinct ones, and may come again after (MinHash keeps a minimum: a repeat changes nothing but the time)."""
    if unit == "word":
        pieces = (gram_hashes(words, size) for words in _word_windows(text.lower(), size))
    else:
        pieces = (np.fromiter(map(zlib.crc32, grams), np.uint32, len(grams)) for grams in _char_grams(text.lower(), size))
    earlier: list[np.ndarray] = []  # the distinct hashes of earlier pieces, up to _SEEN_SHINGLES
    held = 0
    for hashes in pieces:
        hashes = np.sort(hashes)
        fresh = hashes[np.concatenate(([True], hashes[1:] != hashes[:-1]))]
        if earlier:
            fresh = fresh[~np.isin(fresh, np.concatenate(earlier), assume_unique=True)]
        if held < _SEEN_SHINGLES:
            earlier.append(fresh)
            held += len(fresh)
        for start in range(0, len(fresh), _HASH_CHUNK):
            yield fresh[start : start + _HASH_CHUNK]


def word_hash(word: str) -> int:
    """A word's 64-bit hash, the same in every process (Python's hash() of a str is not)."""
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")


class WordHashes(dict):
    """word_hash of every word looked up, computed once (a dict lookup runs in C, a cache wrapper does not);
    emptied when it holds _KNOWN_WORDS."""

    def __missing__(self, word: str) -> int:
        if len(self) >= _KNOWN_WORDS:
            self.clear()
        value = self[word] = word_hash(word)
        return value


_KNOWN_WORDS = 1 << 20
_WORD_HASHES = WordHashes()


_GRAM_MIX = np.uint64(0x9E3779B97F4A7C15)


def gram_hashes(words: list[str], size: int) -> np.ndarray:
    """The 32-bit hash of each n-gram of `words` (of all of them, when fewer than `size`): its words' hashes
    as the coefficients of a polynomial in _GRAM_MIX (mod 2**64), mixed by MurmurHash3's 64-bit finalizer,
    the top 32 bits. A word's hash is computed once (_WORD_HASHES) and the n-grams combined as whole arrays."""
    n = min(size, len(words))
    each = np.fromiter(map(_WORD_HASHES.__getitem__, words), np.uint64, len(words))
    grams = len(words) - n + 1
    combined = each[:grams].copy() if n else np.zeros(1, np.uint64)
    for k in range(1, n):
        combined = combined * _GRAM_MIX + each[k : k + grams]
    return (_fmix64(combined) >> np.uint64(32)).astype(np.uint32)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, a bijection that spreads every input bit over the output."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _pieces(text: str, boundary: re.Pattern) -> Iterator[str]:
    """The text in pieces of about _TEXT_PIECE characters, each cut where `boundary` matches (so that no
    word, or no run of non-space, is cut in two)."""
    start = 0
    while start < len(text):
        cut = boundary.search(text, start + _TEXT_PIECE)
        end = cut.start() if cut else len(text)
        yield text[start:end]
        start = end


def _word_windows(text: str, size: int) -> Iterator[list[str]]:
    """The words of a text a piece at a time, each piece's list led by the last size - 1 words of the one
    before, so that its n-grams are the text's; a text of fewer than `size` words is one list of them."""
    carried: list[str] = []
    made = False
    for piece in _pieces(text, _NON_WORD):
        words = carried + word_runs(piece)
        if len(words) >= size:
            made = True
            yield words
        carried = words[max(len(words) - size + 1, 0) :] if size > 1 else []
    if not made:
        yield carried


def _char_grams(text: str, size: int) -> Iterator[list[bytes]]:
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
            yield [held[i : i + size].encode() for i in range(len(held) - size + 1)]
        tail = held[max(len(held) - size + 1, 0) :] if size > 1 else ""
    if not made:
        yield [tail.encode()]


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
