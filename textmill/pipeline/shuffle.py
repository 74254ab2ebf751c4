"""Seeded global shuffle that scales past memory (the `shuf` step of Megatron-LM's OpenWebText recipe), as
two kinds of independent steps that many workers can run at once.

Scatter, one per input shard (`scatter_shard`): every document goes to one of `num_shards` buckets chosen
by a keyed hash of its id (the seed is the key). The shard is read a batch of SCATTER_ROWS documents at a
time, and each batch's rows are written sorted by bucket, a Parquet row group per bucket it holds, with a
record (NAME.scatter.json, written last) of which row groups hold which bucket. Gather, one per output
shard (`gather_bucket`): bucket b's row groups of every scattered shard, in input order, permuted by a
generator seeded with (seed, b), written as output shard b.

A scatter's memory is one batch, a gather's one bucket, never a whole shard or the corpus; the rows move as
Arrow columns, never as Python objects. The same inputs and seed give the same bytes, whichever worker ran
which step, and whatever the batch size.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, file_fingerprint, is_loose_json, parquet_batches, read_json_record, write_json
from textmill.io.store import open_ranged
from textmill.pipeline.documents import is_foreign_parquet, iter_documents
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput, document_table, reject_schema, shard_kind

SCATTER_SCHEMA = reject_schema(DOC_SCHEMA)  # the reason column carries bad input records along to a reject


def shard_count(input_bytes: int, target_mb: float) -> int:
    """How many output shards give shards of about `target_mb` MiB for `input_bytes` of input shards (rows
    keep their size through a shuffle), at least one."""
    return max(1, math.ceil(input_bytes / (target_mb * 2**20)))


def bucket_of(doc_id: str, seed: int, num_shards: int) -> int:
    key = seed.to_bytes(8, "little", signed=True)
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8, key=key).digest(), "little") % num_shards


def scatter_record(scattered: Path) -> Path:
    return scattered.with_name(scattered.stem + ".scatter.json")


SCATTER_ROWS = 4096  # documents a scatter reads at a time
SCATTER_BUFFER_BYTES = 64 << 20  # documents a scatter holds before it writes every bucket's as a row group


def document_batches(shard: Path, max_document_bytes: int = 0) -> Iterator[pa.Table]:
    """A shard's documents as tables of SCATTER_SCHEMA of at most SCATTER_ROWS rows (reason set for a bad
    record of another tool's file)."""
    if is_loose_json(shard) or is_foreign_parquet(shard):
        rows = ({**row, "reason": bad} for row, bad in iter_documents(shard, max_document_bytes))
        while batch := list(itertools.islice(rows, SCATTER_ROWS)):
            yield pa.Table.from_pylist(batch, schema=SCATTER_SCHEMA)
        return
    try:
        reader = pq.ParquetFile(shard)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TextmillError(f"cannot read Parquet shard {shard}: {exc}") from None
    if shard_kind(reader.schema_arrow) != "document":
        next(iter_documents(shard), None)  # names what the shard holds instead
    for batch in parquet_batches(reader, SCATTER_ROWS):
        table = document_table(pa.Table.from_batches([batch]))
        yield table.append_column("reason", pa.nulls(table.num_rows, pa.string()))


def scatter_shard(shard: Path, output: Path, num_shards: int, seed: int, max_document_bytes: int = 0) -> dict:
    """Write `shard`'s documents to `output` grouped by bucket, then the record saying which row groups hold
    each bucket; returns the record. Rows keep their input order within a bucket. Each bucket's rows are
    held until SCATTER_BUFFER_BYTES are held in all, then every bucket is written as a row group: a unit
    of ordinary size gives one row group per bucket (few and large, which each gather reads), a large one
    a few per bucket, its memory bounded all the same."""
    row_groups: dict[str, list[int]] = {}
    rows = groups = held_bytes = 0
    held: dict[int, list[pa.Table]] = {}

    def flush(writer: pq.ParquetWriter) -> None:
        nonlocal groups, held_bytes
        for bucket in sorted(held):
            part = pa.concat_tables(held[bucket]).combine_chunks()
            writer.write_table(part, row_group_size=part.num_rows)
            row_groups.setdefault(str(bucket), []).append(groups)
            groups += 1
        held.clear()
        held_bytes = 0

    with atomic_path(output) as tmp:
        with pq.ParquetWriter(tmp, SCATTER_SCHEMA, compression="zstd") as writer:
            for table in document_batches(shard, max_document_bytes):
                buckets = np.fromiter((bucket_of(i, seed, num_shards) for i in table["id"].to_pylist()), np.int64,
                                      table.num_rows)
                order = np.argsort(buckets, kind="stable")
                table, buckets = table.take(order), buckets[order]
                starts = np.flatnonzero(np.diff(buckets, prepend=-1))
                for start, end in zip(starts, [*starts[1:], len(buckets)], strict=True):
                    held.setdefault(int(buckets[start]), []).append(table.slice(start, end - start))
                held_bytes += table.nbytes
                rows += table.num_rows
                if held_bytes >= SCATTER_BUFFER_BYTES:
                    flush(writer)
            flush(writer)
    record = {"input": file_fingerprint(shard), "output": output.name, "rows": rows,
              "num_shards": num_shards, "seed": seed,
              "max_document_bytes": max_document_bytes, "row_groups": row_groups}
    write_json(record, scatter_record(output))
    return record


def gather_bucket(scattered: list[Path], bucket: int, output: Path, num_shards: int, seed: int) -> dict:
    """Output shard `bucket`: that bucket's rows of every scattered shard, in the order given, permuted with
    (seed, bucket); bad input records go to its rejects. Returns its manifest."""
    parts, records = [], [scatter_record(s) for s in scattered]
    for path, record_file in zip(scattered, records, strict=True):
        record = read_json_record(record_file, "scatter that shard again")
        if record is None:
            raise TextmillError(f"{path} has no whole scatter record; scatter its input again")
        groups = record["row_groups"].get(str(bucket), [])
        if groups:
            with open_ranged(path) as source:  # in a store, only these row groups are downloaded
                reader = pq.ParquetFile(source)
                # (a scatter of textmill 0.2.0 wrote one row group per bucket, its number alone)
                parts.extend(reader.read_row_group(g) for g in ([groups] if isinstance(groups, int) else groups))
    table = pa.concat_tables([SCATTER_SCHEMA.empty_table(), *parts]).combine_chunks()
    table = table.take(np.random.default_rng([seed, bucket]).permutation(table.num_rows))
    bad = pc.is_valid(table["reason"])
    params = {"num_shards": num_shards, "seed": seed}
    with ShardOutput("shuffle", output, DOC_SCHEMA, records, params) as stage:
        stage.keep_table(table.filter(pc.invert(bad)).drop_columns(["reason"]))
        stage.reject_table(table.filter(bad))
        return stage.finish(table.num_rows)


def empty_shards_note(manifests: list[dict]) -> str | None:
    """A line saying how many shuffled shards came out empty (more shards asked for than documents), if any."""
    empty = sum(1 for m in manifests if m["counts"]["input"] == 0)
    if not empty:
        return None
    documents = sum(m["counts"]["input"] for m in manifests)
    return (f"note: {empty} of the {len(manifests)} shuffled shards are empty ({documents} documents); ask for "
            "fewer shards, or none (num_shards 0) to size them by target_shard_mb")
