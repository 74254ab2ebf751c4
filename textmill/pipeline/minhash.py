"""MinHash signatures as datasketch (>= 2.0) computes them with scheme="affine32" and hashfunc=zlib.crc32, value
for value (tests/unit/pipeline/test_dedup.py compares them), for many documents at a time: a worker does not
import datasketch, which imports scipy (0.4 s a process, more than a unit of short documents costs), and a
batch of documents costs a few dozen array operations, not a few per document.
"""

from __future__ import annotations

import functools
import zlib

import numpy as np

from textmill.pipeline.shingles import shingle_hashes, unit_runs
from textmill.pipeline.stage_configs import DedupConfig

_UINT32_MAX = np.uint32(0xFFFFFFFF)
_UNITS_PER_BATCH = 1 << 17  # units held before their shingles are hashed: bounds a batch's arrays
_HASH_CHUNK = 1024  # shingles mapped at once: the (shingles x num_perm) matrix stays in cache (512 KB at 128)


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The odd multipliers `a` and the offsets `b` of num_perm affine maps h -> a*h + b mod 2**32, drawn as
    datasketch draws them from the seed (once per (num_perm, seed), not per document)."""
    draw = np.random.RandomState(seed)
    a = draw.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = draw.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer, a bijection of uint32 that spreads crc32's structure over all bits."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


class MinHasher:
    """Signatures (uint32[num_perm] each) of the texts added, in the order added: for each of num_perm affine
    maps of a text's shingle hashes, the least value (uint32 arithmetic wraps, which is the mod 2**32). The
    shingles are hashed _UNITS_PER_BATCH units at a time, so a batch holds small arrays whatever the texts."""

    def __init__(self, cfg: DedupConfig):
        self.size, self.unit = cfg.shingle_size, cfg.shingle_unit
        self.a, self.b = _permutations(cfg.num_perm, cfg.seed)
        self.hashes = shingle_hashes(" " if self.unit == "word" else "")
        self.signatures: list[np.ndarray] = []
        self.runs: list[list[str]] = []
        self.run_texts: list[int] = []
        self.held = 0

    def add(self, text: str) -> None:
        number = len(self.signatures)
        self.signatures.append(np.full(len(self.a), _UINT32_MAX, np.uint32))
        for run in unit_runs(text, self.size, self.unit):
            if len(run) < self.size:  # the text's one shingle is all of it
                shingle = zlib.crc32(self.hashes.separator.join(u.encode() for u in run))
                self._lower(number, _fmix32(np.array([shingle], np.uint32)))
                continue
            self.runs.append(run)
            self.run_texts.append(number)
            self.held += len(run)
            if self.held >= _UNITS_PER_BATCH:
                self._fold()

    def take(self) -> np.ndarray:
        """The signatures of the texts added since the last take, one row each."""
        self._fold()
        taken = np.stack(self.signatures) if self.signatures else np.zeros((0, len(self.a)), np.uint32)
        self.signatures = []
        return taken

    def _fold(self) -> None:
        """Hash the shingles of the runs held, and lower their texts' signatures by them."""
        if not self.runs:
            return
        hashes = _fmix32(self.hashes.of_runs(self.runs, self.size))
        counts = np.fromiter(map(len, self.runs), np.int64, len(self.runs)) - (self.size - 1)
        ends = np.cumsum(counts).tolist()
        texts = self.run_texts
        start = 0
        for i, text in enumerate(texts):  # a text's runs are consecutive: its shingles are one slice
            if i + 1 == len(texts) or texts[i + 1] != text:
                self._lower(text, hashes[start : ends[i]])
                start = ends[i]
        self.runs, self.run_texts, self.held = [], [], 0

    def _lower(self, text: int, values: np.ndarray) -> None:
        """Lower a text's signature by (mixed) hashes of its shingles."""
        for start in range(0, len(values), _HASH_CHUNK):
            chunk = values[start : start + _HASH_CHUNK]
            np.minimum(self.signatures[text], (chunk[:, None] * self.a + self.b).min(axis=0), out=self.signatures[text])


def signature(text: str, cfg: DedupConfig) -> np.ndarray:
    """The MinHash signature of one text (a batch of one)."""
    hasher = MinHasher(cfg)
    hasher.add(text)
    return hasher.take()[0]
