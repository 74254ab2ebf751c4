"""Seeded global shuffle that scales past memory (the `shuf` step of Megatron-LM's OpenWebText recipe).

Scatter: every document goes to one of `num_shards` buckets chosen by a keyed hash of its id (the seed
is the key), streamed to disk. Gather: each bucket, small enough to hold in memory, is permuted by a
generator seeded with (seed, bucket) and written as one output shard. Memory is one bucket, not the
corpus; the same inputs and seed give the same bytes.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from tqdm import tqdm

from textmill.errors import TextmillError
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput, ShardWriter, reject_schema

_SCATTER_BATCH_ROWS = 64  # rows buffered per bucket: bounds memory with many buckets


def bucket_of(doc_id: str, seed: int, num_shards: int) -> int:
    key = seed.to_bytes(8, "little", signed=True)
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8, key=key).digest(), "little") % num_shards


def shuffle_shards(inputs: list[Path], output_dir: Path, num_shards: int, seed: int) -> list[dict]:
    """Shuffle all documents of `inputs` into `output_dir/part-NNNNN.parquet`; returns the manifests.
    Bad records of loose-JSON inputs are rejected (with reason) into the shard their id hashes to."""
    if num_shards < 1:
        raise TextmillError(f"num_shards must be at least 1, not {num_shards}")
    scratch = output_dir / ".shuffle-scatter"
    shutil.rmtree(scratch, ignore_errors=True)
    scatter_schema = reject_schema(DOC_SCHEMA)  # the reason column carries bad input records along
    writers = [
        ShardWriter(scratch / f"b{b:05d}.parquet", scatter_schema, _SCATTER_BATCH_ROWS) for b in range(num_shards)
    ]
    total = 0
    for shard in tqdm(inputs, desc="shuffle scatter", unit="shard", disable=None):
        for row, bad in iter_documents(shard):
            writers[bucket_of(row["id"], seed, num_shards)].write({**row, "reason": bad})
            total += 1
    for w in writers:
        w.close()

    manifests = []
    params = {"num_shards": num_shards, "seed": seed}
    for b, w in enumerate(tqdm(writers, desc="shuffle gather", unit="shard", disable=None)):
        table = pq.read_table(w.path)
        order = np.random.default_rng([seed, b]).permutation(table.num_rows)
        with ShardOutput("shuffle", output_dir / f"part-{b:05d}.parquet", DOC_SCHEMA, inputs, params) as stage:
            for row in table.take(order).to_pylist():
                reason = row.pop("reason")
                if reason:
                    stage.reject(row, reason)
                else:
                    stage.keep(row)
            manifests.append(stage.finish(table.num_rows))
    shutil.rmtree(scratch)
    if sum(m["counts"]["input"] for m in manifests) != total:
        raise AssertionError("shuffle lost or duplicated documents")
    return manifests
