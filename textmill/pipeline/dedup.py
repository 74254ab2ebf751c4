"""Exact and near-duplicate removal, after Megatron-LM's find_duplicates.py (MinHash LSH) and datatrove.

Exact duplicates are documents whose lower-cased words are the same (mirrors, reposts, pages that differ
in case, punctuation or whitespace): a 128-bit hash of those words finds them, exactly. Near duplicates
are pairs whose MinHash signatures estimate a Jaccard similarity of at least the threshold. (Word
shingles of the same words are the same, so MinHash finds exact duplicates too; the hash names them as
such.)

Five steps, each a task of its own in a run, so that many workers share the work and no step holds the
corpus in memory:
1. `signature_shard`, per shard: the hash of every document's words and its MinHash signature (datasketch's
   affine32 scheme, minhash.MinHasher: the shingles of many documents hashed at once on arrays), saved as
   NAME.minhash.parquet. Signatures of old shards are reused when new shards arrive.
2. `band_keys_shard`, per shard: each of the `bands` LSH bands (`num_perm / bands` values) hashed to a
   64-bit key, the id hashed as one more band, and the words' hash as one more; each band sorted by key
   in runs of RUN_ROWS documents (an external sort: the memory of a run, whatever the shard's size).
3. `band_pairs`, per band: a streaming merge of every shard's sorted runs, a block of each at a time in NumPy
   (`merged_blocks`); documents with equal keys are candidates, each paired with the first of them. Memory: about two
   blocks of STREAM_ROWS keys per run, plus the pairs.
4. `cluster_pairs`, once: candidate pairs confirmed, the words' hash band's by the whole hash, the LSH
   bands' by the Jaccard similarity the signatures estimate (>= threshold), joined by union-find; only the candidates'
   signatures are read, so memory follows the duplicates, not the documents. The keeper of a cluster is its first
   document in corpus order (sorted shard name, then row): deterministic, and older shards keep their documents when
   new ones arrive. The same id in two shards (the id band's pairs) is an error.
5. `filter_shard`, per shard: documents that are not keepers are rejected with `exact_duplicate_of=<id>`
   when their words are the keeper's, else `near_duplicate_of=<id>`.

Shingles are word 5-grams by default (datatrove's choice: unrelated pages share few of them, so the LSH
yields few false candidates); `shingle_unit="char"` gives Megatron's character 5-grams.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from textmill.errors import TextmillError
from textmill.io.files import atomic_path, file_fingerprint, read_json, write_json
from textmill.io.progress import progress
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.minhash import MinHasher
from textmill.pipeline.shingles import words_hash
from textmill.pipeline.shards import write_table
from textmill.pipeline.stage import Verdict, filter_documents
from textmill.pipeline.stage_configs import DedupConfig

STREAM_ROWS = 1024  # keys a block of a shard's stream in a band's merge (it holds about two blocks of every stream)


def _signature_schema(cfg: DedupConfig, shard: Path, max_document_bytes: int) -> pa.Schema:
    made_from = {**cfg.signature_params(), "shard_sha256": file_fingerprint(shard)["sha256"], "words_hash": "blake2b-128",
                 "max_document_bytes": max_document_bytes}
    meta = {b"textmill.minhash": json.dumps(made_from, sort_keys=True).encode()}
    return pa.schema([("id", pa.string()), ("signature", pa.list_(pa.uint32(), cfg.num_perm)),
                      ("words_hash", pa.binary(16))], metadata=meta)


SIGNATURE_ROWS = 1024  # signatures held before they are written, a row group each


def signature_shard(shard: Path, path: Path, cfg: DedupConfig, max_document_bytes: int = 0) -> Path:
    """Compute a shard's signatures into `path`, or reuse `path` when it was made with the same
    parameters from the same shard (new shards added later do not recompute the old ones). Written a row
    group at a time: the memory is a batch of signatures and a words hash per document, whatever the shard."""
    schema = _signature_schema(cfg, shard, max_document_bytes)
    if path.exists() and pq.read_schema(path).metadata == schema.metadata:
        return path
    hasher = MinHasher(cfg)
    ids: list[str] = []
    hashes: list[bytes] = []

    def write(writer: pq.ParquetWriter) -> None:
        values = pa.FixedSizeListArray.from_arrays(pa.array(hasher.take().reshape(-1), pa.uint32()), cfg.num_perm)
        writer.write_table(pa.table({"id": pa.array(ids, pa.string()), "signature": values,
                                     "words_hash": pa.array(hashes, pa.binary(16))}, schema=schema))
        ids.clear()
        hashes.clear()

    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for row, bad in progress(iter_documents(shard, max_document_bytes), desc=f"minhash {shard.stem}", unit="doc"):
            if bad:
                continue  # rejected with its reason by filter_shard
            text = row["text"] or ""
            ids.append(row["id"])
            hashes.append(words_hash(text))
            hasher.add(text)
            if len(ids) == SIGNATURE_ROWS:
                write(writer)
        if ids:
            write(writer)
    return path


class UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # the smaller index is the root: the first document in corpus order keeps
            self.parent[max(ra, rb)] = min(ra, rb)


def band_keys(block: np.ndarray) -> np.ndarray:
    """One uint64 key per row of a band, a polynomial hash of its values (wrapping arithmetic). A rare
    collision only adds a candidate pair, which the Jaccard check then rejects."""
    keys = np.zeros(block.shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for col in block.T:
            keys = keys * np.uint64(0x9E3779B97F4A7C15) + col.astype(np.uint64)
    return keys


def id_keys(ids: list[str]) -> np.ndarray:
    """A 64-bit hash of each document id: the extra "band" by which one id in two places is found."""
    return np.array([int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little") for i in ids],
                    np.uint64)


def hash_keys(hashes: list[bytes]) -> np.ndarray:
    """The first 64 bits of each words hash: the extra "band" by which exact duplicates are found."""
    return np.array([int.from_bytes(h[:8], "little") for h in hashes], np.uint64)


def signature_groups(path: Path, num_perm: int, rows: np.ndarray | None = None):
    """(first row number, ids, signatures, words hashes) of a signature file, a row group at a time; with
    `rows` (sorted row numbers), only the row groups that hold one of them."""
    reader = pq.ParquetFile(path)
    first = 0
    for group in range(reader.num_row_groups):
        size = reader.metadata.row_group(group).num_rows
        if rows is None or np.any((rows >= first) & (rows < first + size)):
            table = reader.read_row_group(group)
            flat = table.column("signature").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            yield (first, table.column("id").to_pylist(), flat.reshape(-1, num_perm).astype(np.uint32, copy=False),
                   table.column("words_hash").to_pylist())
        first += size


def signature_runs(path: Path, num_perm: int, run_rows: int):
    """(first row number, ids, signatures, words hashes) of a signature file in runs of `run_rows` rows
    (the last one shorter)."""
    first, ids, hashes, sigs = 0, [], [], []
    for _, group_ids, group_sigs, group_hashes in itertools.chain(signature_groups(path, num_perm), [(0, [], None, [])]):
        ids += group_ids
        hashes += group_hashes
        sigs += [] if group_sigs is None else [group_sigs]
        while len(ids) >= run_rows or (group_sigs is None and ids):
            held = np.concatenate(sigs)
            yield first, ids[:run_rows], held[:run_rows], hashes[:run_rows]
            first += len(ids[:run_rows])
            ids, hashes, sigs = ids[run_rows:], hashes[run_rows:], [held[run_rows:]]


def bands_record(bands_file: Path) -> Path:
    return bands_file.with_name(bands_file.name.removesuffix(".parquet") + ".json")


RUN_ROWS = 16384  # documents whose band keys are sorted together: a sorted run, merged with the others by band


def band_keys_shard(signatures: Path, output: Path, cfg: DedupConfig) -> dict:
    """Step 2, per shard: the key of every LSH band of each document, of its id (band number `bands`) and,
    with exact_duplicates, of its words hash (band `bands + 1`), into `output`, then its record (rows per
    run of documents) last. An external sort: the documents are taken RUN_ROWS at a time, and each band's
    keys of a run sorted by (key, row) into a row group of their own (number run * bands + band), which
    the band's merge reads as one sorted stream; the memory is a run's, whatever the shard's size."""
    runs: list[int] = []
    bands = cfg.bands + 1 + cfg.exact_duplicates
    schema = pa.schema([("key", pa.uint64()), ("row", pa.uint32())])
    with atomic_path(output) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for first, ids, sigs, hashes in signature_runs(signatures, cfg.num_perm, RUN_ROWS):
            blocks = [band_keys(sigs[:, b * cfg.rows : (b + 1) * cfg.rows]) for b in range(cfg.bands)] + [id_keys(ids)]
            blocks += [hash_keys(hashes)] if cfg.exact_duplicates else []
            for keys in blocks:
                order = np.argsort(keys, kind="stable")
                writer.write_table(pa.table({"key": pa.array(keys[order], pa.uint64()),
                                             "row": pa.array(order + first, pa.uint32())}, schema=schema),
                                   row_group_size=len(ids))
            runs.append(len(ids))
    record = {"signatures": signatures.name, "rows": sum(runs), "bands": bands, "runs": runs}
    write_json(record, bands_record(output))
    return record


