"""GPT training data from Megatron `.bin/.idx` datasets: split, sample index, shuffle, blend.

Megatron's GPTDataset (docs/REFERENCE.md section 3), index for index:
- `--split 969,30,1` cuts the sequences of each dataset into contiguous train/valid/test ranges;
- a split is repeated for as many epochs as `num_samples * seq_len + 1` tokens need; the document order of
  all epochs is shuffled with `RandomState(seed)` (a short last epoch is shuffled on its own, so it is never
  mixed into the full ones);
- sample i is the seq_len + 1 tokens starting at token i * seq_len of that document stream, so samples
  cross document boundaries and consecutive samples share one token (input and shifted label);
- samples are visited in a shuffled order drawn from the same random stream.
Megatron walks the documents in C++; here the sample starts come from one `searchsorted` over the
cumulative document lengths, so a billion tokens index in about a second. The indices are cached as .npy
files beside the data, keyed by everything they depend on, and reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textmill.errors import TextmillError
from textmill.io.files import file_fingerprint, report_damage, write_json
from textmill.megatron.indexed import IndexedDataset
from textmill.trainer.blend import blending_indices, normalize, samples_per_dataset

SPLITS = ("train", "valid", "test")
_SEPARATE_LAST_EPOCH = 0.80  # Megatron's hard-coded threshold


_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def parse_split(split: str) -> list[tuple[float, float]]:
    """'969,30,1' -> [(0, .969), (.969, .999), (.999, 1)] (Megatron HEAD: pad to three, normalise)."""
    pieces = [piece.strip() for piece in re.split(r"[,/]", split)]  # Megatron takes either separator
    if not all(_DECIMAL.fullmatch(piece) for piece in pieces):
        raise TextmillError(f"--split must be up to three non-negative numbers, e.g. 969,30,1; got {split!r}")
    values = [float(piece) for piece in pieces]
    if len(values) > 3 or sum(values) <= 0:
        raise TextmillError(f"--split must be up to three non-negative numbers, e.g. 969,30,1; got {split!r}")
    values = [v / sum(values) for v in values + [0.0] * (3 - len(values))]
    bounds = np.concatenate([[0.0], np.cumsum(values)])
    return [(float(bounds[i]), float(bounds[i + 1])) for i in range(3)]


def split_ranges(num_sequences: int, split: str) -> list[np.ndarray | None]:
    """The sequence indices of train/valid/test; None for an empty split."""
    out = []
    for lo, hi in parse_split(split):
        start, stop = int(round(lo * num_sequences)), int(round(hi * num_sequences))
        out.append(np.arange(start, stop, dtype=np.int32) if stop > start else None)
    return out


def num_epochs_for(tokens_per_epoch: int, num_samples: int, seq_len: int) -> int:
    """The fewest epochs holding num_samples samples of seq_len + 1 tokens (consecutive ones share one)."""
    return max(1, -(-(num_samples * seq_len + 1) // tokens_per_epoch))


def build_document_index(documents: np.ndarray, num_epochs: int, rng: np.random.RandomState, separate_last: bool) -> np.ndarray:
    if separate_last and num_epochs > 1:
        first = build_document_index(documents, num_epochs - 1, rng, False)
        return np.concatenate([first, build_document_index(documents, 1, rng, False)])
    doc_idx = np.tile(documents.astype(np.int32), num_epochs)
    rng.shuffle(doc_idx)
    return doc_idx


def build_sample_index(sizes: np.ndarray, doc_idx: np.ndarray, seq_len: int, tokens_total: int) -> np.ndarray:
    """[n + 1, 2] rows of (position in doc_idx, offset in that document) where each sample starts; the
    last row ends the last sample. Equal to megatron-core's `build_sample_idx` (drop_last, extra token)."""
    num_samples = (tokens_total - 1) // seq_len
    lengths = sizes[doc_idx].astype(np.int64)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    positions = np.arange(num_samples + 1, dtype=np.int64) * seq_len
    # The last document starting at or before each position; empty documents are stepped over.
    docs = np.searchsorted(starts, positions, side="right") - 1
    offsets = positions - starts[docs]
    docs[0], offsets[0] = 0, 0  # Megatron starts at (0, 0) even before an empty first document
    dtype = np.int32 if max(len(doc_idx), int(sizes.max(initial=0))) <= np.iinfo(np.int32).max else np.int64
    return np.stack([docs, offsets], axis=1).astype(dtype)


