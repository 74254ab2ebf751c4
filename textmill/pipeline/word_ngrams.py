"""A document's words as integer ids, and the n-gram counts the repetition rules ask of them, computed on
arrays (numpy) instead of one joined string per n-gram position.

Each word gets the position of its first occurrence as its id, so equal words have equal ids. An n-gram's key is
exact: its words' ids packed into one integer, so equal word tuples, and only they, share a key. Gopher's duplicate
n-grams compare the words joined *without* spaces, where different tuples can spell the same string ("ab c", "a bc"):
there a 64-bit polynomial hash of the spelled characters groups the positions, and a repeat is confirmed by comparing
the strings, so the answer is the one the string definition gives, exactly.
"""

from __future__ import annotations

import bisect
import itertools
import re
from functools import lru_cache

import numpy as np

WORD_RUN = re.compile(r"\w+")
# In ASCII text, every character \w does not match (all but letters, digits and "_") made a space.
_ASCII_NON_WORD = {i: " " for i in range(128) if not (chr(i).isalnum() or chr(i) == "_")}


def word_runs(text: str) -> list[str]:
    """re.findall(r"\\w+", text); for ASCII text by str.translate and str.split (in C), about 2.5x faster."""
    if text.isascii():
        return text.translate(_ASCII_NON_WORD).split()
    return WORD_RUN.findall(text)


def spans(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions start .. start + count - 1 of every (start, count), one array (numpy, no loop)."""
    return np.arange(counts.sum()) + np.repeat(starts - (np.cumsum(counts) - counts), counts)


_BASE = 0x100000001B3  # odd: multiplying by a power of it is a bijection of 64-bit values
_MASK = (1 << 64) - 1


@lru_cache(maxsize=1 << 16)
def spelled_hash(word: str) -> tuple[int, int]:
    """(the polynomial hash of the word's characters, _BASE ** its length), both mod 2**64: the hash of a
    concatenation is h1 * p2 + h2."""
    h = 0
    for c in word:
        h = (h * _BASE + ord(c)) & _MASK
    return h, pow(_BASE, len(word), 1 << 64)


class WordIds:
    """The words of one document, with their ids and lengths as arrays. The rules ask for n-grams in rising n,
    so only the latest n-gram arrays are kept (a document of millions of words holds a few arrays at once)."""

    def __init__(self, words: list[str]):
        self.words = words
        first: dict[str, int] = {}
        # map() and dict.setdefault run in C: a word's id is the counter's value where it first occurs
        self.ids = np.fromiter(map(first.setdefault, words, itertools.count()), np.int64, len(words))
        self.first = first  # each distinct word -> its id
        self.lengths = np.fromiter(map(len, words), np.int32, len(words))
        self._keys: tuple[int, np.ndarray] = (1, self.ids)
        self._spelled: tuple[int, np.ndarray] | None = None

    def distinct_counts(self) -> tuple[list[str], np.ndarray]:
        """The distinct words (in order of first occurrence) and how often each occurs."""
        counts = np.bincount(self.ids, minlength=len(self.words))
        return list(self.first), counts[np.fromiter(self.first.values(), np.int64, len(self.first))]

    def gram_keys(self, n: int) -> np.ndarray:
        """A key for the n-gram at each position 0 .. len - n, equal exactly when the word tuples are: the ids
        packed into one int64 while they fit (len ** n < 2 ** 63), else the (n-1)-grams' keys renumbered
        (np.unique) and paired with the next word's id."""
        have, keys = self._keys if self._keys[0] <= n else (1, self.ids)
        size = len(self.words)
        for m in range(have + 1, n + 1):
            if size ** m >= 1 << 63:
                keys = np.unique(keys, return_inverse=True)[1].astype(np.int64)
            keys = keys[:-1] * size + self.ids[m - 1 :]
        self._keys = (n, keys)
        return keys

    def spelled_chars(self, start: int, n: int) -> int:
        """Characters of the n words from `start`, without separators."""
        return int(self.lengths[start : start + n].sum())

    def top_gram_chars(self, n: int) -> int:
        """Characters of the most frequent n-gram joined by spaces, times its count; of equally frequent
        ones the first to occur (as collections.Counter.most_common takes it)."""
        if len(self.words) < n:
            return 0
        _, first, counts = np.unique(self.gram_keys(n), return_index=True, return_counts=True)
        most = counts.max()
        at = int(first[counts == most].min())
        return (self.spelled_chars(at, n) + n - 1) * int(most)

    def spelled_hashes(self, n: int) -> np.ndarray:
        """The polynomial hash of the n words spelled together (no separators), at each position: the
        (n-1)-words' hash times the next word's power, plus its hash (each word's looked up by its id)."""
        if self._spelled is None or self._spelled[0] > n:
            pairs = np.array(list(map(spelled_hash, self.first)), np.uint64).reshape(-1, 2)
            at = np.fromiter(self.first.values(), np.int64, len(self.first))
            self._word_hash, self._word_power = np.zeros(len(self.words), np.uint64), np.zeros(len(self.words), np.uint64)
            self._word_hash[at], self._word_power[at] = pairs[:, 0], pairs[:, 1]
            self._spelled = (1, self._word_hash[self.ids])
        have, spelled = self._spelled
        for m in range(have + 1, n + 1):
            following = self.ids[m - 1 :]
            spelled = spelled[:-1] * self._word_power[following] + self._word_hash[following]
        self._spelled = (n, spelled)
        return spelled

    def duplicate_spelled_chars(self, n: int, enough: float = float("inf")) -> int:
        """Characters of n-grams (words joined without spaces) that repeat an earlier one, read left to
        right; after a repeat the reading goes on past it (the n - 1 positions inside are not read, nor
        remembered), so no character counts twice. The count stops once it is over `enough` (a rule's
        threshold: a document of millions of repeats is decided after the first few)."""
        if len(self.words) < n:
            return 0
        spelled = self.spelled_hashes(n)
        ordered = np.sort(spelled)
        if not (ordered[1:] == ordered[:-1]).any():  # most documents: no n-gram spelled twice
            return 0
        del ordered
        _, first, group = np.unique(spelled, return_index=True, return_inverse=True)
        candidates = np.flatnonzero(first[group] != np.arange(len(spelled)))  # a hash seen before
        repeats: list[int] = []  # positions read as repeats; each hides the n - 1 positions after it

        def read(position: int) -> bool:
            i = bisect.bisect_right(repeats, position) - 1
            return i < 0 or position == repeats[i] or position >= repeats[i] + n

        def spelled_at(position: int) -> str:
            return "".join(self.words[position : position + n])

        occurrences: dict[int, list[int]] = {}  # hash group -> its positions so far
        chars = 0
        for start in range(0, len(candidates), 1 << 16):  # a block of positions at a time as Python ints
            for j in candidates[start : start + (1 << 16)].tolist():
                earlier = occurrences.setdefault(int(group[j]), [int(first[group[j]])])
                if read(j):
                    text = spelled_at(j)
                    if any(read(k) and spelled_at(k) == text for k in earlier):
                        repeats.append(j)
                        chars += len(text)
                        if chars > enough:
                            return chars
                earlier.append(j)
        return chars
