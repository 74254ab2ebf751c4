"""Weighted blends of several datasets, as Megatron reads `--data-path w1 p1 w2 p2 ...`.

docs/REFERENCE.md section 1.7: weights are normalised by their sum; dataset i is asked for
ceil(ceil(n * w_i) * (1 + surplus)) samples; samples are interleaved greedily and without randomness:
sample k comes from the dataset whose share is furthest behind, argmax_i(w_i * max(k, 1) - used_i),
the lowest index on ties (megatron-core helpers.cpp `build_blending_indices`).
"""

from __future__ import annotations

import math

import numpy as np

from textmill.errors import TextmillError

SURPLUS = 0.005  # Megatron's --mid-level-dataset-surplus: 0.5% extra so a blend never runs dry


def parse_data_path(items: list[str]) -> tuple[list[str], list[float]]:
    """`[w1, p1, w2, p2, ...]` or `[p1, p2, ...]` -> (prefixes, normalised weights). Without weights,
    every dataset weighs the same here (Megatron then weighs by size; the trainer does that)."""
    if not items:
        raise TextmillError("--data-path needs at least one dataset prefix")

    if len(items) % 2 == 0:
        weights = [_as_float(x) for x in items[0::2]]
        if all(w is not None for w in weights):
            if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
                raise TextmillError(f"--data-path weights must be non-negative and not all zero: {items[0::2]}")
            return list(items[1::2]), normalize(weights)
    return list(items), normalize([1.0] * len(items))


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def normalize(weights: list[float]) -> list[float]:
    w = np.asarray(weights, dtype=np.float64)
    return (w / w.sum()).tolist()


def samples_per_dataset(weights: list[float], num_samples: int, surplus: float = SURPLUS) -> list[int]:
    return [int(math.ceil(math.ceil(num_samples * w) * (1 + surplus))) for w in weights]


def blending_indices(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset index int16, sample index within that dataset int64) for each of `size` samples."""
    dataset_index = np.zeros(size, dtype=np.int16)
    sample_index = np.zeros(size, dtype=np.int64)
    used = [0] * len(weights)
    order = range(len(weights))
    for k in range(size):
        kk = max(float(k), 1.0)
        best = max(order, key=lambda i: (weights[i] * kk - used[i], -i))
        dataset_index[k] = best
        sample_index[k] = used[best]
        used[best] += 1
    return dataset_index, sample_index
