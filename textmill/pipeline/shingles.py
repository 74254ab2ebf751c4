"""Shingles of documents for dedup, and their crc32 hashes computed many documents at a time on arrays.

A shingle is a lower-cased word n-gram (the words joined by single spaces) or a character n-gram of the text
with its whitespace runs made single spaces, as UTF-8 bytes (`shingles`, the definition); a text shorter
than one shingle is its own single shingle. MinHash needs crc32(shingle) for each of them: `ShingleHashes`
computes them without making one bytes object, or one Python call, per shingle.

How: crc32 runs a 32-bit register over the bytes. After bytes A then B the register is
shift(register after A, |B|) XOR lin(B), where lin(B) is the register B leaves when it starts from zero, and
shift(r, n) moves r over n zero bytes, which is linear in r: four lookups in 256-entry tables made once per n.
Each distinct unit (word or character) is looked up once in a vocabulary that holds its register from crc32's
start (a shingle's first unit) and lin of the separator and it (a later unit); a shingle's register is then
Horner's rule over its units, for every shingle position of a batch at once, and crc32 is that register
inverted. tests/unit/pipeline/test_shingles.py compares every value with zlib.crc32 of the shingle.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import zlib
from typing import Iterator

import numpy as np

from textmill.pipeline.word_ngrams import spans, word_runs

_TEXT_PIECE = 1 << 16  # characters of a text split into units at a time: a long document costs a piece
_VOCABULARY = 1 << 18  # distinct units remembered across batches before the vocabulary starts again
_M32 = 0xFFFFFFFF
_SPACE = re.compile(r"\s")
_NON_WORD = re.compile(r"\W")


def shingles(text: str, size: int, unit: str) -> set[bytes]:
    """The set of shingles of a text, held at once (the definition that `ShingleHashes` hashes)."""
    units = word_runs(text.lower()) if unit == "word" else list(" ".join(text.lower().split()))
    separator = " " if unit == "word" else ""
    return {separator.join(units[i : i + size]).encode() for i in range(max(len(units) - size + 1, 1))}


def _pieces(text: str, boundary: re.Pattern) -> Iterator[str]:
    """The text in pieces of about _TEXT_PIECE characters, each cut where `boundary` matches (so that no
    word, or no run of non-space, is cut in two)."""
    start = 0
    while start < len(text):
        cut = boundary.search(text, start + _TEXT_PIECE)
        end = cut.start() if cut else len(text)
        yield text[start:end]
        start = end


def _word_pieces(text: str) -> Iterator[list[str]]:
    """The lower-cased words of the text, a piece of it at a time (where no word is cut in two); a text of one piece
    is split once for its shingles and its words hash both (_lower_words)."""
    if len(text) <= _TEXT_PIECE:
        yield _lower_words(text)
    else:
        for piece in _pieces(text.lower(), _NON_WORD):
            yield word_runs(piece)


@functools.lru_cache(maxsize=1)
def _lower_words(text: str) -> list[str]:
    return word_runs(text.lower())  # shared by its two readers: not to be changed


def unit_runs(text: str, size: int, unit: str) -> Iterator[list[str]]:
    """The text's units (lower-cased words, or characters of its single-spaced form) in runs of at least
    `size`, a piece of the text at a time: consecutive runs overlap by size - 1 units, so the shingles of the
    runs are the text's. A text of fewer than `size` units is one shorter run: its one shingle is all of it."""
    carried: list[str] = []
    made = False
    for piece in _word_pieces(text) if unit == "word" else _pieces(text.lower(), _SPACE):
        if unit == "word":
            units = carried + piece
        else:  # pieces are cut at whitespace, so each piece's split is the text's
            spaced = " ".join(piece.split())
            if not spaced:
                continue
            units = carried + ([" "] if made or carried else []) + list(spaced)
        if len(units) >= size:
            made = True
            yield units
        carried = units[max(len(units) - size + 1, 0) :] if size > 1 else []
    if not made:
        yield carried