def band_stream(path: Path, metadata, group: int, offset: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(keys, corpus document numbers) of one sorted run of one band of a shard (a row group of its keys file, whose
    metadata the shard's streams share; `offset`: the shard's first document number), STREAM_ROWS at a time."""
    batches = pq.ParquetFile(path, metadata=metadata).iter_batches(batch_size=STREAM_ROWS, row_groups=[group],
                                                                   columns=["key", "row"])
    for batch in batches:
        yield (batch.column(0).to_numpy().astype(np.uint64, copy=False),
               batch.column(1).to_numpy().astype(np.int64) + offset)


def merged_blocks(streams: list[Iterator[tuple[np.ndarray, np.ndarray]]]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The k-way merge of sorted streams of (keys, numbers) blocks, in blocks that hold every document of each of
    their keys, each block sorted by (key, number). A round takes from every stream what lies below the smallest last
    key held of the streams that have more blocks (none of those can hold a smaller key later), and holds each
    stream's next block once its block is used up. Keys are hashes, so the streams advance together and a round takes
    about a block of each: NumPy's work per round, not Python's per key. Memory: about two blocks a stream."""
    held = [next(stream, None) for stream in streams]  # what is left of each stream's current block
    ahead = [next(stream, None) if block is not None else None for stream, block in zip(streams, held, strict=True)]
    while True:
        live = [i for i, block in enumerate(held) if block is not None]
        if not live:
            return
        bound = min((held[i][0][-1] for i in live if ahead[i] is not None), default=None)
        cuts = {i: len(held[i][0]) if bound is None else int(np.searchsorted(held[i][0], bound, side="left"))
                for i in live}
        if not any(cuts.values()):  # every key held is the bound's: the streams that end at it hold their next block
            for i in live:
                if ahead[i] is not None and held[i][0][-1] == bound:
                    held[i] = tuple(np.concatenate(pair) for pair in zip(held[i], ahead[i], strict=True))
                    ahead[i] = next(streams[i], None)
            continue
        keys = np.concatenate([held[i][0][: cuts[i]] for i in live])
        numbers = np.concatenate([held[i][1][: cuts[i]] for i in live])
        for i in live:
            rest = (held[i][0][cuts[i] :], held[i][1][cuts[i] :])
            held[i] = rest if len(rest[0]) else ahead[i]
            if not len(rest[0]) and ahead[i] is not None:
                ahead[i] = next(streams[i], None)
        order = np.lexsort((numbers, keys))
        yield keys[order], numbers[order]


def band_pairs(bands_files: list[Path], band: int) -> np.ndarray:
    """Step 3, per band: candidate pairs (first, other) in corpus document numbers. Every shard's sorted
    runs of the band are merged as streams (merged_blocks), so memory is about two blocks of STREAM_ROWS keys per
    run plus the pairs: documents with equal keys are candidates, each paired with the first of them in corpus order,
    which is enough for union-find to join a cluster."""
    records = [read_json(bands_record(f)) for f in bands_files]
    offsets = np.concatenate([[0], np.cumsum([r["rows"] for r in records])]).astype(np.int64)
    allow_open_files(sum(len(r["runs"]) for r in records))
    metadata = [pq.read_metadata(f) if len(r["runs"]) > 1 else None for f, r in zip(bands_files, records, strict=True)]
    streams = [band_stream(f, metadata[s], run * r["bands"] + band, int(offsets[s]))
               for s, (f, r) in enumerate(zip(bands_files, records, strict=True)) for run in range(len(r["runs"]))]
    pairs = [np.zeros((0, 2), np.int64)]
    for keys, numbers in merged_blocks(streams):  # a block holds every document of its keys
        starts = np.concatenate([[True], keys[1:] != keys[:-1]])
        firsts = numbers[starts][np.cumsum(starts) - 1]
        pairs.append(np.stack([firsts[~starts], numbers[~starts]], axis=1))
    return np.concatenate(pairs)


def allow_open_files(streams: int) -> None:
    """Raise this process's soft limit of open files to hold a file per stream of a merge (a shard's run
    each; the soft limit is often 1,024, the hard one much higher), or say why it cannot."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = streams + 256  # the rest of the process's files
    if wanted > soft:
        if hard != resource.RLIM_INFINITY and wanted > hard:
            raise TextmillError(f"dedup merges {streams} sorted runs at once, but this machine allows {hard} open "
                                "files a process (ulimit -Hn): raise it, or cut the input into fewer units "
                                "([input] documents_per_shard, [blacklist] urls_per_shard)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def write_pairs(pairs: np.ndarray, path: Path) -> None:
    write_table(pa.table({"first": pa.array(pairs[:, 0], pa.int64()), "other": pa.array(pairs[:, 1], pa.int64())}), path)


def read_pairs(paths: list[Path]) -> np.ndarray:
    tables = [pq.read_table(p) for p in paths]
    columns = [np.concatenate([t[c].to_numpy() for t in tables] or [np.zeros(0, np.int64)]) for c in ("first", "other")]
    return np.stack(columns, axis=1)


def documents_of(numbers: np.ndarray, signature_files: list[Path], counts: list[int], num_perm: int):
    """The ids, signatures and words hashes of the given corpus document numbers (sorted), read a row group
    at a time from the row groups that hold them."""
    ids: list[str] = []
    hashes: list[bytes] = []
    sigs = np.zeros((len(numbers), num_perm), np.uint32)
    offset = 0
    for path, count in zip(signature_files, counts, strict=True):
        here = numbers[(numbers >= offset) & (numbers < offset + count)] - offset
        if len(here):
            for first, group_ids, group_sigs, group_hashes in signature_groups(path, num_perm, here):
                rows = here[(here >= first) & (here < first + len(group_ids))] - first
                sigs[len(ids) : len(ids) + len(rows)] = group_sigs[rows]
                ids += [group_ids[i] for i in rows]
                hashes += [group_hashes[i] for i in rows]
        offset += count
    return ids, sigs, hashes


def cluster_pairs(pair_files: list[Path], id_pair_files: list[Path], exact_pair_files: list[Path],
                  signature_files: list[Path], counts: list[int], cfg: DedupConfig) -> dict:
    """Step 4: confirm the candidate pairs, those of the words hash band by the whole hash and the LSH
    bands' by the Jaccard similarity the signatures estimate (>= threshold), and join them by union-find.
    Memory follows the candidates, not the corpus: only their documents' signatures are read. Returns
    {"duplicates": {id: keeper id}, "exact": [ids whose words are their keeper's], "cluster_sizes": ...}."""
    same_id = read_pairs(id_pair_files)
    if len(same_id):
        numbers = np.unique(same_id.ravel())
        ids = dict(zip(numbers.tolist(), documents_of(numbers, signature_files, counts, cfg.num_perm)[0], strict=True))
        if any(ids[a] == ids[b] for a, b in same_id.tolist()):
            raise TextmillError("duplicate document ids across shards: the same URL was scraped twice")
    pairs = np.unique(read_pairs(pair_files), axis=0)
    exact_pairs = np.unique(read_pairs(exact_pair_files), axis=0)
    numbers = np.unique(np.concatenate([pairs.ravel(), exact_pairs.ravel()]))
    ids, sigs, hashes = documents_of(numbers, signature_files, counts, cfg.num_perm)
    uf = UnionFind(len(numbers))
    exact_confirmed = 0
    for a, b in np.searchsorted(numbers, exact_pairs).tolist():
        if hashes[a] == hashes[b]:  # the band holds 64 of the 128 bits
            uf.union(a, b)
            exact_confirmed += 1
    local = np.searchsorted(numbers, pairs)  # sorted numbers: local order is corpus order
    confirmed = 0
    for start in range(0, len(local), 65536):
        chunk = local[start : start + 65536]
        similarity = (sigs[chunk[:, 0]] == sigs[chunk[:, 1]]).mean(axis=1)
        for a, b in chunk[similarity >= cfg.threshold]:
            uf.union(int(a), int(b))
            confirmed += 1
    roots = np.array([uf.find(i) for i in range(len(numbers))], dtype=np.int64)
    sizes = np.bincount(roots) if len(roots) else np.zeros(0, np.int64)
    exact = [ids[i] for i, r in enumerate(roots) if r != i and cfg.exact_duplicates and hashes[i] == hashes[r]]
    return {
        "documents": int(sum(counts)),
        "candidate_pairs": int(len(pairs)),
        "confirmed_pairs": confirmed,
        "exact_pairs": exact_confirmed,
        "duplicates": {ids[i]: ids[r] for i, r in enumerate(roots) if r != i},
        "exact": exact,
        "exact_duplicates": len(exact),
        "cluster_sizes": sorted((int(s) for s in sizes if s > 1), reverse=True),
    }


def write_clusters(clusters: dict, cfg: DedupConfig, path: Path) -> None:
    """The clusters record (.clusters.json): the duplicates (id: keeper id), the counts and the parameters, whoever
    ran the steps."""
    write_json({**clusters, "params": cfg.params()}, path)


def filter_shard(shard: Path, output: Path, cfg: DedupConfig, clusters_file: Path, max_document_bytes: int = 0) -> dict:
    """Keep the documents of `shard` that are not duplicates of an earlier one, as the clusters record
    (write_clusters) names them (`exact`: those whose words are their keeper's)."""
    duplicates, exact = read_clusters(clusters_file)

    def decide(row: dict) -> Verdict:
        keeper = duplicates.get(row["id"])
        if keeper is None:
            return row, None
        return row, f"{'exact' if row['id'] in exact else 'near'}_duplicate_of={keeper}"

    return filter_documents("dedup", shard, output, cfg.params(), decide, [shard], max_document_bytes=max_document_bytes)


@functools.lru_cache(maxsize=1)
def _clusters(path: str, stamp: tuple[int, int]) -> tuple[dict[str, str], frozenset[str]]:
    clusters = read_json(Path(path))
    return clusters["duplicates"], frozenset(clusters.get("exact", ()))


def read_clusters(clusters_file: Path) -> tuple[dict[str, str], frozenset[str]]:
    """The clusters record's duplicates (id: keeper id) and exact duplicates' ids, read once per process while the
    file is unchanged (each shard's filter asks, and a grown run asks once more per shard: shard_verdicts)."""
    stat = clusters_file.stat()
    return _clusters(str(clusters_file), (stat.st_mtime_ns, stat.st_size))


def shard_verdicts(shard: Path, clusters_file: Path) -> str:
    """A digest of the clusters' verdicts on the documents of `shard` (each duplicate's id, keeper and kind): with the
    shard's bytes, all that filter_shard's output depends on. An old shard that lost no document to the new ones
    has the digest it had, so its filtered shard is taken again (workflows/reuse.py)."""
    duplicates, exact = read_clusters(clusters_file)
    digest = hashlib.blake2b(digest_size=16)
    for doc_id in pq.read_table(shard, columns=["id"]).column("id").to_pylist():
        keeper = duplicates.get(doc_id)
        if keeper is not None:
            digest.update(json.dumps([doc_id, keeper, doc_id in exact]).encode())
    return digest.hexdigest()
