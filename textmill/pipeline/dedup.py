"""Near-duplicate removal with MinHash LSH, after Megatron-LM's find_duplicates.py and datatrove.

Three steps, so the expensive one is sharded and reusable:
1. `signature_shard`: datasketch MinHash signatures of every document of one shard, computed with
   `update_batch` (hashing and the permutation minimum are vectorised over all shingles of a document,
   never a Python loop over shingles x permutations), saved per shard as NAME.minhash.parquet.
   Signatures of old shards are reused when new shards arrive.
2. `find_clusters`: LSH banding over all signatures (`bands` bands of `num_perm / bands` rows), candidate
   pairs confirmed by the Jaccard similarity the signatures estimate (>= threshold), clusters by
   union-find. The keeper of a cluster is its first document in corpus order (sorted shard name, then
   row), so the choice is deterministic and older shards keep their documents when new ones arrive.
3. `filter_shard`: documents that are not keepers are rejected with reason `near_duplicate_of=<id>`.

Shingles are word 5-grams by default (datatrove's choice: unrelated pages share few of them, so the LSH
yields few false candidates); `shingle_unit="char"` gives Megatron's character 5-grams.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from textmill.errors import TextmillError
from textmill.io.files import file_fingerprint, write_json
from textmill.pipeline.config import DedupConfig
from textmill.pipeline.documents import iter_documents
from textmill.pipeline.shards import DOC_SCHEMA, ShardOutput, write_table

_WORD = re.compile(r"\w+")
_HASH_CHUNK = 8192  # shingles per update_batch call: bounds the (shingles x num_perm) matrix


def shingles(text: str, size: int, unit: str) -> set[bytes]:
    """The set of shingles of a text: lower-cased word n-grams or character n-grams, as UTF-8 bytes.
    A text shorter than one shingle is its own single shingle, so it still gets a signature."""
    if unit == "word":
        words = _WORD.findall(text.lower())
        return {" ".join(words[i : i + size]).encode() for i in range(max(len(words) - size + 1, 1))}
    text = " ".join(text.lower().split())
    return {text[i : i + size].encode() for i in range(max(len(text) - size + 1, 1))}


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int):
    from datasketch import MinHash  # here, not at the top: datasketch brings scipy, which `--help` need not load

    return MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations


def signature(text: str, cfg: DedupConfig) -> np.ndarray:
    """The MinHash signature (uint32[num_perm]) of one document."""
    from datasketch import MinHash

    # crc32 is a deterministic C hash; datasketch's affine scheme avalanches it before permuting.
    # The permutations are drawn once per (num_perm, seed), not per document.
    m = MinHash(
        num_perm=cfg.num_perm,
        seed=cfg.seed,
        hashfunc=zlib.crc32,
        permutations=_permutations(cfg.num_perm, cfg.seed),
        scheme="affine32",
    )
    grams = list(shingles(text, cfg.shingle_size, cfg.shingle_unit))
    for start in range(0, len(grams), _HASH_CHUNK):
        m.update_batch(grams[start : start + _HASH_CHUNK])
    return m.hashvalues.astype(np.uint32)


def _signature_schema(cfg: DedupConfig, shard: Path) -> pa.Schema:
    made_from = {**cfg.signature_params(), "shard_sha256": file_fingerprint(shard)["sha256"]}
    meta = {b"textmill.minhash": json.dumps(made_from, sort_keys=True).encode()}
    return pa.schema([("id", pa.string()), ("signature", pa.list_(pa.uint32(), cfg.num_perm))], metadata=meta)


def signature_shard(shard: Path, path: Path, cfg: DedupConfig) -> Path:
    """Compute a shard's signatures into `path`, or reuse `path` when it was made with the same
    parameters from the same shard (new shards added later do not recompute the old ones)."""
    schema = _signature_schema(cfg, shard)
    if path.exists() and pq.read_schema(path).metadata == schema.metadata:
        return path
    ids, sigs = [], []
    for row, bad in tqdm(iter_documents(shard), desc=f"minhash {shard.stem}", unit="doc", disable=None):
        if bad:
            continue  # rejected with its reason by filter_shard
        ids.append(row["id"])
        sigs.append(signature(row["text"] or "", cfg))
    matrix = np.stack(sigs) if sigs else np.zeros((0, cfg.num_perm), np.uint32)
    values = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.uint32()), cfg.num_perm)
    write_table(pa.table({"id": pa.array(ids, pa.string()), "signature": values}, schema=schema), path)
    return path


def load_signatures(paths: list[Path], cfg: DedupConfig) -> tuple[list[str], np.ndarray]:
    ids: list[str] = []
    blocks = []
    for path in paths:
        table = pq.read_table(path)
        ids.extend(table.column("id").to_pylist())
        flat = table.column("signature").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        blocks.append(flat.reshape(-1, cfg.num_perm).astype(np.uint32, copy=False))
    return ids, (np.concatenate(blocks) if blocks else np.zeros((0, cfg.num_perm), np.uint32))


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


def candidate_pairs(sigs: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """Pairs (i, j), i < j, that share at least one LSH band: each band of `rows` values is hashed to
    one 64-bit key; documents with equal keys in a band are candidates. Within a bucket every member is
    paired with the bucket's first member, which is enough for union-find to join a true cluster."""
    n = sigs.shape[0]
    pairs = []
    for band in range(cfg.bands):
        keys = band_keys(sigs[:, band * cfg.rows : (band + 1) * cfg.rows])
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        run = np.diff(np.r_[starts, n])
        for s, length in zip(starts[run > 1], run[run > 1]):
            members = order[s : s + length]
            first = members.min()
            pairs.append(np.stack([np.full(length - 1, first), members[members != first]], axis=1))
    if not pairs:
        return np.zeros((0, 2), np.int64)
    return np.unique(np.concatenate(pairs), axis=0)


