"""Megatron-LM's mmap indexed dataset: `<prefix>.bin` (token ids, no header) and `<prefix>.idx`.

.idx layout (docs/REFERENCE.md section 1.2), header little-endian, arrays native (little-endian on x86):
    magic b"MMIDIDX\\x00\\x00" | version <Q = 1 | dtype code <B | sequence count <Q | document count <Q
    | int32[S] sequence lengths | int64[S] byte pointers into .bin | int64[D+1] document indices
Document mode: one sequence per document, document indices [0, 1, ..., S].
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Sequence

import numpy as np

from textmill.errors import TextmillError

MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}


def data_file_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.bin")


def index_file_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.idx")


def optimal_dtype(vocab_size: int) -> type:
    """uint16 when the (unpadded) vocabulary has fewer than 65500 entries, else int32, as Megatron does."""
    return np.uint16 if vocab_size < 65500 else np.int32


_CHUNK = 1 << 20  # index entries read or written at once while the .idx is assembled


class SpilledArray:
    """An append-only array of one dtype kept in a scratch file: the index of a merged corpus of any size
    costs one buffer of memory, not 12 bytes (and a Python int) per document."""

    def __init__(self, path: Path, dtype: type):
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        self._file = open(path, "wb")

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self.dtype)
        self._file.write(values.tobytes(order="C"))
        self.count += values.size

    def chunks(self):
        """The values, _CHUNK at a time (after the last extend)."""
        self._file.close()
        with open(self.path, "rb") as f:
            while block := f.read(_CHUNK * self.dtype.itemsize):
                yield np.frombuffer(block, dtype=self.dtype)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class IndexedDatasetWriter:
    """Appends documents to `<prefix>.bin` and writes `<prefix>.idx` on `finalize()`. Both go to
    temporary names first and are renamed into place, the .idx last, so a killed write leaves no pair
    that a reader would take for finished. The index grows in scratch files beside them, so memory does
    not grow with the number of documents."""

    def __init__(self, prefix: str | Path, dtype: type):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF:
            raise TextmillError(f"dtype {self.dtype} has no Megatron dtype code")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = self.scratch("bin")
        self._bin = open(self._bin_tmp, "wb")
        self._lengths = SpilledArray(self.scratch("lengths"), np.int32)
        self._doc_indices = SpilledArray(self.scratch("documents"), np.int64)
        self._doc_indices.extend([0])

    def scratch(self, kind: str) -> Path:
        return self.prefix.with_name(f".{self.prefix.name}.{kind}.tmp-{os.getpid()}")

    def add_document(self, tokens: Sequence[int] | np.ndarray) -> None:
        """One document of one sequence. An empty document adds no sequence, only a repeated document
        index, as Megatron's preprocess_data.py does (`add_document([], [])`)."""
        arr = np.asarray(tokens, dtype=self.dtype)
        self.add_documents(arr, [arr.size])

    def add_documents(self, tokens: np.ndarray, lengths: list[int]) -> None:
        """Several documents at once: `tokens` is their concatenation, `lengths` their sizes."""
        self._bin.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        lengths = np.asarray(lengths, dtype=np.int64)
        sequences = self._lengths.count
        self._lengths.extend(lengths[lengths > 0])
        self._doc_indices.extend(sequences + np.cumsum(lengths > 0))

    def add_index(self, prefix: str | Path) -> None:
        """Append a whole dataset, as Megatron's `add_index` does for tools/merge_datasets.py."""
        other = IndexedDataset(prefix)
        if other.dtype != self.dtype:
            raise TextmillError(f"{prefix}: dtype {other.dtype} differs from {self.dtype}")
        offset = self._lengths.count
        for start in range(0, len(other.lengths), _CHUNK):
            self._lengths.extend(other.lengths[start : start + _CHUNK])
        for start in range(1, len(other.doc_indices), _CHUNK):
            self._doc_indices.extend(other.doc_indices[start : start + _CHUNK] + offset)
        with open(data_file_path(prefix), "rb") as f:
            while block := f.read(1 << 24):
                self._bin.write(block)

    def finalize(self) -> None:
        self._bin.close()
        idx_tmp = self.scratch("idx")
        with open(idx_tmp, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", CODE_OF[self.dtype]))
            f.write(struct.pack("<Q", self._lengths.count))
            f.write(struct.pack("<Q", self._doc_indices.count))
            for chunk in self._lengths.chunks():
                f.write(chunk.tobytes(order="C"))
            offset = 0  # byte pointer of the next sequence in .bin
            for chunk in self._lengths.chunks():
                sizes = chunk.astype(np.int64) * self.dtype.itemsize
                f.write((offset + np.cumsum(sizes) - sizes).tobytes(order="C"))
                offset += int(sizes.sum())
            for chunk in self._doc_indices.chunks():
                f.write(chunk.tobytes(order="C"))
        os.replace(self._bin_tmp, data_file_path(self.prefix))
        os.replace(idx_tmp, index_file_path(self.prefix))
        self._lengths.discard()
        self._doc_indices.discard()

    def abort(self) -> None:
        self._bin.close()
        self._bin_tmp.unlink(missing_ok=True)
        self._lengths.discard()
        self._doc_indices.discard()


class IndexedDataset:
    """Reads a Megatron `.bin/.idx` pair with memory maps; `ds[i]` is sequence i's tokens."""

    def __init__(self, prefix: str | Path):
        self.prefix = Path(prefix)
        idx_path, bin_path = index_file_path(prefix), data_file_path(prefix)
        for path in (idx_path, bin_path):
            if not path.exists():
                raise TextmillError(f"indexed dataset file not found: {path}")
        with open(idx_path, "rb") as f:
            header = f.read(34)
        if len(header) < 34 or header[:9] != MAGIC:
            raise TextmillError(f"{idx_path}: not a Megatron mmap index (bad magic)")
        (version,) = struct.unpack("<Q", header[9:17])
        (code,) = struct.unpack("<B", header[17:18])
        (seq_count,) = struct.unpack("<Q", header[18:26])
        (doc_count,) = struct.unpack("<Q", header[26:34])
        if version != 1 or code not in DTYPE_CODES:
            raise TextmillError(f"{idx_path}: unsupported version {version} or dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        expected = 34 + 12 * seq_count + 8 * doc_count
        if idx_path.stat().st_size < expected:
            raise TextmillError(f"{idx_path}: truncated ({idx_path.stat().st_size} bytes, need {expected})")
        idx = np.memmap(idx_path, mode="r", dtype=np.uint8)
        self.lengths = np.frombuffer(idx, np.int32, seq_count, 34)
        self.pointers = np.frombuffer(idx, np.int64, seq_count, 34 + 4 * seq_count)
        self.doc_indices = np.frombuffer(idx, np.int64, doc_count, 34 + 12 * seq_count)
        need = int(self.pointers[-1]) + int(self.lengths[-1]) * self.dtype.itemsize if seq_count else 0
        if bin_path.stat().st_size != need:
            raise TextmillError(f"{bin_path}: {bin_path.stat().st_size} bytes, the index says {need}")
        self._check_index(idx_path)
        self._bin = np.memmap(bin_path, mode="r", dtype=np.uint8) if need else np.zeros(0, np.uint8)

    def _check_index(self, idx_path: Path) -> None:
        """The sequences lie end to end from byte 0 in order, and the documents cut them in order from 0 to the
        last: an index whose pointers lie (at another document's tokens, or past the file) is refused, not read.
        A pass over three arrays, cheap beside reading the tokens."""
        sizes = self.lengths.astype(np.int64) * self.dtype.itemsize
        if len(self.lengths) and (self.lengths.min() < 0 or self.pointers[0] != 0
                                  or not np.array_equal(self.pointers[1:], self.pointers[:-1] + sizes[:-1])):
            raise TextmillError(f"{idx_path}: its sequence pointers do not follow their lengths end to end")
        docs = self.doc_indices
        if len(docs) and (docs[0] != 0 or docs[-1] != len(self.lengths) or np.any(np.diff(docs) < 0)):
            raise TextmillError(f"{idx_path}: its document indices do not run in order from 0 to its "
                                f"{len(self.lengths)} sequences")

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.frombuffer(self._bin, self.dtype, int(self.lengths[i]), int(self.pointers[i]))

    def document(self, d: int) -> list[np.ndarray]:
        return [self[i] for i in range(int(self.doc_indices[d]), int(self.doc_indices[d + 1]))]

    @property
    def num_documents(self) -> int:
        return len(self.doc_indices) - 1


def merge_datasets(prefixes: list[str | Path], output_prefix: str | Path) -> IndexedDataset:
    """Concatenate datasets in the given order into one (tools/merge_datasets.py sorts by name first)."""
    if not prefixes:
        raise TextmillError("no datasets to merge")
    writer = IndexedDatasetWriter(output_prefix, IndexedDataset(prefixes[0]).dtype)
    try:
        for prefix in prefixes:
            writer.add_index(prefix)
        writer.finalize()
    except BaseException:
        writer.abort()
        raise
    return IndexedDataset(output_prefix)


def merge_directory(directory: Path, output_prefix: Path) -> tuple[IndexedDataset, int]:
    """tools/merge_datasets.py: every `.bin`/`.idx` pair in `directory`, in sorted name order."""
    if not directory.is_dir():
        raise TextmillError(f"--input must be a directory: {directory}")
    stems = sorted({p.stem for p in directory.iterdir() if p.suffix in (".bin", ".idx") and not p.name.startswith(".")})
    for stem in stems:
        for suffix in (".bin", ".idx"):
            if not (directory / f"{stem}{suffix}").exists():
                raise TextmillError(f"{directory / stem}: has no {suffix} file; every dataset needs both")
    return merge_datasets([directory / s for s in stems], output_prefix), len(stems)