def words_hash(text: str) -> bytes:
    """128 bits of blake2b over a text's lower-cased words, space-joined (the words its word shingles are
    made of): the same for texts that differ only in case, punctuation or whitespace."""
    digest = hashlib.blake2b(digest_size=16)
    separator = ""  # a piece of the text at a time: the memory of a piece, whatever the text's length
    for words in _word_pieces(text):
        if words:
            digest.update((separator + " ".join(words)).encode())
            separator = " "
    return digest.digest()


def _shift(register: int, n: int) -> int:
    """The crc32 register moved over n zero bytes (zlib takes and gives the register inverted)."""
    return ~zlib.crc32(bytes(n), ~register & _M32) & _M32


_BYTE_BITS = (np.arange(256)[:, None] >> np.arange(8)) & 1  # bit j of each byte value


def _shift_table(n: int) -> np.ndarray:
    """shift(r, n) for any r as 4 x 256 entries: the XOR of table[p * 256 + byte p of r] for p = 0..3."""
    images = np.array([_shift(1 << j, n) for j in range(32)], np.uint32).reshape(4, 8)
    return np.bitwise_xor.reduce(np.where(_BYTE_BITS[None], images[:, None, :], np.uint32(0)), axis=2).reshape(-1)


class ShingleHashes:
    """crc32 of every shingle of runs of units (see the module's docstring), the units separated by
    `separator` in a shingle. Holds the vocabulary of units seen, and one shift table per byte length: one
    per process and separator (`shingle_hashes`), so that shard after shard reuses what earlier ones learnt."""

    def __init__(self, separator: str):
        self.separator = separator.encode()
        self.tables: dict[int, int] = {}  # byte length -> its table's offset in flat_tables
        self.table_rows: list[np.ndarray] = []
        self.flat_tables = np.zeros(0, np.uint32)
        self._forget()

    def _forget(self) -> None:
        self.index: dict[str, int] = {}
        # each unit's register from crc32's start, lin of the separator and it, its shift table's offset
        self.columns: tuple[list[int], list[int], list[int]] = ([], [], [])
        self.arrays: tuple[np.ndarray, ...] = ()

    def _learn(self, unit: str) -> None:
        data = unit.encode()
        later = self.separator + data
        length = len(later)
        if length not in self.tables:
            self.tables[length] = 1024 * len(self.table_rows)
            self.table_rows.append(_shift_table(length))
        self.index[unit] = len(self.columns[0])
        for column, value in zip(self.columns, (~zlib.crc32(data) & _M32, ~zlib.crc32(later, _M32) & _M32,
                                                self.tables[length]), strict=True):
            column.append(value)

    def ids(self, units: list[str]) -> np.ndarray:
        """Each unit's place in the vocabulary, learning the new ones."""
        if len(self.index) > _VOCABULARY:
            self._forget()
        missing = set(units).difference(self.index)
        if missing:
            for unit in missing:
                self._learn(unit)
            self.arrays = tuple(np.array(column, dtype) for column, dtype in
                                zip(self.columns, (np.uint32, np.uint32, np.int64), strict=True))
            if len(self.flat_tables) < 1024 * len(self.table_rows):  # once a batch, not once a new length
                self.flat_tables = np.concatenate(self.table_rows)
        return np.fromiter(map(self.index.__getitem__, units), np.int64, len(units))

    def of_runs(self, runs: list[list[str]], size: int) -> np.ndarray:
        """crc32 of every shingle of each run (each at least `size` units long), run after run."""
        ids = self.ids(list(itertools.chain.from_iterable(runs)))
        first, later, offset = self.arrays
        positions = len(ids) - size + 1
        register = first[ids[:positions]]
        tables = self.flat_tables
        for k in range(1, size):
            unit = ids[k : k + positions]
            base = offset[unit]
            register = (tables[base + (register & 255)] ^ tables[base + (256 + ((register >> 8) & 255))]
                        ^ tables[base + (512 + ((register >> 16) & 255))] ^ tables[base + (768 + (register >> 24))]
                        ^ later[unit])
        # the positions whose shingle lies in one run: from each run's start, its length - size + 1 of them
        lengths = np.fromiter(map(len, runs), np.int64, len(runs))
        return ~register[spans(np.cumsum(lengths) - lengths, lengths - size + 1)]


@functools.lru_cache(maxsize=2)
def shingle_hashes(separator: str) -> ShingleHashes:
    return ShingleHashes(separator)
