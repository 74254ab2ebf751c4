"""Building the GPT sample index (document, sample and shuffle indices) for about a billion tokens.

    python benchmarks/bench_data_index.py [--tokens 1e9] [--seq-length 1024]

textmill builds all three indices with numpy (one searchsorted for the sample starts). The baseline is
Megatron's own way in the same run: the same numpy shuffles plus megatron-core's C++ `build_sample_idx`
(needs megatron-core, installed with the test extra). Both must give the same arrays.
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import date

import numpy as np

from textmill.trainer.data import build_document_index, build_indices, build_shuffle_index, num_epochs_for


def megatron_style(build_sample_idx, sizes, documents, seq_len, num_samples, seed):
    tokens = int(sizes[documents].sum(dtype=np.int64))
    epochs = num_epochs_for(tokens, num_samples, seq_len)
    rng = np.random.RandomState(seed)
    doc_idx = build_document_index(documents, epochs, rng, False)
    sample_idx = build_sample_idx(sizes, doc_idx, seq_len, epochs, tokens, True, True)
    return doc_idx, sample_idx, build_shuffle_index(sample_idx.shape[0] - 1, sample_idx.shape[0] - 1, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=1e9, help="tokens in the generated dataset")
    parser.add_argument("--seq-length", type=int, default=1024, help="tokens per sample")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 2000, int(args.tokens / 1000)).astype(np.int32)  # documents of 1,000 tokens on average
    documents = np.arange(len(sizes), dtype=np.int32)
    num_samples = (int(sizes.sum()) - 1) // args.seq_length
    rows = []
    started = time.perf_counter()
    ours = build_indices(sizes, documents, args.seq_length, num_samples, 1234)
    rows.append(("textmill (numpy searchsorted)", time.perf_counter() - started))
    try:
        from megatron.core.datasets.helpers import build_sample_idx  # imported before the clock starts

        started = time.perf_counter()
        theirs = megatron_style(build_sample_idx, sizes, documents, args.seq_length, num_samples, 1234)
        rows.append(("Megatron-style (numpy shuffles + megatron-core C++ sample index)", time.perf_counter() - started))
        same = all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    except ImportError:
        same = "not checked (megatron-core not installed)"
    print(f"Run {date.today()} on {platform.machine()}, Python {platform.python_version()}: {int(sizes.sum()):,} tokens in "
          f"{len(sizes):,} documents, {num_samples:,} samples of {args.seq_length}; same arrays: {same}\n")
    print("| method | seconds | vs textmill |\n|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {seconds / rows[0][1]:.2f}x |")


if __name__ == "__main__":
    main()