def find_clusters(signature_paths: list[Path], cfg: DedupConfig) -> dict:
    """Cluster all documents; returns {"duplicates": {id: keeper id}, "cluster_sizes": [...], ...}."""
    ids, sigs = load_signatures(signature_paths, cfg)
    if len(set(ids)) != len(ids):
        raise TextmillError("duplicate document ids across shards: the same URL was scraped twice")
    pairs = candidate_pairs(sigs, cfg)
    confirmed = 0
    uf = UnionFind(len(ids))
    for start in range(0, len(pairs), 65536):
        chunk = pairs[start : start + 65536]
        similarity = (sigs[chunk[:, 0]] == sigs[chunk[:, 1]]).mean(axis=1)
        for a, b in chunk[similarity >= cfg.threshold]:
            uf.union(int(a), int(b))
            confirmed += 1
    roots = np.array([uf.find(i) for i in range(len(ids))], dtype=np.int64)
    duplicates = {ids[i]: ids[r] for i, r in enumerate(roots) if r != i}
    sizes = np.bincount(roots)
    return {
        "documents": len(ids),
        "candidate_pairs": int(len(pairs)),
        "confirmed_pairs": confirmed,
        "duplicates": duplicates,
        "cluster_sizes": sorted((int(s) for s in sizes if s > 1), reverse=True),
    }


def dedup_shards(shards: list[Path], output_dir: Path, cfg: DedupConfig) -> tuple[list[dict], dict]:
    """Signatures (reused when current), clusters (written to clusters.json) and the filtered shards.
    Returns the shard manifests and the cluster summary."""
    sigs = [signature_shard(s, output_dir / f"{s.stem}.minhash.parquet", cfg) for s in shards]
    clusters = find_clusters(sigs, cfg)
    duplicates = clusters.pop("duplicates")
    write_json({**clusters, "params": cfg.params()}, output_dir / "clusters.json")
    manifests = [
        filter_shard(s, output_dir / f"{s.stem}.parquet", duplicates, cfg, [s])
        for s in tqdm(shards, desc="dedup filter", unit="shard", disable=None)
    ]
    return manifests, clusters


def filter_shard(shard: Path, output: Path, duplicates: dict[str, str], cfg: DedupConfig, inputs: list[Path]) -> dict:
    """Keep the documents of `shard` that are not near-duplicates of an earlier one."""
    n = 0
    with ShardOutput("dedup", output, DOC_SCHEMA, inputs, cfg.params()) as stage:
        for row, bad in iter_documents(shard):
            n += 1
            keeper = duplicates.get(row["id"])
            if bad:
                stage.reject(row, bad)
            elif keeper is None:
                stage.keep(row)
            else:
                stage.reject(row, f"near_duplicate_of={keeper}")
        return stage.finish(n)