def build_shuffle_index(num_samples: int, total: int, rng: np.random.RandomState) -> np.ndarray:
    dtype = np.int64 if total >= np.iinfo(np.uint32).max - 1 else np.uint32
    first = np.arange(num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total:
        return first
    last = np.arange(num_samples, total, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate([first, last])


def build_indices(sizes: np.ndarray, documents: np.ndarray, seq_len: int, num_samples: int, seed: int):
    """(doc_idx, sample_idx, shuffle_idx) exactly as Megatron's GPTDataset builds them."""
    tokens_per_epoch = int(sizes[documents].sum(dtype=np.int64))
    if tokens_per_epoch <= 1:
        raise TextmillError("a data split has no tokens to train on")
    epochs = num_epochs_for(tokens_per_epoch, num_samples, seq_len)
    separate_last = False
    if epochs > 1:
        per_epoch = (tokens_per_epoch - 1) // seq_len
        before_last = ((epochs - 1) * tokens_per_epoch - 1) // seq_len
        separate_last = num_samples - before_last < int(_SEPARATE_LAST_EPOCH * per_epoch)
    rng = np.random.RandomState(seed)
    doc_idx = build_document_index(documents, epochs, rng, separate_last)
    sample_idx = build_sample_index(sizes, doc_idx, seq_len, epochs * tokens_per_epoch)
    total = sample_idx.shape[0] - 1
    first = ((epochs - 1) * tokens_per_epoch - 1) // seq_len if separate_last else total
    return doc_idx, sample_idx, build_shuffle_index(first, total, rng)


class GPTDataset:
    """Samples of seq_len + 1 tokens from one split of one indexed dataset; `ds[i]` is a numpy array."""

    def __init__(self, data: IndexedDataset, split_name: str, documents: np.ndarray, seq_len: int,
                 num_samples: int, seed: int, split: str, cache_dir: Path | None = None):
        self.data, self.seq_len = data, seq_len
        description = {
            "class": "GPTDataset", "index": file_fingerprint(Path(f"{data.prefix}.idx"))["sha256"],
            "split_name": split_name, "split": split, "documents": [int(documents[0]), int(documents[-1]) + 1],
            "seq_len": seq_len, "num_samples": num_samples, "seed": seed,
        }
        self.doc_idx, self.sample_idx, self.shuffle_idx = self._cached(description, cache_dir, documents, num_samples, seed)

    def _cached(self, description: dict, cache_dir: Path | None, documents, num_samples, seed):
        if cache_dir is None:
            return build_indices(self.data.lengths, documents, self.seq_len, num_samples, seed)
        key = hashlib.md5(json.dumps(description, sort_keys=True).encode()).hexdigest()
        base = cache_dir / f"{key}-{description['split_name']}"
        names = ("doc_idx", "sample_idx", "shuffle_idx")
        marker = Path(f"{base}.json")
        load = lambda: tuple(np.load(f"{base}-{name}.npy", mmap_mode="r", allow_pickle=False) for name in names)  # noqa: E731
        if marker.exists():
            try:
                return load()
            except (OSError, ValueError) as exc:  # a cache file cut short or damaged: derived, so built again
                report_damage(Path(f"{base}-*.npy"), str(exc).splitlines()[0][:120], "the sample index is built again")
                marker.unlink()
        arrays = build_indices(self.data.lengths, documents, self.seq_len, num_samples, seed)
        cache_dir.mkdir(parents=True, exist_ok=True)
        for name, arr in zip(names, arrays, strict=True):
            tmp = Path(f"{base}-{name}.tmp-{os.getpid()}.npy")
            np.save(tmp, arr, allow_pickle=False)
            os.replace(tmp, f"{base}-{name}.npy")
        write_json(description, marker)  # last: the cache entry is complete
        return load()

    def __len__(self) -> int:
        return len(self.shuffle_idx)

    def __getitem__(self, i: int) -> np.ndarray:
        j = int(self.shuffle_idx[i])
        (d0, o0), (d1, o1) = self.sample_idx[j], self.sample_idx[j + 1]
        if d0 == d1:
            return np.array(self.data[int(self.doc_idx[d0])][o0 : o1 + 1], dtype=np.int64)
        pieces = [self.data[int(self.doc_idx[d0])][o0:]]
        pieces += [self.data[int(self.doc_idx[d])] for d in range(d0 + 1, d1)]
        pieces.append(self.data[int(self.doc_idx[d1])][: o1 + 1])
        return np.concatenate(pieces).astype(np.int64)


class BlendedDataset:
    """Samples interleaved from several datasets by weight, as Megatron's BlendedDataset does."""

    def __init__(self, datasets: list[GPTDataset], weights: list[float], size: int):
        self.datasets = datasets
        self.dataset_index, self.sample_index = blending_indices(weights, size)

    def __len__(self) -> int:
        return len(self.dataset_index)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.datasets[int(self.dataset_index[i])][int(self.sample_index[i])]


@dataclass
class DataConfig:
    prefixes: list[str]
    weights: list[float] | None = None  # None: each dataset weighs its split's token count
    split: str = "969,30,1"
    seq_len: int = 1024
    seed: int = 1234
    vocab_size: int | None = None  # unpadded; tokens must be below it


def open_datasets(data_config: DataConfig) -> list[IndexedDataset]:
    datasets = [IndexedDataset(p) for p in data_config.prefixes]
    if data_config.vocab_size is not None:
        for ds in datasets:
            top = int(ds._bin.view(ds.dtype).max()) if len(ds) else 0
            if top >= data_config.vocab_size:
                raise TextmillError(f"{ds.prefix}: token id {top} does not fit the {data_config.vocab_size}-token vocabulary; "
                                    "was it tokenized with another vocabulary?")
    return datasets


def build_splits(data_config: DataConfig, num_samples: list[int], cache: bool = True) -> list[GPTDataset | BlendedDataset | None]:
    """train/valid/test datasets holding at least num_samples[i] samples each (None when a split is empty)."""
    datasets = open_datasets(data_config)
    ranges = [split_ranges(len(ds), data_config.split) for ds in datasets]
    out = []
    for s, name in enumerate(SPLITS):
        if num_samples[s] <= 0 or any(r[s] is None for r in ranges):
            out.append(None)
            continue
        cache_dirs = [Path(ds.prefix).parent / "index-cache" if cache else None for ds in datasets]
        if len(datasets) == 1:
            out.append(GPTDataset(datasets[0], name, ranges[0][s], data_config.seq_len, num_samples[s], data_config.seed,
                                  data_config.split, cache_dirs[0]))
            continue
        weights = data_config.weights or normalize([int(ds.lengths[r[s]].sum(dtype=np.int64))
                                                    for ds, r in zip(datasets, ranges, strict=True)])
        sizes = samples_per_dataset(weights, num_samples[s])
        parts = [GPTDataset(ds, name, r[s], data_config.seq_len, n, data_config.seed, data_config.split, c)
                 for ds, r, n, c in zip(datasets, ranges, sizes, cache_dirs, strict=True)]
        out.append(BlendedDataset(parts, weights, num_samples[s]))
    return out
